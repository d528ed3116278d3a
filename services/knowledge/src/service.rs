//! The knowledge service: the `knowledge` control API (NATS micro service
//! `xo-knowledge`: list, get, put, deprecate, select, uses) and a watcher
//! that announces documents edited by hand on `xo.knowledge.changed.<category>`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;
use tokio::task::JoinHandle;
use tracing::{info, warn};
use xo_bus::{Bus, ServiceRequest, ServiceSpec, typed};
use xo_proto::Request;
use xo_proto::control::{ErrorCode, ServiceError};
use xo_proto::knowledge::*;
use xo_proto::{Format, Subjects};
use xo_runtime::XoConfig;

use crate::store::{KnowledgeStore, StoreError};

struct State {
    store: KnowledgeStore,
    /// The folder as last seen, so our own writes are not announced as edits.
    seen: BTreeMap<String, (u64, u128)>,
}

struct Ctx {
    bus: Bus,
    subjects: Subjects,
    format: Format,
    budget: usize,
    establish_after: u32,
    state: Mutex<State>,
}

#[derive(Debug)]
pub struct KnowledgeHandle {
    tasks: Vec<JoinHandle<()>>,
}

impl KnowledgeHandle {
    pub async fn stop(self) {
        for t in self.tasks {
            t.abort();
            let _ = t.await;
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum KnowledgeError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("bus: {0}")]
    Bus(#[from] xo_bus::BusError),
}

fn service_error(e: StoreError) -> ServiceError {
    let code = match &e {
        StoreError::NotFound(_) => ErrorCode::NotFound,
        StoreError::Invalid(_) | StoreError::Refused(_) => ErrorCode::Invalid,
        StoreError::Io { .. } => ErrorCode::Internal,
    };
    ServiceError::new(code, e.to_string())
}

const VERBS: [&str; 6] = [
    ListDocs::VERB,
    GetDoc::VERB,
    PutDoc::VERB,
    DeprecateDoc::VERB,
    Select::VERB,
    RecordUses::VERB,
];

pub async fn start(cfg: &XoConfig, bus: Bus) -> Result<KnowledgeHandle, KnowledgeError> {
    let store = KnowledgeStore::open(&cfg.knowledge_dir())?;
    let (_, invalid) = store.load_all();
    for i in &invalid {
        warn!(path = %i.path, error = %i.error, "knowledge document does not parse; not used until fixed");
    }
    let seen = store.fingerprint();
    let ctx = Arc::new(Ctx {
        bus: bus.clone(),
        subjects: cfg.subjects(),
        format: cfg.wire.format,
        budget: cfg.knowledge.budget_tokens,
        establish_after: cfg.knowledge.establish_after,
        state: Mutex::new(State { store, seen }),
    });
    let mut ep = bus
        .serve(ServiceSpec {
            name: "xo-knowledge".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: "XO knowledge store: documents, ownership, selection".into(),
            group: ctx.subjects.ctl_group(KNOWLEDGE),
            verbs: VERBS.map(String::from).to_vec(),
        })
        .await?;
    info!(dir = %cfg.knowledge_dir().display(), "knowledge service started");
    let c = ctx.clone();
    let api = tokio::spawn(async move {
        while let Some(req) = ep.next().await {
            handle(&c, req).await;
        }
        ep.stop().await;
    });
    let c = ctx.clone();
    let every = Duration::from_millis(cfg.knowledge.poll_ms);
    let watcher = tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        loop {
            tick.tick().await;
            watch(&c).await;
        }
    });
    Ok(KnowledgeHandle {
        tasks: vec![api, watcher],
    })
}

async fn announce(ctx: &Ctx, id: &str, change: &str, by: &str) {
    let category = id.split('/').next().unwrap_or("unknown");
    let ev = KnowledgeChanged {
        v: xo_proto::PROTOCOL_VERSION,
        id: id.to_string(),
        change: change.to_string(),
        by: by.to_string(),
        at: xo_proto::now_ms(),
    };
    if let Err(e) = typed::publish(
        &ctx.bus,
        &ctx.subjects.knowledge_changed(category),
        &ev,
        ctx.format,
    )
    .await
    {
        warn!(error = %e, "knowledge change not announced");
    }
}

/// Finds documents edited, added or removed by hand since the last look.
async fn watch(ctx: &Ctx) {
    let mut st = ctx.state.lock().await;
    let now = st.store.fingerprint();
    if now == st.seen {
        return;
    }
    let mut changed = Vec::new();
    for (id, fp) in &now {
        if st.seen.get(id) != Some(fp) {
            changed.push((id.clone(), "disk"));
        }
    }
    for id in st.seen.keys() {
        if !now.contains_key(id) {
            changed.push((id.clone(), "removed"));
        }
    }
    st.seen = now;
    let _ = st.store.write_index();
    let mut out = Vec::new();
    for (id, change) in changed {
        if change == "disk"
            && let Err(StoreError::Invalid(e)) = st.store.get(&id)
        {
            warn!(file = %e.path, line = e.line, error = %e.reason, "knowledge document edited by hand does not parse; not used until fixed");
            out.push((id, "invalid"));
            continue;
        }
        info!(id = %id, change, "knowledge document changed on disk");
        out.push((id, change));
    }
    drop(st);
    for (id, change) in out {
        announce(ctx, &id, change, "disk").await;
    }
}

async fn handle(ctx: &Ctx, req: ServiceRequest) {
    macro_rules! decode {
        ($t:ty) => {
            match typed::decode_request::<$t>(&req.message) {
                Ok(r) => r,
                Err(e) => return req.reply::<()>(Err(e)).await,
            }
        };
    }
    match req.verb() {
        v if v == ListDocs::VERB => {
            let r = decode!(ListDocs);
            let st = ctx.state.lock().await;
            let list = st.store.list(r.category);
            drop(st);
            req.reply(Ok(list)).await
        }
        v if v == GetDoc::VERB => {
            let r = decode!(GetDoc);
            let st = ctx.state.lock().await;
            let res = st.store.get(&r.id).map_err(service_error);
            drop(st);
            req.reply(res).await
        }
        v if v == PutDoc::VERB => {
            let r = decode!(PutDoc);
            let mut st = ctx.state.lock().await;
            let res = st.store.put(r.doc, r.author, r.task.as_deref());
            st.seen = st.store.fingerprint();
            drop(st);
            if let Ok(d) = &res {
                info!(id = %d.id(), by = r.author.as_str(), "knowledge document written");
                announce(ctx, &d.id(), "put", r.author.as_str()).await;
            }
            req.reply(res.map_err(service_error)).await
        }
        v if v == DeprecateDoc::VERB => {
            let r = decode!(DeprecateDoc);
            let mut st = ctx.state.lock().await;
            let res = st.store.deprecate(&r.id, r.author, &r.reason);
            st.seen = st.store.fingerprint();
            drop(st);
            if res.is_ok() {
                announce(ctx, &r.id, "deprecate", r.author.as_str()).await;
            }
            req.reply(res.map_err(service_error)).await
        }
        v if v == Select::VERB => {
            let r = decode!(Select);
            let st = ctx.state.lock().await;
            let sel = st.store.select(
                r.milestone.as_deref(),
                r.budget_tokens.unwrap_or(ctx.budget),
            );
            drop(st);
            req.reply(Ok(sel)).await
        }
        v if v == RecordUses::VERB => {
            let r = decode!(RecordUses);
            let mut st = ctx.state.lock().await;
            let res = st.store.record_uses(&r.docs, r.clean, ctx.establish_after);
            st.seen = st.store.fingerprint();
            drop(st);
            if let Ok(p) = &res {
                for id in p {
                    info!(id = %id, "knowledge document established");
                    announce(ctx, id, "promote", "xo").await;
                }
            }
            req.reply(res.map_err(service_error)).await
        }
        other => {
            let e = ServiceError::new(ErrorCode::NotFound, format!("unknown verb {other:?}"));
            req.reply::<()>(Err(e)).await
        }
    }
}
