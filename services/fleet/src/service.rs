//! The fleet manager in the XO's process: a reconcile loop (desired runners
//! per role from config; stale units, from the supervisor, restarted) and
//! the `fleet` control API behind `xo fleet ls|scale|restart`.
//!
//! The tree: a one-for-one root over one actor that owns the [`Fleet`]; a
//! restarted actor reconnects to the engine and keeps the desired counts an
//! operator set. Inputs: the control API and the reconcile ticker.
//! Shutdown: inputs stop, the actor drains (a pass in progress finishes),
//! the bus is flushed.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tracing::{error, info, warn};
use xo_bus::api::ActorPorts;
use xo_bus::{Bus, typed};
use xo_proto::control::{ErrorCode, ServiceError};
use xo_proto::fleet::*;
use xo_proto::{Format, Subjects};
use xo_runtime::ServiceCtx;
use xo_runtime::tree::{Factory, Intensity, Running};

use crate::{Action, ContainerSpec, DockerFleet, Fleet, FleetError};

/// The fleet actor's messages: its control API and the reconcile tick.
pub enum FleetMsg {
    Api(FleetApi<ActorPorts>),
    Reconcile,
}

impl From<FleetApi<ActorPorts>> for FleetMsg {
    fn from(a: FleetApi<ActorPorts>) -> Self {
        FleetMsg::Api(a)
    }
}

/// The actor (configuration only; the fleet is its state).
#[derive(Debug, Clone)]
pub struct FleetActor {
    bus: Bus,
    /// Now, for the restart window, its alerts and its audit lines.
    clock: xo_runtime::Clock,
    subjects: Subjects,
    format: Format,
    audit: std::path::PathBuf,
}

/// What a (re)started actor is built from.
pub struct FleetArgs {
    fleet: Fleet,
    desired: Arc<Mutex<BTreeMap<String, u32>>>,
}

pub struct State {
    fleet: Fleet,
    /// The desired counts, shared with the factory so a restart keeps them.
    desired: Arc<Mutex<BTreeMap<String, u32>>>,
}

/// A running fleet manager.
#[derive(Debug)]
pub struct FleetHandle {
    running: Running<FleetMsg>,
    bus: Bus,
}

impl FleetHandle {
    /// Waits for `shutdown`, or for the tree to give up.
    pub async fn until(&mut self, shutdown: impl std::future::Future<Output = ()>) {
        self.running.until(shutdown).await
    }

    /// Stops in order: inputs, the actor (drained), the bus flushed.
    pub async fn stop(self) -> Result<(), FleetError> {
        let escalated = self.running.stop().await;
        let _ = self.bus.flush().await;
        escalated.map_err(FleetError::from)
    }
}

/// Starts the fleet manager; fails at once if the engine cannot be reached.
pub async fn start(ctx: ServiceCtx) -> Result<FleetHandle, FleetError> {
    let ServiceCtx {
        cfg,
        bus,
        shutdown,
        clock,
        ..
    } = ctx;
    let cfg = &cfg;
    let f = &cfg.fleet;
    let spec = ContainerSpec {
        org: cfg.org.prefix.clone(),
        image: f.image.clone(),
        command: f.command.clone(),
        env: f.env.clone(),
        binds: f.binds.clone(),
        network: (!f.network.is_empty()).then(|| f.network.clone()),
    };
    // Connected once here so an unreachable engine fails the start.
    DockerFleet::connect(spec.clone()).await?;
    let desired = Arc::new(Mutex::new(f.runners.clone()));
    let (max_restarts, window) = (f.max_restarts as usize, f.restart_window_ms);
    let factory: Factory<FleetActor> = {
        let desired = desired.clone();
        Arc::new(move || {
            let (spec, desired) = (spec.clone(), desired.clone());
            Box::pin(async move {
                let docker = DockerFleet::connect(spec).await?;
                let counts = desired.lock().map(|d| d.clone()).unwrap_or_default();
                Ok(FleetArgs {
                    fleet: Fleet::new(docker, counts, max_restarts, window),
                    desired,
                })
            })
        })
    };
    let actor = FleetActor {
        bus: bus.clone(),
        clock,
        subjects: cfg.subjects(),
        format: cfg.wire.format,
        audit: cfg.data_dir().join("fleet").join("audit.log.jsonl"),
    };
    let mut running = Running::one_for_one("fleet", actor, Intensity::of(cfg), factory)
        .await?
        .ending_on(shutdown);
    running.input(
        xo_bus::api::serve::<FleetApi<ActorPorts>, _>(
            &bus,
            &cfg.subjects(),
            cfg.wire.max_payload,
            "XO fleet manager: runner containers per role",
            running.current.clone(),
            running.signal(),
        )
        .await?,
    );
    running.every(Duration::from_millis(f.reconcile_ms), || {
        FleetMsg::Reconcile
    });
    info!(runners = ?f.runners, image = %f.image, "fleet manager started");
    Ok(FleetHandle { running, bus })
}

impl Actor for FleetActor {
    type Msg = FleetMsg;
    type State = State;
    type Arguments = FleetArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<FleetMsg>,
        args: FleetArgs,
    ) -> Result<State, ActorProcessingErr> {
        Ok(State {
            fleet: args.fleet,
            desired: args.desired,
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<FleetMsg>,
        msg: FleetMsg,
        st: &mut State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            FleetMsg::Reconcile => self.pass(st).await,
            FleetMsg::Api(FleetApi::Ls(_, port)) => {
                let _ = port.send(status(&st.fleet).await);
            }
            FleetMsg::Api(FleetApi::Scale(s, port)) => {
                if let Err(e) = xo_proto::validate_token("role", &s.role) {
                    let _ = port.send(Err(ServiceError::new(ErrorCode::Invalid, e)));
                    return Ok(());
                }
                st.fleet.scale(&s.role, s.replicas);
                if let Ok(mut d) = st.desired.lock() {
                    *d = st.fleet.desired.clone();
                }
                info!(role = %s.role, replicas = s.replicas, "fleet scaled");
                self.pass(st).await;
                let _ = port.send(status(&st.fleet).await);
            }
            FleetMsg::Api(FleetApi::Restart(s, port)) => {
                let r = self.restart(st, &s.unit).await;
                let _ = port.send(match r {
                    Ok(()) => status(&st.fleet).await,
                    Err(e) => Err(e),
                });
            }
        }
        Ok(())
    }
}

impl FleetActor {
    async fn stale_units(&self) -> BTreeSet<String> {
        match typed::all_units(&self.bus, &self.subjects, Duration::from_secs(2)).await {
            Ok(units) => units
                .into_iter()
                .filter(|u| u.stale)
                .map(|u| u.unit)
                .collect(),
            Err(_) => BTreeSet::new(),
        }
    }

    async fn pass(&self, st: &mut State) {
        let stale = self.stale_units().await;
        let (bus, subjects) = (self.bus.clone(), self.subjects.clone());
        // Asked again just before its restart; no answer: not restarted on
        // a list that may be old.
        let still_stale = async move |unit: &str| {
            typed::call(
                &bus,
                &subjects,
                &xo_proto::control::ShowUnit { unit: unit.into() },
                Duration::from_secs(2),
            )
            .await
            .is_ok_and(|d| d.summary.stale)
        };
        let done = match st
            .fleet
            .reconcile(&stale, self.clock.now_ms(), still_stale)
            .await
        {
            Ok(d) => d,
            Err(e) => {
                warn!(error = %e, "fleet reconcile failed; will retry");
                return;
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
                    self.alert(role, *restarts).await;
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
            self.event(kind, &role, unit, detail).await;
        }
    }

    /// Restarts one runner's container (`xo fleet restart UNIT`).
    async fn restart(&self, st: &mut State, unit: &str) -> Result<(), ServiceError> {
        let unavailable = |e: FleetError| ServiceError::new(ErrorCode::Unavailable, e.to_string());
        let observed = st.fleet.docker.observe().await.map_err(unavailable)?;
        let o = observed
            .into_iter()
            .find(|o| o.unit == unit)
            .ok_or_else(|| {
                ServiceError::new(
                    ErrorCode::NotFound,
                    format!("no runner container for unit {unit:?}"),
                )
            })?;
        st.fleet
            .docker
            .apply(&Action::Restart {
                unit: o.unit,
                id: o.id,
                reason: "operator".into(),
            })
            .await
            .map_err(unavailable)?;
        self.event(
            "restarted",
            &role_of(unit),
            Some(unit.to_string()),
            "operator".into(),
        )
        .await;
        Ok(())
    }
}

fn role_of(unit: &str) -> String {
    unit.rsplit_once('-')
        .map(|(r, _)| r.to_string())
        .unwrap_or_else(|| unit.to_string())
}

impl FleetActor {
    /// Tells the operator a role is down for good (`xo.event.alert.role_failed`).
    async fn alert(&self, role: &str, restarts: usize) {
        let a = xo_proto::alert::Alert {
            v: xo_proto::PROTOCOL_VERSION,
            kind: xo_proto::alert::AlertKind::RoleFailed,
            title: format!("runner role {role} failed"),
            detail: format!(
                "Its runners were restarted {restarts} times within the restart window and keep exiting; the fleet stopped restarting them. Look at `docker logs` of a {role} container, fix the cause, then `xo fleet scale {role} N` to start again."
            ),
            task_id: None,
            project: None,
            unit: None,
            source: "fleet".into(),
            at: self.clock.now_ms(),
        };
        let subject = self.subjects.alert(a.kind);
        if let Err(e) = typed::publish(&self.bus, &subject, &a, self.format).await {
            warn!(error = %e, "role failure alert not published");
        }
    }

    /// Records a fleet change (one JSON line in the fleet's audit file) and
    /// publishes it on `xo.event.fleet.<role>`.
    async fn event(&self, kind: &str, role: &str, unit: Option<String>, detail: String) {
        let ev = FleetEvent {
            v: xo_proto::PROTOCOL_VERSION,
            kind: kind.into(),
            role: role.into(),
            unit,
            detail,
            at: self.clock.now_ms(),
        };
        if let Err(e) = xo_runtime::jsonl::append(&self.audit, &ev).await {
            warn!(path = %self.audit.display(), error = %e, "fleet audit line not written");
        }
        if let Err(e) = typed::publish(
            &self.bus,
            &self.subjects.fleet_event(role),
            &ev,
            self.format,
        )
        .await
        {
            warn!(error = %e, "fleet event not published");
        }
    }
}

async fn status(f: &Fleet) -> Result<FleetStatus, ServiceError> {
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

xo_runtime::service_handle!(FleetHandle, "fleet");
