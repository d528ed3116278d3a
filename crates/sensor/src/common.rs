//! What every format's reader shares: the tool calls waiting for their
//! results, commands still running, and [`Common`], which turns what a
//! format read (a tool result, a message, a refusal, a run's end) into the
//! SALUTE turn events the radio checks, with progress and evidence.

use super::*;

/// A tool call waiting for its result.
#[derive(Debug, Clone)]
pub(crate) struct Pending {
    pub tool: compact_str::CompactString,
    pub args_hash: compact_str::CompactString,
    /// A command line, for error classes that depend on it (tests).
    pub command: Option<String>,
}

/// Commands still running after their call returned: Codex's unified exec
/// (`exec_command` answered `Process running with session ID N`, ended in a
/// later `write_stdin` or `exec_command_end`) and Claude Code's background
/// tasks (`Command running in background with ID: X`, ended in a later
/// `TaskOutput`). The command's end is its action, with its exit code and
/// output; the polls between are waits.
#[derive(Debug, Default)]
pub(crate) struct Sessions {
    /// Running commands by session or task id.
    pub running: HashMap<String, Running>,
    /// Poll calls by call id: the session or task each one polls.
    pub polls: HashMap<String, String>,
    /// Commands whose end was told by an event of its own (Codex's
    /// `exec_command_end`): their call ids and sessions, whose later results
    /// are no new step.
    pub ended_calls: std::collections::HashSet<String>,
    pub ended_sessions: std::collections::HashSet<String>,
}

/// A command still running: its call, and what it has written so far.
#[derive(Debug)]
pub(crate) struct Running {
    pub call: String,
    pub pending: Pending,
    pub output: String,
}

/// What every line parser shares: pending calls, the session, usage
/// waiting for the next turn, counters.
#[derive(Debug, Default)]
pub(crate) struct Common {
    pub pending: HashMap<String, Pending>,
    pub session: Option<String>,
    pub model: Option<String>,
    pub context_limit: Option<u64>,
    /// Usage seen since the last turn, carried by the next one.
    pub tokens_in: u64,
    pub tokens_out: u64,
    pub cost_usd: f64,
    pub context_tokens: Option<u64>,
    pub condensed: bool,
    /// Tokens the agent keeps free below its window before it compacts
    /// its own context, where that is known of it.
    pub compact_reserve: Option<u64>,
    /// A new instruction arrived since the last turn.
    pub instructed: bool,
    /// A message's text, held until the stream tells whether a call of the
    /// same message follows (its id: Claude's message id, Cursor's
    /// `model_call_id`; the text): see [`Common::hold`].
    held: Option<(String, String)>,
    /// Commands still running after their call returned.
    pub exec: Sessions,
    pub stats: Stats,
    /// The agent's last words: a run's result, else its last message.
    pub final_text: Option<String>,
    /// The model the last turn told.
    model_told: Option<String>,
    /// A model and its context window ([`classify::context_window`]).
    window_of: Option<(String, Option<u64>)>,
    /// OpenHands: the stream is of V1 SDK events.
    pub openhands_v1: bool,
    /// OpenHands: actions written without an `id` (older outputs), each
    /// given a number; the next observation without a `cause` is the
    /// oldest one's.
    pub unnumbered: std::collections::VecDeque<String>,
    next_number: u64,
    /// The time of the record being read (ms since the epoch).
    pub at_ms: Option<u64>,
    /// How the run ended, once it did: `Some(true)` failed.
    pub ended: Option<bool>,
    /// The agent has stopped working: its run ended, or its turn did and
    /// it waits for its user. Work after it clears it.
    pub resting: bool,
    /// The provider refused the agent for a usage limit that resets then
    /// (ms since the epoch), by the format's own record of its limits;
    /// `None` once a record says it is within them again.
    pub limited_until: Option<u64>,
    /// The session this one was started by (a subagent's parent).
    pub parent: Option<String>,
    /// The kind of the record being read, as [`Common::kind`] named it.
    pub record_kind: String,
    /// The record being read is of a kind skipped by name.
    pub record_skipped: bool,
    /// The record being read is of a kind this sensor does not know
    /// (though what came before it may have ended a turn).
    pub record_unknown: bool,
    /// What the run has looked at (tool and arguments), so that a second
    /// look is not progress.
    explored: std::collections::HashSet<String>,
    /// Cumulative usage last seen (streams that report totals, not deltas).
    last_cost: f64,
    last_in: u64,
    last_out: u64,
}

impl Common {
    /// A reader's shared state for `format` (Claude Code reserves room for
    /// its own compaction).
    pub(crate) fn for_format(format: Format) -> Self {
        Self {
            compact_reserve: match format {
                Format::Claude => Some(claude::AUTO_COMPACT_RESERVE),
                _ => None,
            },
            ..Self::default()
        }
    }

    /// A call written without an id: a number of its own, queued for the
    /// next result written without one.
    pub fn number_call(&mut self) -> String {
        self.next_number += 1;
        let id = format!("#{}", self.next_number);
        self.unnumbered.push_back(id.clone());
        id
    }

    /// Names the kind of the record being read: `parts` joined by `/`
    /// (`system/init`, `event_msg/token_count`). The buffer is reused.
    pub fn kind(&mut self, parts: &[&str]) {
        self.record_kind.clear();
        for (i, p) in parts.iter().enumerate() {
            if i > 0 {
                self.record_kind.push('/');
            }
            self.record_kind.push_str(p);
        }
    }

    /// The record being read is of a kind this sensor knows carries no
    /// step: skipped by name (counted as such, not as unknown).
    pub fn skip(&mut self) {
        self.record_skipped = true;
    }

    /// The record being read is of a kind this sensor does not know: not
    /// read, counted and said.
    pub fn unknown(&mut self) {
        self.record_unknown = true;
    }

    /// Takes cumulative totals; adds what grew since the last ones.
    pub fn cumulative(
        &mut self,
        cost: Option<f64>,
        tokens_in: Option<u64>,
        tokens_out: Option<u64>,
    ) {
        if let Some(c) = cost {
            if c > self.last_cost {
                self.cost_usd = xo_proto::finite::add(self.cost_usd, c - self.last_cost);
            }
            self.last_cost = c;
        }
        if let Some(t) = tokens_in {
            self.tokens_in += t.saturating_sub(self.last_in);
            self.last_in = t;
        }
        if let Some(t) = tokens_out {
            self.tokens_out += t.saturating_sub(self.last_out);
            self.last_out = t;
        }
    }

    /// An error the agent met that is no tool's result (a failed turn, a
    /// stream error): a message turn with its error class.
    pub fn error_message(&mut self, text: &str) -> TurnEvent {
        let class = match classify::error_class(false, None, text, None).as_deref() {
            None | Some("tool_error") => "agent_error".to_string(),
            Some(c) => c.to_string(),
        };
        let a = Action::message(Some(&short_hash(text)), Outcome::Error, 0).with_error(&class);
        self.turn(Some(a), false)
    }
    /// The words of message `id`, held: the agents write a message a part
    /// at a time, and text that a call of the same message follows is that
    /// call's preamble, no turn of its own ([`Common::called`]). Text held
    /// for another message is a turn now.
    pub fn hold(&mut self, id: &str, text: &str) -> Option<TurnEvent> {
        match &mut self.held {
            Some((held, before)) if held == id => {
                if !before.is_empty() && !text.is_empty() {
                    before.push('\n');
                }
                before.push_str(text);
                None
            }
            _ => {
                let earlier = self.flush_held();
                self.held = Some((id.to_string(), text.to_string()));
                earlier
            }
        }
    }

    /// Whether text of message `id` is held.
    pub fn holding(&self, id: &str) -> bool {
        self.held.as_ref().is_some_and(|(held, _)| held == id)
    }

    /// A call of message `id` starts: the text held for it was its
    /// preamble; text held for another message is a turn now.
    pub fn called(&mut self, id: &str) -> Option<TurnEvent> {
        if self.holding(id) {
            self.held = None;
            None
        } else {
            self.flush_held()
        }
    }

    /// The held text as a message turn: no call of its message followed.
    pub fn flush_held(&mut self) -> Option<TurnEvent> {
        let (_, text) = self.held.take()?;
        Some(self.message(&text))
    }

    /// A step that waited on a running command: a turn (its tokens, its
    /// time) with no action, which counts toward no stall.
    pub fn wait(&mut self) -> TurnEvent {
        TurnEvent {
            waiting: true,
            ..self.turn(None, false)
        }
    }

    /// The context window of the model last told, worked out once a model.
    fn model_window(&mut self) -> Option<u64> {
        let model = self.model.as_deref()?;
        match &self.window_of {
            Some((m, w)) if m == model => *w,
            _ => {
                let w = classify::context_window(model);
                self.window_of = Some((model.to_string(), w));
                w
            }
        }
    }

    /// A turn carrying the usage accumulated since the last one.
    pub fn turn(&mut self, action: Option<Action>, progress: bool) -> TurnEvent {
        self.stats.turns += 1;
        let context_limit = match self.context_limit {
            Some(l) => Some(l),
            None => self.model_window(),
        };
        TurnEvent {
            action,
            summary: None,
            progress,
            tokens_in: std::mem::take(&mut self.tokens_in),
            tokens_out: std::mem::take(&mut self.tokens_out),
            cost_usd: std::mem::take(&mut self.cost_usd),
            context_tokens: self.context_tokens.take(),
            context_limit,
            condensed: std::mem::take(&mut self.condensed),
            compacts_at: context_limit
                .zip(self.compact_reserve)
                .filter(|(l, r)| *l > *r)
                .map(|(l, r)| (l - r) as f64 / l as f64),
            instructed: std::mem::take(&mut self.instructed),
            waiting: false,
            at_ms: self.at_ms,
            // Told once a change: the report keeps the model it last heard.
            model: (self.model != self.model_told)
                .then(|| {
                    self.model_told = self.model.clone();
                    self.model.clone()
                })
                .flatten(),
        }
    }

    /// A tool call's result: the completed action as a turn, or `None`
    /// (counted) when no call of that id was seen.
    pub fn complete(
        &mut self,
        id: &str,
        ok: bool,
        output: &str,
        exit_code: Option<i64>,
    ) -> Option<TurnEvent> {
        let Some(p) = self.pending.remove(id) else {
            self.stats.orphan_results += 1;
            return None;
        };
        Some(self.tool_turn(&p, ok, output, exit_code))
    }

    /// A completed tool action as a turn.
    pub fn tool_turn(
        &mut self,
        p: &Pending,
        ok: bool,
        output: &str,
        exit_code: Option<i64>,
    ) -> TurnEvent {
        self.tool_turn_with(
            &p.tool,
            &p.args_hash,
            p.command.as_deref(),
            ok,
            output,
            exit_code,
        )
    }

    /// [`Common::tool_turn`] from borrowed parts (no pending call made).
    pub fn tool_turn_with(
        &mut self,
        tool: &str,
        args_hash: &str,
        command: Option<&str>,
        ok: bool,
        output: &str,
        exit_code: Option<i64>,
    ) -> TurnEvent {
        // The command whose status decided, and what that status means
        // for its program (grep 1 is no match, pylint 16 is findings).
        let decided = command.map(evidence::deciding_command);
        let meaning = match (
            decided
                .as_deref()
                .map(|d| evidence::program(evidence::status_command(d))),
            exit_code,
        ) {
            (Some(p), Some(code)) if code != 0 => evidence::meaning(p, code),
            _ => None,
        };
        if exit_code.is_some_and(|c| c != 0) {
            self.stats.exits_nonzero += 1;
            self.stats.exits_by_meaning += u64::from(meaning.is_some());
        }
        let class = match meaning {
            Some(_) => None,
            None => classify::error_class(ok, exit_code, output, command),
        };
        let outcome = match (&class, output.trim().is_empty()) {
            (Some(_), _) => Outcome::Error,
            (None, true) => Outcome::Empty,
            (None, false) => Outcome::Ok,
        };
        let mut a = Action::tool(tool, args_hash, outcome, 0)
            .with_output(hex_hash(output).as_str())
            .with_evidence(
                decided.as_deref(),
                evidence::telling_line(output, class.is_some()),
            );
        if let Some(c) = &class {
            a = a.with_error(c);
        }
        // A check that reported findings told the agent something; it did
        // not move the work.
        let progress = class.is_none()
            && meaning != Some(evidence::Meaning::Findings)
            && match classify::step_kind(tool, command) {
                classify::StepKind::Write
                | classify::StepKind::Check
                | classify::StepKind::Commit => true,
                // New to this run: progress; looked at before: not.
                classify::StepKind::Explore => {
                    self.explored.insert(format!("{tool}\u{1f}{args_hash}"))
                }
                classify::StepKind::Other => false,
            };
        self.turn(Some(a), progress)
    }

    /// A reply the agent's harness refused to run (a format error): a
    /// failed action of kind `format_error`, tool `reply`, never progress,
    /// with the harness's words as its line.
    pub fn refused(&mut self, args_hash: &str, text: &str) -> TurnEvent {
        let line = text.lines().map(str::trim).find(|l| !l.is_empty());
        let a = Action::tool("reply", args_hash, Outcome::Error, 0)
            .with_error(classify::FORMAT_ERROR)
            .with_output(hex_hash(text).as_str())
            .with_evidence(None, line);
        self.turn(Some(a), false)
    }

    /// An agent message: empty replies and repeated text are what the
    /// radio's monologue and empty rules look at.
    pub fn message(&mut self, text: &str) -> TurnEvent {
        if !text.trim().is_empty() {
            // The buffer is reused: no allocation a message.
            let last = self.final_text.get_or_insert_with(String::new);
            last.clear();
            last.push_str(text);
        }
        let a = if text.trim().is_empty() {
            Action::message(None, Outcome::Empty, 0)
        } else {
            Action::message(Some(hex_hash(text.trim()).as_str()), Outcome::Ok, 0)
        };
        self.turn(Some(a), false)
    }

    /// The end of a run: what is left of the usage, and a summary.
    pub fn end(&mut self, summary: String, failed: Option<&str>) -> TurnEvent {
        let action = failed.map(|text| {
            let class = match classify::error_class(false, None, text, None).as_deref() {
                None | Some("tool_error") => "run_failed".to_string(),
                Some(c) => c.to_string(),
            };
            Action::message(Some(&short_hash(text)), Outcome::Error, 0).with_error(&class)
        });
        self.ended = Some(failed.is_some());
        self.resting = true;
        let mut t = self.turn(action, failed.is_none());
        t.summary = Some(summary);
        t
    }
}
