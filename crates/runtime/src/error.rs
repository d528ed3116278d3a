//! The runtime's one error: every failure this library reports is one of
//! its cases (each a type of its own, named for what failed), so a service
//! wraps it once, as `Runtime(#[from] RuntimeError)`, and
//! [`runtime_error_from!`](crate::runtime_error_from) gives it the `From`
//! of each case, so `?` works on all of them.

use crate::config::ConfigError;
use crate::service::NoStore;
use crate::settings::InvalidSetting;
use crate::telemetry::TelemetryError;
use crate::tree::Escalation;

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// `xo.toml`, the environment or an override: the key named.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Logging or OTLP export could not be set up.
    #[error(transparent)]
    Telemetry(#[from] TelemetryError),
    /// An actor tree did not start, or gave up.
    #[error(transparent)]
    Tree(#[from] Escalation),
    /// An operator's setting refused.
    #[error(transparent)]
    Setting(#[from] InvalidSetting),
    /// A service that keeps state was started without a store.
    #[error(transparent)]
    NoStore(#[from] NoStore),
}

pub type RuntimeResult<T> = Result<T, RuntimeError>;

/// Gives a service's error enum, which wraps [`RuntimeError`] once, the
/// `From` of every runtime error type, so `?` on an [`Escalation`] or a
/// [`NoStore`] lands in that one variant.
#[macro_export]
macro_rules! runtime_error_from {
    ($ty:ty) => {
        $crate::runtime_error_from!(@one $ty, $crate::config::ConfigError);
        $crate::runtime_error_from!(@one $ty, $crate::telemetry::TelemetryError);
        $crate::runtime_error_from!(@one $ty, $crate::tree::Escalation);
        $crate::runtime_error_from!(@one $ty, $crate::settings::InvalidSetting);
        $crate::runtime_error_from!(@one $ty, $crate::service::NoStore);
    };
    (@one $ty:ty, $from:ty) => {
        impl From<$from> for $ty {
            fn from(e: $from) -> Self {
                <$ty>::from($crate::error::RuntimeError::from(e))
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    enum ServiceError {
        #[error(transparent)]
        Runtime(#[from] RuntimeError),
    }
    crate::runtime_error_from!(ServiceError);

    fn started(store: bool) -> Result<(), ServiceError> {
        if !store {
            Err(NoStore("queue"))?;
        }
        Err(Escalation::start("queue", "spawn failed"))?
    }

    /// `?` on each runtime error lands in the service's one variant, as
    /// the case it was, with its own words.
    #[test]
    fn every_runtime_error_lands_in_one_variant_as_its_case() {
        let e = started(false).unwrap_err();
        assert!(matches!(
            e,
            ServiceError::Runtime(RuntimeError::NoStore(NoStore("queue")))
        ));
        assert_eq!(e.to_string(), NoStore("queue").to_string());
        let e = started(true).unwrap_err();
        assert!(matches!(
            e,
            ServiceError::Runtime(RuntimeError::Tree(Escalation::Start { .. }))
        ));
        assert_eq!(
            e.to_string(),
            "queue: the actor tree did not start: spawn failed"
        );
    }
}
