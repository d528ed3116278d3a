//! A baseline detector for benchmarks: OpenHands' published stuck-detector
//! rules, written here from their description (the agent controller's
//! `StuckDetector`), over the same SALUTE actions the radio sees. An
//! action is "the same" when its tool and arguments hash match, an
//! observation when its output hash matches.
//!
//! 1. the same action with the same observation 4 times in a row;
//! 2. the same action ending in an error 3 times in a row;
//! 3. a monologue: the same agent message 3 times with no tool step between;
//! 4. alternation: over the last 6 actions, A B A B A B with the same
//!    observations each time.
//!
//! OpenHands' fifth rule (10 condensation events in a row with nothing
//! else) has no SALUTE action; `condensations` counts it, not `recent`.

use xo_proto::{Action, ActionKind, Outcome};

/// How many actions the rules look back over.
const WINDOW: usize = 6;

/// The rules' state for one run.
#[derive(Debug, Default, Clone)]
pub struct OpenHandsStuck {
    last: Vec<Action>,
    stuck: bool,
}

/// Which rule found the run stuck.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StuckRule {
    RepeatedObservation,
    RepeatedError,
    Monologue,
    Alternation,
}

impl StuckRule {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RepeatedObservation => "repeated action+observation",
            Self::RepeatedError => "repeated action+error",
            Self::Monologue => "monologue",
            Self::Alternation => "alternation",
        }
    }
}

fn same_action(a: &Action, b: &Action) -> bool {
    a.kind == b.kind && a.tool == b.tool && a.args_hash == b.args_hash
}

fn same_step(a: &Action, b: &Action) -> bool {
    same_action(a, b) && a.output_hash == b.output_hash && a.outcome == b.outcome
}

impl OpenHandsStuck {
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes the next action; `Some(rule)` when this action makes the run
    /// stuck after it was not (one decision an episode, as OpenHands stops
    /// the agent once).
    pub fn push(&mut self, action: &Action) -> Option<StuckRule> {
        self.last.push(action.clone());
        if self.last.len() > WINDOW {
            self.last.remove(0);
        }
        let rule = self.rule();
        let new = rule.is_some() && !self.stuck;
        self.stuck = rule.is_some();
        rule.filter(|_| new)
    }

    fn rule(&self) -> Option<StuckRule> {
        let n = self.last.len();
        let tail = |k: usize| (n >= k).then(|| &self.last[n - k..]);
        let tools = |s: &[Action]| s.iter().all(|a| a.kind == ActionKind::Tool);
        if let Some(s) = tail(4)
            && tools(s)
            && s.iter().all(|a| same_step(a, &s[0]))
        {
            return Some(StuckRule::RepeatedObservation);
        }
        if let Some(s) = tail(3)
            && tools(s)
            && s.iter()
                .all(|a| same_action(a, &s[0]) && a.outcome == Outcome::Error)
        {
            return Some(StuckRule::RepeatedError);
        }
        if let Some(s) = tail(3)
            && s.iter()
                .all(|a| a.kind == ActionKind::Message && a.outcome == Outcome::Ok)
            && s.iter().all(|a| a.output_hash == s[0].output_hash)
        {
            return Some(StuckRule::Monologue);
        }
        if let Some(s) = tail(6)
            && tools(s)
            && !same_action(&s[0], &s[1])
            && same_step(&s[0], &s[2])
            && same_step(&s[0], &s[4])
            && same_step(&s[1], &s[3])
            && same_step(&s[1], &s[5])
        {
            return Some(StuckRule::Alternation);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(args: &str, out: &str, outcome: Outcome) -> Action {
        Action::tool("run", args, outcome, 0).with_output(out)
    }

    #[test]
    fn each_rule_fires_once_an_episode() {
        let mut d = OpenHandsStuck::new();
        let a = tool("a", "x", Outcome::Ok);
        assert_eq!(d.push(&a), None);
        assert_eq!(d.push(&a), None);
        assert_eq!(d.push(&a), None);
        assert_eq!(d.push(&a), Some(StuckRule::RepeatedObservation));
        assert_eq!(d.push(&a), None, "still stuck: no new decision");
        // A different step ends the episode.
        assert_eq!(d.push(&tool("b", "y", Outcome::Ok)), None);

        let mut d = OpenHandsStuck::new();
        let e = tool("a", "x", Outcome::Error);
        d.push(&e);
        d.push(&e);
        assert_eq!(d.push(&e), Some(StuckRule::RepeatedError));

        let mut d = OpenHandsStuck::new();
        let m = Action::message(Some("h"), Outcome::Ok, 0);
        d.push(&m);
        d.push(&m);
        assert_eq!(d.push(&m), Some(StuckRule::Monologue));

        let mut d = OpenHandsStuck::new();
        let (a, b) = (tool("a", "x", Outcome::Ok), tool("b", "y", Outcome::Ok));
        for s in [&a, &b, &a, &b, &a] {
            assert_eq!(d.push(s), None);
        }
        assert_eq!(d.push(&b), Some(StuckRule::Alternation));

        // Polling with a changing output is not stuck.
        let mut d = OpenHandsStuck::new();
        for i in 0..8 {
            assert_eq!(d.push(&tool("a", &i.to_string(), Outcome::Ok)), None);
        }
    }
}
