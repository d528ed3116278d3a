//! Where a unit stands: its triage bucket (red first) and where it sorts in
//! triage order. The fleet page, the live rows and each tab's view rank
//! units by these, the same way.

use xo_proto::control::UnitSummary;

/// Triage order (seed: the operator looks at red first): 0 red (the XO's
/// assessment or the unit's own), 1 amber, 2 not heard from (stale, as
/// `xo units` calls it, or its reports refused: its colour is of its last
/// report, not of now), 3 the rest, 4 idle (its task or session ended and
/// it has not reported since: the colour of a finished task is no alarm).
/// A unit that needs a person keeps its colour (and is sorted first).
pub(crate) fn severity(u: &UnitSummary) -> u8 {
    use xo_proto::Health;
    if u.ended && u.needs.is_none() {
        4
    } else if u.stale || u.refused_reports >= 3 {
        2
    } else if u.health == Health::Red || u.self_health == Health::Red {
        0
    } else if u.health == Health::Amber || u.self_health == Health::Amber {
        1
    } else {
        3
    }
}

/// The triage buckets, in order: what the count badges and the health
/// filter group by.
pub(crate) const BUCKETS: [&str; 5] = ["red", "amber", "stale", "green", "idle"];

/// The triage bucket of a severity.
pub(crate) fn bucket(rank: u8) -> &'static str {
    BUCKETS[usize::from(rank).min(BUCKETS.len() - 1)]
}

/// Units in each bucket, in [`BUCKETS`] order, of these severities.
pub(crate) fn counts(ranks: impl IntoIterator<Item = u8>) -> [usize; BUCKETS.len()] {
    let mut n = [0; BUCKETS.len()];
    for r in ranks {
        n[usize::from(r).min(BUCKETS.len() - 1)] += 1;
    }
    n
}

/// Where a unit sorts in triage order: a unit that needs a person first,
/// then by bucket; within one, the unacknowledged, the most steered, then
/// the longest without progress (the looper of 280 turns before a blip of
/// 3); then its id.
pub(crate) type TriageKey = (
    bool,
    u8,
    bool,
    std::cmp::Reverse<u64>,
    std::cmp::Reverse<u32>,
    String,
);

pub(crate) fn triage_key(u: &UnitSummary) -> TriageKey {
    use std::cmp::Reverse;
    (
        u.needs.is_none(),
        severity(u),
        // Acknowledged: below those of its colour nobody has.
        u.ack.is_some(),
        Reverse(u.steering_sent),
        Reverse(u.turns_since_progress),
        u.unit.clone(),
    )
}
