//! The knowledge service: the `knowledge` control API (NATS micro service
//! `xo-knowledge`: list, get, put, deprecate, review, select, uses) and a watcher
//! that announces documents edited by hand on `xo.knowledge.changed.<category>`.
//!
//! The tree: a one-for-one root over one actor that owns the store (the
//! folder is the state, so a restarted actor reopens it and resumes); the
//! inputs are the control API and the watch ticker. Shutdown: inputs stop,
//! the actor drains, the bus is flushed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tracing::{info, warn};
use xo_bus::api::{ActorPorts, Port};
use xo_bus::{Bus, typed};
use xo_proto::control::{ErrorCode, ServiceError};
use xo_proto::knowledge::*;
use xo_proto::{Format, Subjects};
use xo_runtime::ServiceCtx;
use xo_runtime::tree::{Factory, Intensity, Running};

use crate::store::{KnowledgeError, KnowledgeStore};

/// The knowledge actor's messages: its control API and the watch tick.
#[allow(clippy::large_enum_variant)] // few and rare: a box buys nothing
pub enum KnowledgeMsg {
    Api(KnowledgeApi<ActorPorts>),
    /// Look for documents edited by hand since the last look.
    Watch,
}

impl From<KnowledgeApi<ActorPorts>> for KnowledgeMsg {
    fn from(a: KnowledgeApi<ActorPorts>) -> Self {
        KnowledgeMsg::Api(a)
    }
}

/// The actor (configuration only; the store is its state).
#[derive(Debug, Clone)]
pub struct KnowledgeActor {
    bus: Bus,
    /// Now, for the changes it announces.
    clock: xo_runtime::Clock,
    subjects: Subjects,
    format: Format,
    budget: usize,
    establish_after: u32,
}

pub struct State {
    store: KnowledgeStore,
    /// The folder as last seen, so our own writes are not announced as edits.
    seen: BTreeMap<String, (u64, u128)>,
}

/// A running knowledge service.
#[derive(Debug)]
pub struct KnowledgeHandle {
    running: Running<KnowledgeMsg>,
    bus: Bus,
}

impl KnowledgeHandle {
    /// Waits for `shutdown`, or for the tree to give up.
    pub async fn until(&mut self, shutdown: impl std::future::Future<Output = ()>) {
        self.running.until(shutdown).await
    }

    /// Stops in order: inputs, the actor (drained), the bus flushed.
    pub async fn stop(self) -> Result<(), KnowledgeError> {
        let escalated = self.running.stop().await;
        let _ = self.bus.flush().await;
        escalated.map_err(KnowledgeError::from)
    }
}

fn service_error(e: KnowledgeError) -> ServiceError {
    let code = match &e {
        KnowledgeError::NotFound(_) => ErrorCode::NotFound,
        KnowledgeError::Invalid(_) | KnowledgeError::Check(_) | KnowledgeError::Refused(_) => {
            ErrorCode::Invalid
        }
        KnowledgeError::Io { .. } | KnowledgeError::Bus(_) | KnowledgeError::Runtime(_) => {
            ErrorCode::Internal
        }
    };
    ServiceError::new(code, e.to_string())
}

/// Opens the store, starts the tree, serves the API and watches the folder.
pub async fn start(ctx: ServiceCtx) -> Result<KnowledgeHandle, KnowledgeError> {
    let ServiceCtx {
        cfg,
        bus,
        shutdown,
        clock,
        ..
    } = ctx;
    let cfg = &cfg;
    let dir = cfg.knowledge_dir();
    // Opened once here so a bad folder fails the start, not a restart loop.
    KnowledgeStore::open(&dir)?;
    let actor = KnowledgeActor {
        bus: bus.clone(),
        clock,
        subjects: cfg.subjects(),
        format: cfg.wire.format,
        budget: cfg.knowledge.budget_tokens,
        establish_after: cfg.knowledge.establish_after,
    };
    let factory: Factory<KnowledgeActor> = {
        let dir = dir.clone();
        Arc::new(move || {
            let dir = dir.clone();
            Box::pin(async move { Ok(dir) })
        })
    };
    let mut running = Running::one_for_one("knowledge", actor, Intensity::of(cfg), factory)
        .await?
        .ending_on(shutdown);
    running.input(
        xo_bus::api::serve::<KnowledgeApi<ActorPorts>, _>(
            &bus,
            &cfg.subjects(),
            cfg.wire.max_payload,
            "XO knowledge store: documents, ownership, selection",
            running.current.clone(),
            running.signal(),
        )
        .await?,
    );
    running.every(Duration::from_millis(cfg.knowledge.poll_ms), || {
        KnowledgeMsg::Watch
    });
    info!(dir = %dir.display(), "knowledge service started");
    Ok(KnowledgeHandle { running, bus })
}

impl Actor for KnowledgeActor {
    type Msg = KnowledgeMsg;
    type State = State;
    /// The knowledge folder.
    type Arguments = std::path::PathBuf;

    async fn pre_start(
        &self,
        _myself: ActorRef<KnowledgeMsg>,
        dir: std::path::PathBuf,
    ) -> Result<State, ActorProcessingErr> {
        let store = KnowledgeStore::open(&dir)?.with_clock(self.clock.clone());
        let (_, invalid) = store.load_all();
        for i in &invalid {
            warn!(path = %i.path, error = %i.error, "knowledge document does not parse; not used until fixed");
        }
        let seen = store.fingerprint();
        Ok(State { store, seen })
    }

    async fn handle(
        &self,
        _myself: ActorRef<KnowledgeMsg>,
        msg: KnowledgeMsg,
        st: &mut State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            KnowledgeMsg::Watch => self.watch(st).await,
            KnowledgeMsg::Api(api) => self.api(st, api).await,
        }
        Ok(())
    }
}

fn answer<T: Send + 'static>(port: Port<T>, r: Result<T, KnowledgeError>) {
    let _ = port.send(r.map_err(service_error));
}

impl KnowledgeActor {
    /// Asks the queue to write the decision into the goal's project audit
    /// (`KNOWLEDGE_REVIEWED`, the document's state before and after).
    async fn audit_review(
        &self,
        r: &ReviewDoc,
        doc: &KnowledgeDoc,
        before: DocStatus,
    ) -> Result<(), typed::CallError> {
        let req = xo_proto::queue::RecordKnowledgeReview {
            doc: r.id.clone(),
            accepted: r.accept,
            by: doc
                .changelog
                .last()
                .map(|c| c.by.clone())
                .unwrap_or_default(),
            note: r.note.clone(),
            before: serde_json::json!({"status": before.as_str(), "needs_user_review": true}),
            after: serde_json::json!({"status": doc.status.as_str(), "needs_user_review": false}),
        };
        typed::call(&self.bus, &self.subjects, &req, Duration::from_secs(5))
            .await
            .inspect_err(|e| {
                warn!(id = %r.id, error = %e, "knowledge review decided but not audited: the queue did not take the audit line");
            })
    }

    async fn announce(&self, id: &str, change: &str, by: &str) {
        let category = id.split('/').next().unwrap_or("unknown");
        let ev = KnowledgeChanged {
            v: xo_proto::PROTOCOL_VERSION,
            id: id.to_string(),
            change: change.to_string(),
            by: by.to_string(),
            at: self.clock.now_ms(),
        };
        if let Err(e) = typed::publish(
            &self.bus,
            &self.subjects.knowledge_changed(category),
            &ev,
            self.format,
        )
        .await
        {
            warn!(error = %e, "knowledge change not announced");
        }
    }

    /// Finds documents edited, added or removed by hand since the last look.
    async fn watch(&self, st: &mut State) {
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
                && let Err(KnowledgeError::Invalid(e)) = st.store.get(&id)
            {
                warn!(file = %e.path, line = e.line, error = %e.reason, "knowledge document edited by hand does not parse; not used until fixed");
                out.push((id, "invalid"));
                continue;
            }
            info!(id = %id, change, "knowledge document changed on disk");
            out.push((id, change));
        }
        for (id, change) in out {
            self.announce(&id, change, "disk").await;
        }
    }

    async fn api(&self, st: &mut State, api: KnowledgeApi<ActorPorts>) {
        match api {
            KnowledgeApi::List(r, port) => {
                let _ = port.send(Ok(st.store.list(r.category)));
            }
            KnowledgeApi::Get(r, port) => answer(port, st.store.get(&r.id)),
            KnowledgeApi::Put(r, port) => {
                let res = st.store.put(r.doc, r.author, r.task.as_deref());
                st.seen = st.store.fingerprint();
                if let Ok(d) = &res {
                    info!(id = %d.id(), by = r.author.as_str(), "knowledge document written");
                    self.announce(&d.id(), "put", r.author.as_str()).await;
                }
                answer(port, res)
            }
            KnowledgeApi::Deprecate(r, port) => {
                let res = st.store.deprecate(&r.id, r.author, &r.reason);
                st.seen = st.store.fingerprint();
                if res.is_ok() {
                    self.announce(&r.id, "deprecate", r.author.as_str()).await;
                }
                answer(port, res)
            }
            KnowledgeApi::Review(r, port) => {
                let res = st.store.review(&r.id, r.accept, &r.by, &r.note);
                st.seen = st.store.fingerprint();
                let (doc, before) = match res {
                    Ok(x) => x,
                    Err(e) => return answer(port, Err(e)),
                };
                let decision = if r.accept { "accept" } else { "reject" };
                info!(id = %r.id, decision, by = %r.by, "knowledge review decided");
                self.announce(
                    &r.id,
                    decision,
                    &doc.changelog
                        .last()
                        .map(|c| c.by.clone())
                        .unwrap_or_default(),
                )
                .await;
                let audit_error = self.audit_review(&r, &doc, before).await.err().map(|e| {
                    format!(
                        "the decision is applied, but the queue did not write its audit line: {e}"
                    )
                });
                let _ = port.send(Ok(Reviewed {
                    doc,
                    before,
                    audit_error,
                }));
            }
            KnowledgeApi::Select(r, port) => {
                let sel = st.store.select_for(
                    r.milestone.as_deref(),
                    &r.about,
                    r.budget_tokens.unwrap_or(self.budget),
                );
                let _ = port.send(Ok(sel));
            }
            KnowledgeApi::Uses(r, port) => {
                let res = st.store.record_uses(&r.docs, r.clean, self.establish_after);
                st.seen = st.store.fingerprint();
                if let Ok(p) = &res {
                    for id in p {
                        info!(id = %id, "knowledge document established");
                        self.announce(id, "promote", "xo").await;
                    }
                }
                answer(port, res)
            }
        }
    }
}

xo_runtime::service_handle!(KnowledgeHandle, "knowledge");
