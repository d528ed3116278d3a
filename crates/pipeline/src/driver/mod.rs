//! Agent drivers. Each accepts only a [`ComposedPrompt`] (SUP-1) and returns
//! what the agent did, verbatim; none interprets, retries or validates.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use xo_runtime::config::{DriverConfig, DriverKind, RunnerConfig};

use crate::compose::ComposedPrompt;
pub use crate::proc::AgentOutput;
use crate::proc::Groups;
use crate::sandbox::Sandbox;
pub use xo_sensor::{TurnEvent, short_hash};

pub mod command;
pub mod hooks;
pub mod openai;
pub mod script;
pub mod waiting;

pub use command::CommandDriver;
pub use openai::OpenAiDriver;
pub use script::ScriptDriver;

#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error("{0}")]
    Spawn(String),
    /// The agent's process could not be started.
    #[error(transparent)]
    Process(#[from] crate::proc::ProcError),
    /// `runner.driver.stream` names no format the sensor reads.
    #[error(transparent)]
    Stream(#[from] xo_sensor::SensorError),
    #[error("model endpoint: {0}")]
    Endpoint(String),
    #[error("script: {0}")]
    Script(String),
}

/// `runner.driver.script = "inline"`: the script driver reads only the
/// fenced `xo-script` blocks in task instructions (demos and tests).
pub const SCRIPT_INLINE: &str = "inline";

/// Why a runner configured this way would do no real work, if it would:
/// the scripted test agent with no script answers every task "done" with
/// nothing done.
pub fn idle_agent(d: &DriverConfig) -> Option<String> {
    (d.kind == DriverKind::Script && d.script.trim().is_empty()).then(|| {
        "runner.driver.kind is \"script\" (the scripted test agent) and runner.driver.script is empty, so this runner would do no work. \
         For a real agent set runner.driver.kind = \"command\" with runner.driver.command (e.g. [\"claude\", \"-p\", \"{prompt}\", \"--output-format\", \"stream-json\", \"--verbose\"] and runner.driver.stream = \"claude\"), \
         or \"openai\" with runner.driver.openai.base_url and model (docs/runner.md). \
         For the scripted agent give --script FILE, or --script inline to read xo-script blocks in task instructions."
            .to_string()
    })
}

/// The runner side of a run: turn events out, steering in.
#[derive(Debug, Clone, Default)]
pub struct Turns {
    tx: Option<mpsc::UnboundedSender<Turn>>,
    /// The task being worked, which each turn is sent with and traced in.
    task: Arc<Mutex<Option<TaskTag>>>,
    steering: Arc<Mutex<Vec<String>>>,
    urgency: Arc<Urgency>,
    /// Turns, tokens and cost of the current task (its budget counts them),
    /// and its tokens in and out apart (its trace shows them).
    usage: Arc<Mutex<(xo_proto::queue::Usage, TokensInOut)>>,
    /// The turn (of the current task) each kind of the XO's steering last
    /// arrived at: the runner's own check defers to it.
    xo_steered: Arc<Mutex<std::collections::BTreeMap<xo_proto::AnomalyKind, u64>>>,
    /// The report turn and severity of the steering the runner's own check
    /// last gave of each kind: the XO's of the same anomaly is not given again.
    self_steered:
        Arc<Mutex<std::collections::BTreeMap<xo_proto::AnomalyKind, (u64, xo_proto::Severity)>>>,
    /// The ids of the last steering received: one sent again (a sharded
    /// supervisor taking the unit over resends what its predecessor may not
    /// have sent) is not given to the agent twice.
    seen: Arc<Mutex<std::collections::VecDeque<String>>>,
}

/// A task's tokens: read (input) and written (output) by the model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokensInOut {
    pub input: u64,
    pub output: u64,
}

/// The task a turn belongs to: its id and the root span of its trace.
#[derive(Debug, Clone)]
pub struct TaskTag {
    pub task_id: String,
    pub span: tracing::Span,
}

/// One turn as it is sent on: the event and the task it was taken in
/// (fixed when the turn happened, not when it is read).
#[derive(Debug)]
pub struct Turn {
    pub event: TurnEvent,
    pub task: Option<TaskTag>,
    /// Not a turn: the unit now waits for a person (its task blocked on an
    /// operator's answer, its agent failed); reported at once, until the
    /// next task ([`Turns::wait`]).
    pub waiting: Option<xo_proto::UnitNeeds>,
}

/// How many steering ids a runner remembers.
const SEEN_IDS: usize = 256;

impl Turns {
    pub fn new(tx: mpsc::UnboundedSender<Turn>) -> Self {
        Self {
            tx: Some(tx),
            task: Default::default(),
            steering: Default::default(),
            urgency: Default::default(),
            usage: Default::default(),
            xo_steered: Default::default(),
            self_steered: Default::default(),
            seen: Default::default(),
        }
    }

    /// Records one turn.
    pub fn turn(&self, ev: TurnEvent) {
        {
            let (u, io) = &mut *self.usage.lock().unwrap_or_else(|p| p.into_inner());
            u.turns += 1;
            u.tokens = u
                .tokens
                .saturating_add(ev.tokens_in.saturating_add(ev.tokens_out));
            u.cost_usd = xo_proto::finite::add(u.cost_usd, ev.cost_usd);
            io.input += ev.tokens_in;
            io.output += ev.tokens_out;
        }
        let task = self.task();
        if let Some(t) = &task {
            trace_turn(&t.span, &ev);
        }
        if let Some(tx) = &self.tx {
            let _ = tx.send(Turn {
                event: ev,
                task,
                waiting: None,
            });
        }
    }

    /// The task in hand, if any.
    pub fn task(&self) -> Option<TaskTag> {
        self.task.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// A new task begins ([`Turns::reset`]): its turns are sent with `tag`
    /// and traced under its span.
    pub fn start_task(&self, tag: TaskTag) {
        self.reset();
        *self.task.lock().unwrap_or_else(|p| p.into_inner()) = Some(tag);
    }

    /// The unit waits for a person until its next task: reported at once
    /// ([`Turn::waiting`]).
    pub fn wait(&self, needs: xo_proto::UnitNeeds) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(Turn {
                event: TurnEvent::default(),
                task: self.task(),
                waiting: Some(needs),
            });
        }
    }

    /// The task is over: later turns belong to none.
    pub fn end_task(&self) {
        *self.task.lock().unwrap_or_else(|p| p.into_inner()) = None;
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

    /// Queues a steering decision and weighs it: critical steering (PACE
    /// emergency, or a loop steered a second time in this task) is what
    /// stops a running agent and resumes its session with the steering.
    /// A steering whose id was had already is ignored: `false`.
    pub fn push(&self, s: &xo_proto::Steering) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        if !s.id.is_empty() {
            let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
            if seen.contains(&s.id) {
                return false;
            }
            if seen.len() == SEEN_IDS {
                seen.pop_front();
            }
            seen.push_back(s.id.clone());
        }
        if s.source == xo_proto::SteeringSource::SelfCheck {
            self.self_steered
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(s.kind, (s.turn, s.severity));
        }
        if s.source == xo_proto::SteeringSource::Xo {
            let turn = self.usage().turns;
            self.xo_steered
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(s.kind, turn);
        }
        self.push_steering(s.message.clone());
        let loops = if s.kind == xo_proto::AnomalyKind::Loop {
            self.urgency.loops.fetch_add(1, Relaxed) + 1
        } else {
            self.urgency.loops.load(Relaxed)
        };
        if s.severity == xo_proto::Severity::Critical || loops >= 2 {
            self.urgency.critical.store(true, Relaxed);
        }
        true
    }

    /// The report turn at which the runner's own check already gave the
    /// anomaly `s` steers (same kind, no less severe, fewer than `cooldown`
    /// report turns before `s`'s): then `s` is not given again.
    pub fn steered_itself(&self, s: &xo_proto::Steering, cooldown: u64) -> Option<u64> {
        let own = self.self_steered.lock().unwrap_or_else(|p| p.into_inner());
        own.get(&s.kind).and_then(|&(turn, severity)| {
            (s.turn >= turn && s.turn - turn < cooldown && s.severity <= severity).then_some(turn)
        })
    }

    /// Whether critical steering came since the last call.
    pub fn take_critical(&self) -> bool {
        self.urgency
            .critical
            .swap(false, std::sync::atomic::Ordering::Relaxed)
    }

    /// The turn of the current task at which the XO last steered `kind`.
    pub fn xo_steered(&self, kind: xo_proto::AnomalyKind) -> Option<u64> {
        self.xo_steered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&kind)
            .copied()
    }

    /// The current task's turns, tokens and cost so far (no wall time).
    pub fn usage(&self) -> xo_proto::queue::Usage {
        self.usage.lock().unwrap_or_else(|p| p.into_inner()).0
    }

    /// The current task's tokens in and out so far.
    pub fn tokens_in_out(&self) -> TokensInOut {
        self.usage.lock().unwrap_or_else(|p| p.into_inner()).1
    }

    /// A new task: no steering, no critical flag, no loops counted, no usage.
    pub fn reset(&self) {
        let _ = self.take_steering();
        *self.usage.lock().unwrap_or_else(|p| p.into_inner()) = Default::default();
        self.xo_steered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        self.self_steered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        self.urgency
            .critical
            .store(false, std::sync::atomic::Ordering::Relaxed);
        self.urgency
            .loops
            .store(0, std::sync::atomic::Ordering::Relaxed);
    }
}

/// One turn as OpenTelemetry GenAI spans under its task's: a `chat` span
/// (the model and the turn's tokens) and, for a tool call, an
/// `execute_tool` span inside it naming the tool.
fn trace_turn(task: &tracing::Span, ev: &TurnEvent) {
    let model = ev.model.as_deref().unwrap_or_default();
    let chat = tracing::info_span!(
        parent: task,
        "chat",
        otel.name = %if model.is_empty() { "chat".to_string() } else { format!("chat {model}") },
        gen_ai.operation.name = "chat",
        gen_ai.response.model = model,
        gen_ai.usage.input_tokens = ev.tokens_in as i64,
        gen_ai.usage.output_tokens = ev.tokens_out as i64,
    );
    if let Some(a) = &ev.action
        && a.kind == xo_proto::ActionKind::Tool
    {
        let tool = a.tool.as_deref().unwrap_or_default();
        let _tool = tracing::info_span!(
            parent: &chat,
            "execute_tool",
            otel.name = %format!("execute_tool {tool}"),
            gen_ai.operation.name = "execute_tool",
            gen_ai.tool.name = tool,
            xo.outcome = ?a.outcome,
        );
    }
}

/// How urgent the steering of the current task is.
#[derive(Debug, Default)]
struct Urgency {
    critical: std::sync::atomic::AtomicBool,
    loops: std::sync::atomic::AtomicU32,
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
    /// Agents' processes confined so (`None`: unconfined).
    pub confine: Option<crate::confine::Confinement>,
    /// The task's `agent_mode` (seed 003): passed as the agent's model or
    /// mode option (`None` or `auto`: the agent's own default).
    pub agent_mode: Option<String>,
}

impl RunCtx {
    /// The mode to ask the agent for, if any (`auto` is its default).
    pub fn mode(&self) -> Option<&str> {
        self.agent_mode
            .as_deref()
            .map(str::trim)
            .filter(|m| !m.is_empty() && *m != "auto")
    }
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
            DriverKind::Command => Self::Command(CommandDriver::from_config(d)?),
            DriverKind::Openai => Self::OpenAi(OpenAiDriver::new(&d.openai, runner.context_limit)?),
            DriverKind::Script => Self::Script(ScriptDriver::from_file(
                (!d.script.is_empty() && d.script != SCRIPT_INLINE)
                    .then(|| std::path::Path::new(&d.script)),
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

#[cfg(test)]
mod tests {
    use xo_proto::{AnomalyKind, Evidence, Severity, Steering, SteeringSource};

    use super::Turns;

    fn steering(kind: AnomalyKind, severity: Severity) -> Steering {
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Steering {
            v: 1,
            unit: "u".into(),
            id: format!("u-{n}-{}", kind.as_str()),
            kind,
            severity,
            message: format!("[SUPERVISOR] {}", kind.as_str()),
            turn: 1,
            at: 0,
            evidence: Evidence::default(),
            source: SteeringSource::Xo,
        }
    }

    #[test]
    fn critical_steering_is_a_pace_emergency_or_a_second_loop() {
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        let t = Turns::new(tx);
        t.push(&steering(AnomalyKind::Stall, Severity::Warning));
        t.push(&steering(AnomalyKind::Loop, Severity::Warning));
        assert!(!t.take_critical(), "one loop and a stall are not critical");
        t.push(&steering(AnomalyKind::Loop, Severity::Warning));
        assert!(t.take_critical(), "a loop steered twice is");
        assert!(!t.take_critical(), "taken once");
        t.reset();
        assert!(!t.has_steering());
        t.push(&steering(AnomalyKind::Loop, Severity::Warning));
        assert!(!t.take_critical(), "a new task counts loops afresh");
        t.push(&steering(AnomalyKind::Pace, Severity::Critical));
        assert!(t.take_critical(), "a PACE emergency is");
        assert_eq!(t.take_steering().len(), 2);
    }

    #[test]
    fn a_steering_sent_again_under_its_id_is_given_once() {
        let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
        let t = Turns::new(tx);
        let s = steering(AnomalyKind::Context, Severity::Urgent);
        assert!(t.push(&s));
        assert!(!t.push(&s), "the same id again is ignored");
        assert_eq!(t.take_steering().len(), 1);
        assert!(t.push(&steering(AnomalyKind::Context, Severity::Urgent)));
        // Only the last SEEN_IDS ids are remembered.
        for _ in 0..super::SEEN_IDS {
            t.push(&steering(AnomalyKind::Stall, Severity::Warning));
        }
        assert!(t.push(&s), "an id long gone is new again");
    }
}
