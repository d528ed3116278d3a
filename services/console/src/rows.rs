//! The fleet page's live rows: once a second, the rows of the units that
//! reported or were steered since the last second, rendered here (the one
//! row builder, `pages::fleet::unit_row`) and sent to every open
//! stream as one `rows` event with the fleet's bucket counts. A tab swaps
//! them in: it makes no request per report, whatever the fleet's rate.
//!
//! The console may see a report before the supervisor has taken it in: a
//! unit whose summary is older than the report seen is asked for again
//! at the next tick (at most [`CATCH_UP`] ticks).
//!
//! The counts are kept from the rows rendered, and from the whole list read
//! again every [`RESYNC`]: a unit that goes stale or is forgotten changes
//! bucket without a report, and the resync sends its row too.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde::Serialize;
use tokio::task::JoinHandle;
use tracing::debug;
use xo_proto::control::{ListUnits, UnitSummary};

use crate::Shared;
use crate::events::Live;
use crate::pages::fleet::unit_row;
use crate::triage::{BUCKETS, counts, severity, triage_key};
use crate::views::{RowOut, Rows};

/// How often changed rows are sent.
pub const EVERY: Duration = Duration::from_secs(1);
/// How often the whole list is read again for the counts.
pub const RESYNC: Duration = Duration::from_secs(15);
/// Ticks a unit is asked for again while its summary is older than the
/// report the console saw (a report the supervisor refused never is).
pub const CATCH_UP: u8 = 3;

/// One changed row.
#[derive(Debug, Serialize)]
struct Row<'a> {
    unit: &'a str,
    role: &'a str,
    rank: u8,
    /// The sequence number of the report it shows.
    seq: u64,
    html: String,
}

/// The rest of a `rows` event: `{"rows": [...], "counts": …, "units": …}`.
#[derive(Debug, Serialize)]
struct Tail {
    /// Units in each bucket, in [`BUCKETS`] order, over the whole fleet.
    counts: [usize; BUCKETS.len()],
    units: usize,
}

/// What the batcher knows between ticks: each unit's bucket, and a hash
/// of the row it last sent (a row that reads the same is not sent again).
#[derive(Debug, Default)]
struct Ranks {
    of: HashMap<String, u8>,
    sent: HashMap<String, u64>,
    /// False until a whole list was read.
    whole: bool,
}

/// Sends `rows` events until the console stops.
pub fn start(c: Shared) -> JoinHandle<()> {
    tokio::spawn(async move {
        let stop = c.stop.clone();
        let mut ranks = Ranks::default();
        let mut tick = tokio::time::interval(EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut since_resync = Duration::ZERO;
        // Units behind the report seen: (the seq seen, ticks left).
        let mut behind: HashMap<Arc<str>, (u64, u8)> = HashMap::new();
        loop {
            tokio::select! {
                _ = stop.signal() => return,
                _ = tick.tick() => {}
            }
            let mut want: HashMap<Arc<str>, (u64, u8)> = std::mem::take(&mut behind);
            for (u, seq) in c.hub.take_changed() {
                let w = want.entry(u).or_insert((0, CATCH_UP));
                *w = (w.0.max(seq), CATCH_UP);
            }
            if c.hub.listeners() == 0 {
                // Nobody to send to: the next listener starts from a whole list.
                ranks = Ranks::default();
                continue;
            }
            let changed: Vec<Arc<str>> = want.keys().cloned().collect();
            since_resync += EVERY;
            let resync = !ranks.whole || since_resync >= RESYNC;
            let sums = if resync {
                since_resync = Duration::ZERO;
                match c.units().await {
                    Ok(all) => {
                        let was = std::mem::take(&mut ranks.of);
                        ranks.whole = true;
                        let mut out = Vec::new();
                        for u in all {
                            let r = severity(&u);
                            ranks.of.insert(u.unit.clone(), r);
                            let moved = was.get(&u.unit) != Some(&r);
                            if moved || want.contains_key(u.unit.as_str()) {
                                out.push(u);
                            }
                        }
                        out
                    }
                    Err(e) => {
                        debug!(error = %e, "console: the unit list for the live rows failed; next tick");
                        continue;
                    }
                }
            } else if changed.is_empty() {
                continue;
            } else {
                match changed_rows(&c, &changed).await {
                    Ok(sums) => {
                        for u in &sums {
                            ranks.of.insert(u.unit.clone(), severity(u));
                        }
                        sums
                    }
                    Err(e) => {
                        debug!(error = %e, "console: the changed rows failed; next tick");
                        continue;
                    }
                }
            };
            // Rows older than the report seen: again at the next tick.
            let got: HashMap<&str, u64> = sums.iter().map(|s| (s.unit.as_str(), s.seq)).collect();
            for (u, (seq, left)) in want {
                let caught = got.get(&*u).is_some_and(|s| *s >= seq);
                if !caught && left > 1 {
                    behind.insert(u, (seq, left - 1));
                }
            }
            if sums.is_empty() && !resync {
                continue;
            }
            let now = c.clock.now_ms();
            ranks.sent.retain(|u, _| ranks.of.contains_key(u));
            let mut rows = Vec::with_capacity(sums.len());
            for u in &sums {
                let html = unit_row(u, now).into_string();
                let hash = {
                    use std::hash::{Hash, Hasher};
                    let mut h = std::collections::hash_map::DefaultHasher::new();
                    html.hash(&mut h);
                    h.finish()
                };
                if ranks.sent.insert(u.unit.clone(), hash) == Some(hash) {
                    continue;
                }
                let row = Row {
                    unit: &u.unit,
                    role: &u.role,
                    rank: severity(u),
                    seq: u.seq,
                    html,
                };
                match serde_json::to_string(&row) {
                    Ok(json) => rows.push(RowOut {
                        unit: u.unit.clone(),
                        role: u.role.clone(),
                        rank: row.rank,
                        key: triage_key(u),
                        json,
                    }),
                    Err(e) => debug!(unit = %u.unit, error = %e, "console: a row not encoded"),
                }
            }
            if rows.is_empty() && !resync {
                continue;
            }
            let tail = Tail {
                counts: counts(ranks.of.values().copied()),
                units: ranks.of.len(),
            };
            match serde_json::to_string(&tail) {
                Ok(tail) => {
                    c.hub.seen.row_batches.fetch_add(1, Ordering::Relaxed);
                    c.hub.send(Live::rows(Arc::new(Rows::new(rows, tail))));
                }
                Err(e) => debug!(error = %e, "console: a rows batch not encoded"),
            }
        }
    })
}

/// The summaries of `units`, a page of the supervisor's at a time.
async fn changed_rows(
    c: &Shared,
    units: &[Arc<str>],
) -> Result<Vec<UnitSummary>, xo_proto::control::ServiceError> {
    let mut out = Vec::with_capacity(units.len());
    for chunk in units.chunks(ListUnits::PAGE) {
        let req = ListUnits::only(chunk.iter().map(|u| u.to_string()).collect());
        out.extend(c.call(&req).await?);
    }
    Ok(out)
}
