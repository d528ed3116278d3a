//! The fleet manager: runner containers per role on the Docker engine,
//! reconciled to the desired count, restarted under an intensity limit.
//!
//! - [`plan`]: the pure reconcile plan (create, restart, remove, role failed).
//! - [`docker`]: the engine side (bollard): observe labelled containers, apply actions.
//! - [`service`]: the fleet actor under its root, the `fleet` control API
//!   (`xo fleet ls|scale|restart`) and the reconcile ticker.
//! - [`Fleet`] (here): desired counts, the planner and the engine, one pass at a time.

pub mod docker;
pub mod plan;
pub mod service;

use std::collections::{BTreeMap, BTreeSet};

pub use docker::{ContainerSpec, DockerFleet, FleetError};
pub use plan::{Action, Observed, Planner};

/// Desired counts, the planner and the engine: one reconcile pass at a time.
#[derive(Debug)]
pub struct Fleet {
    pub docker: DockerFleet,
    pub desired: BTreeMap<String, u32>,
    pub planner: Planner,
}

impl Fleet {
    pub fn new(
        docker: DockerFleet,
        desired: BTreeMap<String, u32>,
        max_restarts: usize,
        window_ms: u64,
    ) -> Self {
        Self {
            docker,
            desired,
            planner: Planner::new(max_restarts, window_ms),
        }
    }

    /// Observes, plans and applies once; returns what was done. An action
    /// that fails is reported and retried on the next pass.
    ///
    /// `stale` is the supervisor's list when the pass began; restarts take
    /// seconds each, so before a unit is restarted for being stale,
    /// `still_stale` asks again: a unit heard from meanwhile (its runner
    /// back after a network outage) is left running.
    pub async fn reconcile(
        &mut self,
        stale: &BTreeSet<String>,
        now: u64,
        mut still_stale: impl AsyncFnMut(&str) -> bool,
    ) -> Result<Vec<(Action, Result<(), FleetError>)>, FleetError> {
        let observed = self.docker.observe().await?;
        let actions = self.planner.plan(&self.desired, &observed, stale, now);
        let mut done = Vec::with_capacity(actions.len());
        for a in actions {
            if let Action::Restart { unit, reason, .. } = &a
                && reason == "stale"
                && !still_stale(unit).await
            {
                self.planner.unplan_restart(unit);
                continue;
            }
            let r = self.docker.apply(&a).await;
            done.push((a, r));
        }
        Ok(done)
    }

    /// Sets a role's desired count (`xo fleet scale`), clearing a failed mark.
    pub fn scale(&mut self, role: &str, n: u32) {
        self.planner.reset_role(role);
        if n == 0 {
            self.desired.remove(role);
        } else {
            self.desired.insert(role.to_string(), n);
        }
    }
}
