//! Escalation instead of repetition (issue 37, item 2). A stretch is the
//! turns since a unit's last progress. In one stretch a kind of anomaly is
//! steered at most three times: the first finding gets the rule's own
//! steering, the second a firmer one (second notice), the third a last one
//! that tells the agent a person was asked and marks the unit **needs you**
//! (`stuck`); after that the stretch gets no more steering of the kind. The
//! cooldown still spaces them; a new stretch (progress) starts over and
//! clears `stuck`.

use serde::{Deserialize, Serialize};
use xo_proto::steering::STEERING_TAG;
use xo_proto::{AnomalyKind, NeedsReason, NeedsYou, Severity};

use crate::rules::{Finding, limit_sentences};

/// Steerings of one kind in one stretch, at most.
pub const MAX_PER_STRETCH: u8 = 3;

/// Where a kind's steering stands in the unit's current stretch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stretch {
    /// The turn the stretch began (the unit's last progress).
    pub from: u64,
    /// Steerings of the kind given in it.
    pub given: u8,
}

impl Stretch {
    /// The count of the stretch that began at `from` (a new one starts at 0).
    fn enter(&mut self, from: u64) {
        if self.from != from {
            *self = Stretch { from, given: 0 };
        }
    }
}

/// Kinds that escalate. Context is told once a level already, PACE is
/// itself the unit's escalation plan, a provider outage is not the agent's
/// doing; stale and operator steering come from elsewhere.
pub fn escalates(kind: AnomalyKind) -> bool {
    matches!(
        kind,
        AnomalyKind::Stall
            | AnomalyKind::Loop
            | AnomalyKind::Oscillation
            | AnomalyKind::Monologue
            | AnomalyKind::Empty
            | AnomalyKind::Cascade
    )
}

/// What the next steering of a kind in a stretch is.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Steer with this finding (the first, or a firmer one).
    Steer(Finding),
    /// Steer a last time and mark the unit as needing a person.
    GiveUp(Finding, NeedsYou),
    /// The stretch's steering of this kind is spent: nothing more.
    Spent,
}

/// The step for `f` in the stretch that began at `from`, counted in `st`.
pub fn step(st: &mut Stretch, from: u64, f: Finding, turn: u64, at: u64) -> Step {
    st.enter(from);
    if st.given >= MAX_PER_STRETCH {
        return Step::Spent;
    }
    st.given += 1;
    match st.given {
        1 => Step::Steer(f),
        2 => Step::Steer(notice(f, 2)),
        _ => {
            let f = notice(f, 3);
            let needs = NeedsYou {
                reason: NeedsReason::Stuck,
                turn,
                stretch_from: from,
                since: at,
                kind: Some(f.kind),
                detail: f.message.clone(),
            };
            Step::GiveUp(f, needs)
        }
    }
}

/// Counts a steering the unit's own check gave (microcosm) in the stretch
/// that began at `from`; `true` when that spent the stretch's steering.
pub fn count_own(st: &mut Stretch, from: u64) -> bool {
    st.enter(from);
    st.given = st.given.saturating_add(1).min(MAX_PER_STRETCH);
    st.given == MAX_PER_STRETCH
}

/// The rule's first sentence, split at its `Kind: ` head.
fn head_and_rest(message: &str) -> (String, String) {
    let body = message
        .strip_prefix(STEERING_TAG)
        .unwrap_or(message)
        .trim_start();
    let b = body.as_bytes();
    let end = (0..b.len())
        .find(|&i| {
            matches!(b[i], b'.' | b'!' | b'?')
                && b.get(i + 1).is_none_or(|c| c.is_ascii_whitespace())
        })
        .unwrap_or(b.len());
    let first = &body[..end];
    match first.split_once(": ") {
        Some((head, rest)) => (head.to_string(), rest.to_string()),
        None => ("Still".to_string(), first.to_string()),
    }
}

/// The second or third notice of a finding: the same evidence, a firmer
/// instruction, never more than three sentences.
fn notice(mut f: Finding, n: u8) -> Finding {
    let (head, rest) = head_and_rest(&f.message);
    f.message = if n == 2 {
        format!(
            "{STEERING_TAG} {head}, second notice: {rest}, and my last steering did not change that. Stop and change course: write down what you have tried, then take one step unlike any of them, or say plainly what blocks you."
        )
    } else {
        format!(
            "{STEERING_TAG} {head}, third notice: {rest}. I have asked a person to look at this. Stop here, write a short summary of what you tried and what blocks you, and wait for instructions."
        )
    };
    f.message = limit_sentences(&f.message, 3);
    f.severity = f.severity.max(Severity::Urgent);
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use xo_proto::Evidence;

    fn stall(n: u32) -> Finding {
        Finding {
            kind: AnomalyKind::Stall,
            severity: Severity::Warning,
            message: format!(
                "{STEERING_TAG} Stall: no progress for {n} turns on task t1. Reassess: take a different approach."
            ),
            evidence: Evidence::default(),
        }
    }

    #[test]
    fn a_stretch_is_steered_then_escalated_then_given_up_on_then_left_alone() {
        let mut st = Stretch::default();
        let Step::Steer(first) = step(&mut st, 10, stall(9), 19, 1) else {
            panic!()
        };
        assert_eq!(first, stall(9), "the first is the rule's own");
        let Step::Steer(second) = step(&mut st, 10, stall(12), 22, 2) else {
            panic!()
        };
        assert!(
            second.message.starts_with("[SUPERVISOR] Stall, second notice: no progress for 12 turns on task t1, and my last steering did not change that."),
            "{}",
            second.message
        );
        assert_eq!(second.severity, Severity::Urgent);
        let Step::GiveUp(third, needs) = step(&mut st, 10, stall(15), 25, 3) else {
            panic!()
        };
        assert!(
            third.message.contains(
                "third notice: no progress for 15 turns on task t1. I have asked a person"
            ),
            "{}",
            third.message
        );
        assert_eq!(
            crate::rules::count_sentences(&third.message),
            3,
            "{}",
            third.message
        );
        assert_eq!(
            (needs.reason, needs.turn, needs.stretch_from, needs.kind),
            (NeedsReason::Stuck, 25, 10, Some(AnomalyKind::Stall))
        );
        for t in 0..50 {
            assert_eq!(
                step(&mut st, 10, stall(18 + t), 28 + u64::from(t), 4),
                Step::Spent
            );
        }
        // Progress: a new stretch starts over.
        assert!(matches!(step(&mut st, 80, stall(9), 89, 5), Step::Steer(f) if f == stall(9)));
    }
}
