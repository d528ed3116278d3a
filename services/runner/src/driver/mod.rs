//! Agent drivers. Each accepts only a [`ComposedPrompt`] (SUP-1) and returns
//! what the agent did, verbatim; none interprets, retries or validates.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use xo_proto::Action;
use xo_runtime::config::{DriverConfig, DriverKind, RunnerConfig};

use crate::compose::ComposedPrompt;
use crate::proc::Groups;
use crate::sandbox::Sandbox;

pub mod command;
pub mod openai;
pub mod script;

pub use command::CommandDriver;
pub use openai::OpenAiDriver;
pub use script::ScriptDriver;

/// What one run of an agent produced.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentOutput {
    pub stdout: String,
    pub stderr: String,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    /// Stopped by a halt or shutdown.
    pub cancelled: bool,
    /// stdout or stderr was longer than the bound and cut.
    pub truncated: bool,
    pub elapsed_ms: u64,
    pub turns: u32,
    pub tokens_in: u64,
    pub tokens_out: u64,
    pub cost_usd: f64,
}

#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error("{0}")]
    Spawn(String),
    #[error("model endpoint: {0}")]
    Endpoint(String),
    #[error("script: {0}")]
    Script(String),
}

/// One step of the agent, as the SALUTE report and the radio see it.
#[derive(Debug, Clone, Default)]
pub struct TurnEvent {
    pub action: Option<Action>,
    pub summary: Option<String>,
    /// The step moved the task forward (a file written, a check passing).
    pub progress: bool,
    pub tokens_in: u64,
    pub tokens_out: u64,
    pub cost_usd: f64,
    /// The conversation's size now, when the driver knows it.
    pub context_tokens: Option<u64>,
    pub context_limit: Option<u64>,
    pub condensed: bool,
    pub model: Option<String>,
}

/// The runner side of a run: turn events out, steering in.
#[derive(Debug, Clone, Default)]
pub struct Turns {
    tx: Option<mpsc::UnboundedSender<TurnEvent>>,
    steering: Arc<Mutex<Vec<String>>>,
}

impl Turns {
    pub fn new(tx: mpsc::UnboundedSender<TurnEvent>) -> Self {
        Self {
            tx: Some(tx),
            steering: Default::default(),
        }
    }

    /// Records one turn.
    pub fn turn(&self, ev: TurnEvent) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(ev);
        }
    }

    /// Queues a steering message for the agent's next step.
    pub fn push_steering(&self, message: String) {
        self.steering
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(message);
    }

    pub fn has_steering(&self) -> bool {
        !self
            .steering
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
    }

    /// Steering received since the last call.
    pub fn take_steering(&self) -> Vec<String> {
        std::mem::take(&mut *self.steering.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// Where and how a run happens.
#[derive(Debug, Clone)]
pub struct RunCtx {
    pub sandbox: Sandbox,
    /// The checked working directory (inside the sandbox).
    pub cwd: PathBuf,
    pub timeout: Duration,
    pub env: Vec<(String, String)>,
    pub max_output: usize,
    pub turns: Turns,
    pub cancel: Option<watch::Receiver<bool>>,
    pub groups: Option<Groups>,
}

/// The configured agent.
#[derive(Debug)]
pub enum Driver {
    Command(CommandDriver),
    OpenAi(OpenAiDriver),
    Script(ScriptDriver),
}

impl Driver {
    pub fn from_config(d: &DriverConfig, runner: &RunnerConfig) -> Result<Self, DriverError> {
        Ok(match d.kind {
            DriverKind::Command => Self::Command(CommandDriver::new(d.command.clone())?),
            DriverKind::Openai => Self::OpenAi(OpenAiDriver::new(&d.openai, runner.context_limit)?),
            DriverKind::Script => Self::Script(ScriptDriver::from_file(
                (!d.script.is_empty()).then(|| std::path::Path::new(&d.script)),
            )?),
        })
    }

    pub fn name(&self) -> &'static str {
        match self {
            Self::Command(_) => "command",
            Self::OpenAi(_) => "openai",
            Self::Script(_) => "script",
        }
    }

    pub async fn run(
        &mut self,
        prompt: &ComposedPrompt,
        ctx: &RunCtx,
    ) -> Result<AgentOutput, DriverError> {
        match self {
            Self::Command(d) => d.run(prompt, ctx).await,
            Self::OpenAi(d) => d.run(prompt, ctx).await,
            Self::Script(d) => d.run(prompt, ctx).await,
        }
    }
}

/// A short stable hash of some text, for SALUTE action fields.
pub fn short_hash(text: &str) -> String {
    use sha2::{Digest, Sha256};
    let d = Sha256::digest(text.as_bytes());
    d[..6].iter().map(|b| format!("{b:02x}")).collect()
}
