//! Operator settings in force (seed 004): the role profiles the radio check
//! uses and whether steering is sent, changed at run time without a restart
//! (`ingest::follow_settings` feeds it from `xo.event.settings`, and from the
//! queue once at start). A watcher re-reads the profiles only when the
//! version moves (one shared atomic load a report, no lock).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use tracing::{info, warn};
use xo_proto::settings::Settings;
use xo_radio::Roles;
use xo_runtime::XoConfig;

/// The settings the supervisor applies now.
#[derive(Debug)]
pub struct Live {
    version: AtomicU64,
    roles: RwLock<Arc<Roles>>,
    steering: AtomicBool,
}

impl Live {
    pub fn new(cfg: &XoConfig) -> Self {
        Self {
            version: AtomicU64::new(0),
            roles: RwLock::new(Arc::new(cfg.roles())),
            steering: AtomicBool::new(cfg.supervisor.enabled),
        }
    }

    /// Changes on every applied settings version.
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    pub fn roles(&self) -> Arc<Roles> {
        self.roles.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Whether steering goes out (`supervisor.enabled` in the settings).
    pub fn steering(&self) -> bool {
        self.steering.load(Ordering::Relaxed)
    }

    /// Lays `settings` over `base`; settings that do not apply are logged
    /// and the ones in force stay.
    pub fn apply(&self, base: &XoConfig, settings: &Settings) -> bool {
        if settings.version <= self.version() && settings.version != 0 {
            return false;
        }
        match xo_runtime::settings::apply(base, settings) {
            Ok(cfg) => {
                *self.roles.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(cfg.roles());
                self.steering
                    .store(cfg.supervisor.enabled, Ordering::Relaxed);
                self.version.store(settings.version, Ordering::Release);
                info!(
                    version = settings.version,
                    steering = cfg.supervisor.enabled,
                    "operator settings applied"
                );
                true
            }
            Err(e) => {
                warn!(version = settings.version, error = %e, "operator settings not applied; keeping those in force");
                false
            }
        }
    }
}
