//! Control calls to a queue that may be down for a moment (killed,
//! restarting, failing over): one call, or retries until it answers.

use std::time::Duration;

use xo_bus::{Bus, typed};
use xo_proto::queue::Task;

/// One call with the default subjects and a 2 s timeout.
pub async fn call<R: xo_proto::Request>(bus: &Bus, r: &R) -> Result<R::Response, typed::CallError>
where
    R::Response: serde::de::DeserializeOwned,
{
    typed::call(
        bus,
        &xo_proto::Subjects::default(),
        r,
        Duration::from_secs(2),
    )
    .await
}

/// Retries for up to 30 s while nothing answers; panics after.
pub async fn must<R: xo_proto::Request>(bus: &Bus, r: &R) -> R::Response
where
    R::Response: serde::de::DeserializeOwned,
{
    for _ in 0..600 {
        if let Ok(v) = call(bus, r).await {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the queue never answered");
}

/// `n` coder tasks `<prefix>00`, `<prefix>01`, …
pub fn tasks(prefix: &str, n: usize) -> Vec<Task> {
    (0..n)
        .map(|i| Task::new(format!("{prefix}{i:02}"), "x", "y", "coder"))
        .collect()
}
