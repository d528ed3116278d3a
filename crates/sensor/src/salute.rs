//! From turns to SALUTE reports: a unit's state across turns (progress,
//! the last 20 actions, context, tokens, cost, tool failures), one report
//! a turn. The runner, `xo import` and `xo watch` build reports here.

use std::collections::VecDeque;

use xo_proto::{Outcome as ActOutcome, SaluteReport};

use crate::TurnEvent;

/// A compaction the unit made at this fill or higher is its own (a
/// watchdog near the window's end); one lower was asked for (`/compact`)
/// and says nothing of where it compacts by itself.
pub const LEARN_FROM_FILL: f64 = 0.7;

/// A unit's SALUTE state across turns: what each report says.
pub struct SaluteState {
    unit: String,
    role: String,
    host: Option<String>,
    limit: u64,
    task: Option<String>,
    turn: u64,
    seq: u64,
    /// This process's incarnation: a restart starts `seq` over in a higher epoch.
    epoch: u64,
    since_progress: u32,
    history: u32,
    recent: VecDeque<xo_proto::Action>,
    context: u64,
    context_limit: u64,
    condensations: u32,
    /// Where the agent compacts itself: told by its format, else the
    /// highest fill seen before its first compaction.
    compacts_at: Option<f64>,
    /// The highest fill seen since the last compaction.
    peak_fill: f64,
    tokens_in: u64,
    tokens_out: u64,
    cost: f64,
    model: Option<String>,
    failures: std::collections::BTreeMap<String, u32>,
    summary: Option<String>,
}

impl SaluteState {
    /// A unit's state before its first turn; `context_limit` is used
    /// until a turn tells the window.
    pub fn new(unit: &str, role: &str, host: Option<String>, context_limit: u64) -> Self {
        Self {
            unit: unit.to_string(),
            role: role.to_string(),
            host,
            limit: context_limit,
            task: None,
            turn: 0,
            seq: 0,
            epoch: xo_proto::now_ms(),
            since_progress: 0,
            history: 0,
            recent: VecDeque::new(),
            context: 0,
            context_limit,
            condensations: 0,
            compacts_at: None,
            peak_fill: 0.0,
            tokens_in: 0,
            tokens_out: 0,
            cost: 0.0,
            model: None,
            failures: Default::default(),
            summary: None,
        }
    }

    /// The task the reports are about.
    pub fn task(&self) -> Option<&str> {
        self.task.as_deref()
    }

    /// A new task: progress, history and context start over.
    pub fn start_task(&mut self, task: Option<String>) {
        self.task = task;
        self.since_progress = 0;
        self.history = 0;
        self.recent.clear();
        self.context = 0;
        self.condensations = 0;
        self.peak_fill = 0.0;
    }

    /// One agent turn: the report it makes.
    pub fn turn(&mut self, ev: TurnEvent) -> SaluteReport {
        self.turn += 1;
        self.seq += 1;
        self.history += 1;
        if ev.progress || ev.instructed {
            self.since_progress = 0;
        } else if !ev.waiting {
            self.since_progress += 1;
        }
        if let Some(mut a) = ev.action {
            a.turn = self.turn;
            if a.outcome == ActOutcome::Error
                && let Some(t) = &a.tool
            {
                *self.failures.entry(t.to_string()).or_default() += 1;
            }
            self.recent.push_back(a);
            while self.recent.len() > 20 {
                self.recent.pop_front();
            }
        }
        if let Some(c) = ev.context_tokens {
            self.context = c;
        }
        if let Some(l) = ev.context_limit {
            self.context_limit = l;
        }
        if ev.condensed {
            self.condensations += 1;
            // A unit seen compacting itself high in its window compacts
            // there: its own watchdog, which the XO does not duplicate.
            if self.compacts_at.is_none() && self.peak_fill >= LEARN_FROM_FILL {
                self.compacts_at = Some(self.peak_fill);
            }
            self.peak_fill = 0.0;
        }
        if ev.compacts_at.is_some() {
            self.compacts_at = ev.compacts_at;
        }
        self.tokens_in = self.tokens_in.saturating_add(ev.tokens_in);
        self.tokens_out = self.tokens_out.saturating_add(ev.tokens_out);
        // A transcript is input: its costs are summed at the ceiling.
        self.cost = xo_proto::finite::add(self.cost, ev.cost_usd);
        if ev.model.is_some() {
            self.model = ev.model;
        }
        if ev.summary.is_some() {
            self.summary = ev.summary;
        }
        let mut r = self.report();
        self.peak_fill = self.peak_fill.max(r.size.context_fill);
        // The record's own time where the format keeps one (a replayed
        // recording is then dated when it happened, not when it was read).
        if let Some(at) = ev.at_ms {
            r.time.at = at;
        }
        r
    }

    /// The agent stopped working (its session ended, or it waits for its
    /// user): a report of the state as it is, marked ended, so that the XO
    /// neither steers it nor calls it stale for being silent. `None`
    /// before the first turn (the XO knows nothing of the unit yet).
    pub fn rest(&mut self) -> Option<SaluteReport> {
        if self.turn == 0 {
            return None;
        }
        self.seq += 1;
        let mut r = self.report();
        r.status.ended = true;
        Some(r)
    }

    /// The state as it is, saying what the unit waits for (a person's
    /// answer, a permission, its cap): marked ended as well, so that it is
    /// neither steered nor called stale while it waits. `None` before the
    /// first turn.
    pub fn waiting(&mut self, needs: xo_proto::UnitNeeds) -> Option<SaluteReport> {
        let mut r = self.rest()?;
        r.status.needs = Some(needs);
        Some(r)
    }

    /// What the session has spent so far: its cost in USD and its tokens
    /// (input and output).
    pub fn spend(&self) -> (f64, u64) {
        (self.cost, self.tokens_in.saturating_add(self.tokens_out))
    }

    /// The report of the state as it is, under the current turn and seq.
    fn report(&self) -> SaluteReport {
        let mut r = SaluteReport::new(&self.unit, &self.role, self.turn, self.seq);
        r.time.epoch = self.epoch;
        let limit = if self.context_limit > 0 {
            self.context_limit
        } else {
            self.limit
        };
        r.size.context_tokens = self.context;
        r.size.context_limit = limit;
        r.size.context_fill = if limit > 0 {
            (self.context as f64 / limit as f64).min(1.0)
        } else {
            0.0
        };
        r.size.history_len = self.history;
        r.size.condensations = self.condensations;
        r.size.compacts_at = self.compacts_at;
        r.activity.task_id = self.task.clone();
        r.activity.summary = self.summary.clone();
        r.activity.turns_since_progress = self.since_progress;
        r.activity.recent = self.recent.iter().cloned().collect();
        r.location.host = self.host.clone();
        r.equipment.model = self.model.clone();
        r.equipment.tokens_in = self.tokens_in;
        r.equipment.tokens_out = self.tokens_out;
        r.equipment.cost_usd = self.cost;
        r.equipment.tool_failures = self.failures.clone();
        r
    }
}
