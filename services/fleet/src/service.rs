//! The fleet manager in the XO's process: a reconcile loop (desired runners
//! per role from config; stale units, from the supervisor, restarted) and
//! the `fleet` control API behind `xo fleet ls|scale|restart`.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;
use tokio::task::JoinHandle;
use tracing::{error, info, warn};
use xo_bus::{Bus, ServiceRequest, ServiceSpec, typed};
use xo_proto::Request;
use xo_proto::control::{ErrorCode, ListUnits, ServiceError};
use xo_proto::fleet::*;
use xo_proto::{Format, Subjects};
use xo_runtime::XoConfig;

use crate::{Action, ContainerSpec, DockerFleet, Fleet, FleetError};

struct Ctx {
    bus: Bus,
    subjects: Subjects,
    format: Format,
    audit: std::path::PathBuf,
    fleet: Mutex<Fleet>,
}

/// Starts the fleet manager; fails at once if the engine cannot be reached.
pub async fn start(cfg: &XoConfig, bus: Bus) -> Result<Vec<JoinHandle<()>>, FleetError> {
    let f = &cfg.fleet;
    let spec = ContainerSpec {
        org: cfg.org.prefix.clone(),
        image: f.image.clone(),
        command: f.command.clone(),
        env: f.env.clone(),
        binds: f.binds.clone(),
        network: (!f.network.is_empty()).then(|| f.network.clone()),
    };
    let docker = DockerFleet::connect(spec).await?;
    let fleet = Fleet::new(
        docker,
        f.runners.clone(),
        f.max_restarts as usize,
        f.restart_window_ms,
    );
    let ctx = Arc::new(Ctx {
        bus: bus.clone(),
        subjects: cfg.subjects(),
        format: cfg.wire.format,
        audit: cfg.data_dir().join("fleet").join("audit.log.jsonl"),
        fleet: Mutex::new(fleet),
    });
    let mut ep = bus
        .serve(ServiceSpec {
            name: "xo-fleet".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: "XO fleet manager: runner containers per role".into(),
            group: ctx.subjects.ctl_group(FLEET),
            verbs: vec![
                FleetLs::VERB.into(),
                FleetScale::VERB.into(),
                FleetRestart::VERB.into(),
            ],
        })
        .await
        .map_err(|e| FleetError {
            what: "serving the fleet API".into(),
            reason: e.to_string(),
        })?;
    info!(runners = ?f.runners, image = %f.image, "fleet manager started");
    let c = ctx.clone();
    let api = tokio::spawn(async move {
        while let Some(req) = ep.next().await {
            handle(&c, req).await;
        }
        ep.stop().await;
    });
    let c = ctx.clone();
    let every = Duration::from_millis(f.reconcile_ms);
    let lp = tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        loop {
            tick.tick().await;
            pass(&c).await;
        }
    });
    Ok(vec![api, lp])
}

async fn stale_units(ctx: &Ctx) -> BTreeSet<String> {
    match typed::call(
        &ctx.bus,
        &ctx.subjects,
        &ListUnits {},
        Duration::from_secs(2),
    )
    .await
    {
        Ok(units) => units
            .into_iter()
            .filter(|u| u.stale)
            .map(|u| u.unit)
            .collect(),
        Err(_) => BTreeSet::new(),
    }
}

async fn pass(ctx: &Ctx) {
    let stale = stale_units(ctx).await;
    let done = {
        let mut f = ctx.fleet.lock().await;
        match f.reconcile(&stale, xo_proto::now_ms()).await {
            Ok(d) => d,
            Err(e) => {
                warn!(error = %e, "fleet reconcile failed; will retry");
                return;
            }
        }
    };
    for (a, r) in done {
        let (kind, role, unit, detail) = match &a {
            Action::Create { unit, role } => {
                ("created", role.clone(), Some(unit.clone()), String::new())
            }
            Action::Restart { unit, reason, .. } => (
                "restarted",
                role_of(unit),
                Some(unit.clone()),
                reason.clone(),
            ),
            Action::Remove { unit, reason, .. } => {
                ("removed", role_of(unit), Some(unit.clone()), reason.clone())
            }
            Action::RoleFailed { role, restarts } => {
                error!(role = %role, restarts, "runner role failed: past its restart intensity");
                (
                    "role_failed",
                    role.clone(),
                    None,
                    format!("{restarts} restarts within the window"),
                )
            }
        };
        let (kind, detail) = match r {
            Ok(()) => (kind, detail),
            Err(e) => ("error", format!("{kind}: {e}")),
        };
        event(ctx, kind, &role, unit, detail).await;
    }
}

fn role_of(unit: &str) -> String {
    unit.rsplit_once('-')
        .map(|(r, _)| r.to_string())
        .unwrap_or_else(|| unit.to_string())
}

async fn event(ctx: &Ctx, kind: &str, role: &str, unit: Option<String>, detail: String) {
    let ev = FleetEvent {
        v: xo_proto::PROTOCOL_VERSION,
        kind: kind.into(),
        role: role.into(),
        unit,
        detail,
        at: xo_proto::now_ms(),
    };
    // The fleet's audit trail, one JSON line per change.
    if let Some(d) = ctx.audit.parent() {
        let _ = std::fs::create_dir_all(d);
    }
    if let Ok(line) = serde_json::to_string(&ev) {
        use std::io::Write;
        let _ = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&ctx.audit)
            .and_then(|mut f| f.write_all(format!("{line}\n").as_bytes()));
    }
    if let Err(e) = typed::publish(&ctx.bus, &ctx.subjects.fleet_event(role), &ev, ctx.format).await
    {
        warn!(error = %e, "fleet event not published");
    }
}

async fn status(ctx: &Ctx) -> Result<FleetStatus, ServiceError> {
    let f = ctx.fleet.lock().await;
    let observed = f
        .docker
        .observe()
        .await
        .map_err(|e| ServiceError::new(ErrorCode::Unavailable, e.to_string()))?;
    let mut units: Vec<FleetUnit> = observed
        .into_iter()
        .map(|o| FleetUnit {
            container: f.docker.spec().name(&o.unit),
            unit: o.unit,
            role: o.role,
            running: o.running,
        })
        .collect();
    units.sort_by(|a, b| a.unit.cmp(&b.unit));
    Ok(FleetStatus {
        backend: "docker".into(),
        desired: f.desired.clone(),
        units,
        failed: f.planner.failed_roles().iter().cloned().collect(),
    })
}

async fn handle(ctx: &Ctx, req: ServiceRequest) {
    match req.verb() {
        v if v == FleetLs::VERB => {
            let r = status(ctx).await;
            req.reply(r).await
        }
        v if v == FleetScale::VERB => {
            let s = match typed::decode_request::<FleetScale>(&req.message) {
                Ok(s) => s,
                Err(e) => return req.reply::<()>(Err(e)).await,
            };
            if let Err(e) = xo_proto::validate_token("role", &s.role) {
                return req
                    .reply::<()>(Err(ServiceError::new(ErrorCode::Invalid, e)))
                    .await;
            }
            ctx.fleet.lock().await.scale(&s.role, s.replicas);
            info!(role = %s.role, replicas = s.replicas, "fleet scaled");
            pass(ctx).await;
            let r = status(ctx).await;
            req.reply(r).await
        }
        v if v == FleetRestart::VERB => {
            let s = match typed::decode_request::<FleetRestart>(&req.message) {
                Ok(s) => s,
                Err(e) => return req.reply::<()>(Err(e)).await,
            };
            let res = {
                let f = ctx.fleet.lock().await;
                match f.docker.observe().await {
                    Err(e) => Err(ServiceError::new(ErrorCode::Unavailable, e.to_string())),
                    Ok(obs) => match obs.into_iter().find(|o| o.unit == s.unit) {
                        None => Err(ServiceError::new(
                            ErrorCode::NotFound,
                            format!("no runner container for unit {:?}", s.unit),
                        )),
                        Some(o) => f
                            .docker
                            .apply(&Action::Restart {
                                unit: o.unit,
                                id: o.id,
                                reason: "operator".into(),
                            })
                            .await
                            .map_err(|e| ServiceError::new(ErrorCode::Unavailable, e.to_string())),
                    },
                }
            };
            if let Err(e) = res {
                return req.reply::<()>(Err(e)).await;
            }
            event(
                ctx,
                "restarted",
                &role_of(&s.unit),
                Some(s.unit.clone()),
                "operator".into(),
            )
            .await;
            let r = status(ctx).await;
            req.reply(r).await
        }
        other => {
            let e = ServiceError::new(ErrorCode::NotFound, format!("unknown verb {other:?}"));
            req.reply::<()>(Err(e)).await
        }
    }
}
