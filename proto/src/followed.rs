//! What followed a steering, read from its unit's later steering and
//! reports (`xo units UNIT`, the console's unit timeline).

use crate::Steering;

/// Turns after a steering with no progress before it is said to have
/// changed nothing (fewer: too soon to say).
pub const FOLLOW_TURNS: u64 = 5;

/// What followed a steering, read from the unit's later steering and
/// reports: the same words in `xo units UNIT` and on the console.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Followed {
    /// The unit made progress this many turns after it (its reports'
    /// turns without progress started over after the steering's turn).
    Progress(u64),
    /// A stronger steering of the same kind came after it (at that turn),
    /// or the unit was handed to a person.
    Escalated(u64),
    /// No progress in this many turns after it.
    NoChange(u64),
    /// Fewer than [`FOLLOW_TURNS`] turns reported since.
    TooSoon,
    /// Older than the reports kept.
    NotKnown,
}

impl std::fmt::Display for Followed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Progress(0) => f.write_str("progress at once"),
            Self::Progress(1) => f.write_str("progress within 1 turn"),
            Self::Progress(n) => write!(f, "progress within {n} turns"),
            Self::Escalated(t) => write!(f, "escalated at turn {t}"),
            Self::NoChange(n) => write!(f, "no change in {n} turns"),
            Self::TooSoon => f.write_str("too soon to say"),
            Self::NotKnown => f.write_str("not known (before the reports kept)"),
        }
    }
}

/// What followed `steering[i]` (oldest first), given the unit's later
/// steering, its kept report points (oldest first) and whether it was
/// handed to a person (`needs`).
pub fn followed(
    steering: &[Steering],
    i: usize,
    history: &[crate::control::ReportPoint],
    needs: Option<&crate::NeedsYou>,
) -> Followed {
    let Some(s) = steering.get(i) else {
        return Followed::NotKnown;
    };
    let t = s.turn;
    // Progress after it: a report whose turns without progress began
    // after the steering's turn.
    let after: Vec<&crate::control::ReportPoint> = history.iter().filter(|p| p.turn > t).collect();
    let progress = after
        .iter()
        .find(|p| p.turn.saturating_sub(u64::from(p.turns_since_progress)) > t)
        .map(|p| p.turn - u64::from(p.turns_since_progress) - t);
    // A stronger steering of its kind, before any progress.
    let until = progress.map_or(u64::MAX, |n| t + n);
    let stronger = steering[i + 1..]
        .iter()
        .find(|l| l.kind == s.kind && l.severity > s.severity && l.turn <= until)
        .map(|l| l.turn);
    let handed = needs
        .filter(|n| n.stretch_from <= t && n.turn >= t && n.turn <= until)
        .map(|n| n.turn);
    match (progress, stronger.or(handed)) {
        (_, Some(at)) => Followed::Escalated(at),
        (Some(n), None) => Followed::Progress(n),
        (None, None) => {
            let last = after.last().map_or(t, |p| p.turn);
            if history.is_empty() {
                Followed::NotKnown
            } else if last - t >= FOLLOW_TURNS {
                Followed::NoChange(last - t)
            } else {
                Followed::TooSoon
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Followed, followed};
    use crate::control::ReportPoint;

    fn steering(kind: &str, severity: &str, turn: u64) -> crate::Steering {
        serde_json::from_value(serde_json::json!({
            "v": 1, "unit": "u", "id": format!("s{turn}"), "kind": kind,
            "severity": severity, "message": "m", "turn": turn
        }))
        .unwrap()
    }

    /// Report points from turn 1, each with its turns without progress.
    fn points(tsp: &[u32]) -> Vec<ReportPoint> {
        tsp.iter()
            .enumerate()
            .map(|(i, t)| ReportPoint {
                turn: i as u64 + 1,
                turns_since_progress: *t,
                ..ReportPoint::default()
            })
            .collect()
    }

    /// What followed a steering: progress after it (and how soon), a
    /// stronger steering of its kind first, nothing for five turns, or
    /// too few turns yet; the words `xo units UNIT` and the console say.
    #[test]
    fn what_followed_a_steering_is_read_from_the_reports_after_it() {
        // Steered at turn 6 (6 turns without progress); progress at 8.
        let s = [steering("stall", "warning", 6)];
        let h = points(&[1, 2, 3, 4, 5, 6, 7, 0, 1]);
        assert_eq!(followed(&s, 0, &h, None), Followed::Progress(2));
        assert_eq!(
            followed(&s, 0, &h, None).to_string(),
            "progress within 2 turns"
        );
        // Still stuck five turns on.
        let h = points(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]);
        assert_eq!(followed(&s, 0, &h, None), Followed::NoChange(5));
        assert_eq!(
            followed(&s, 0, &h, None).to_string(),
            "no change in 5 turns"
        );
        // Three turns on: too soon.
        let short = &h[..9];
        assert_eq!(followed(&s, 0, short, None), Followed::TooSoon);
        // An urgent stall steering at 9: the warning escalated; the urgent
        // one itself is judged on its own.
        let two = [
            steering("stall", "warning", 6),
            steering("stall", "urgent", 9),
        ];
        assert_eq!(followed(&two, 0, &h, None), Followed::Escalated(9));
        assert_eq!(followed(&two, 1, &h, None), Followed::TooSoon);
        // Another kind after it is no escalation of it.
        let other = [
            steering("stall", "warning", 6),
            steering("loop", "urgent", 9),
        ];
        assert_eq!(followed(&other, 0, &h, None), Followed::NoChange(5));
        // Handed to a person in its stretch.
        let needs = crate::NeedsYou {
            reason: crate::NeedsReason::Stuck,
            turn: 10,
            stretch_from: 1,
            since: 0,
            kind: None,
            detail: String::new(),
        };
        assert_eq!(followed(&s, 0, &h, Some(&needs)), Followed::Escalated(10));
        // No reports kept: not known.
        assert_eq!(followed(&s, 0, &[], None), Followed::NotKnown);
    }
}
