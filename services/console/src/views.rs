//! What a fleet tab shows, mirrored on the server so that its live stream
//! carries only the rows it uses: the rows on its page, and on page 1 in
//! triage order the rows that rank into it. The page registers its view
//! when it is rendered (`data-view` on the table); the tab's stream names
//! it (`/api/v1/events?view=ID`) and from then on keeps the mirror as the
//! tab's script keeps the table: a row in the page is replaced, one that
//! no longer matches the filters leaves, one that ranks before the page's
//! last row comes in and pushes the last one out.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::triage::{TriageKey, bucket};

/// One row of a `rows` batch, as a view decides on it.
#[derive(Debug)]
pub struct RowOut {
    pub unit: String,
    pub role: String,
    pub rank: u8,
    pub key: TriageKey,
    /// The row's JSON in the batch (`{"unit":…,"html":…}`).
    pub json: String,
}

/// A `rows` batch: each row's JSON made once, a stream's event made of the
/// rows it takes ([`crate::views`]).
#[derive(Debug)]
pub struct Rows {
    pub rows: Vec<RowOut>,
    /// The batch's `counts` and `units` as a JSON object.
    tail: String,
}

impl Rows {
    /// `rows`, and the rest of the event as a JSON object (`tail`).
    pub fn new(rows: Vec<RowOut>, tail: String) -> Self {
        Self { rows, tail }
    }

    /// The event's JSON with the rows `take` keeps.
    pub fn json(&self, mut take: impl FnMut(&RowOut) -> bool) -> String {
        let mut out =
            String::with_capacity(64 + self.rows.iter().map(|r| r.json.len() + 1).sum::<usize>());
        out.push_str("{\"rows\":[");
        let mut first = true;
        for r in &self.rows {
            if take(r) {
                if !first {
                    out.push(',');
                }
                first = false;
                out.push_str(&r.json);
            }
        }
        out.push_str("],");
        // The tail's own braces dropped: its fields follow the rows.
        out.push_str(self.tail.trim_start_matches('{'));
        out
    }
}

/// The filters of a fleet page (`?role=`, `?health=`, `?q=`).
#[derive(Debug, Clone, Default)]
pub struct Filters {
    pub role: Option<String>,
    pub health: Option<String>,
    /// Lower-cased.
    pub q: Option<String>,
}

impl Filters {
    fn matches(&self, r: &RowOut) -> bool {
        self.role.as_ref().is_none_or(|x| *x == r.role)
            && self.health.as_ref().is_none_or(|h| h == bucket(r.rank))
            && self
                .q
                .as_ref()
                .is_none_or(|q| r.unit.to_lowercase().contains(q.as_str()))
    }
}

/// A tab's page: its rows and the keys they were placed by.
#[derive(Debug)]
pub struct View {
    pub filters: Filters,
    /// Rows a page holds.
    pub per: usize,
    /// Page 1 in triage order: rows that rank into it come in.
    pub grows: bool,
    pub shown: HashMap<String, TriageKey>,
}

impl View {
    /// Whether the tab uses `row`, updating the mirror as the tab will.
    pub fn wants(&mut self, row: &RowOut) -> bool {
        let on = self.shown.contains_key(&row.unit);
        if !self.filters.matches(row) {
            // The tab drops a row that left its filters.
            return on && self.shown.remove(&row.unit).is_some();
        }
        if on {
            self.shown.insert(row.unit.clone(), row.key.clone());
            return true;
        }
        if !self.grows {
            return false;
        }
        let last = self.shown.values().max();
        if self.shown.len() < self.per || last.is_some_and(|l| row.key < *l) {
            self.shown.insert(row.unit.clone(), row.key.clone());
            if self.shown.len() > self.per {
                let out = self
                    .shown
                    .iter()
                    .max_by(|a, b| a.1.cmp(b.1))
                    .map(|(u, _)| u.clone());
                if let Some(u) = out {
                    self.shown.remove(&u);
                }
            }
            return true;
        }
        false
    }
}

/// How long a rendered page's view waits for its tab's stream.
const CLAIM_WITHIN_MS: u64 = 5 * 60_000;
/// At most this many views wait at once (the oldest go first): a view
/// holds up to `MAX_PER_PAGE` keys, so pages fetched without a tab (a
/// script, a bench) cost at most some tens of MiB, whatever their number.
const MAX_WAITING: usize = 256;

/// Views rendered and not yet claimed by a stream.
#[derive(Debug, Default)]
pub struct Views {
    waiting: Mutex<HashMap<String, (u64, View)>>,
}

impl Views {
    /// Keeps `view` for its tab's stream; its id for the page.
    pub fn register(&self, view: View, now: u64) -> Option<String> {
        let id = xo_proto::secret::random_hex(12).ok()?;
        let mut w = self.waiting.lock().ok()?;
        w.retain(|_, (at, _)| now.saturating_sub(*at) < CLAIM_WITHIN_MS);
        while w.len() >= MAX_WAITING {
            let oldest = w
                .iter()
                .min_by_key(|(_, (at, _))| *at)
                .map(|(k, _)| k.clone());
            match oldest {
                Some(k) => w.remove(&k),
                None => break,
            };
        }
        w.insert(id.clone(), (now, view));
        Some(id)
    }

    /// The view a stream names, once.
    pub fn claim(&self, id: &str) -> Option<View> {
        self.waiting.lock().ok()?.remove(id).map(|(_, v)| v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cmp::Reverse;

    fn row(unit: &str, rank: u8, tsp: u32) -> RowOut {
        RowOut {
            unit: unit.into(),
            role: "coder".into(),
            rank,
            key: (
                true,
                rank,
                false,
                Reverse(0),
                Reverse(tsp),
                unit.to_string(),
            ),
            json: String::new(),
        }
    }

    fn page(rows: &[RowOut], per: usize, grows: bool) -> View {
        View {
            filters: Filters::default(),
            per,
            grows,
            shown: rows
                .iter()
                .map(|r| (r.unit.clone(), r.key.clone()))
                .collect(),
        }
    }

    #[test]
    fn a_page_takes_its_rows_and_the_ones_that_rank_into_it() {
        // Page 1 of 2 rows: a red and a green.
        let mut v = page(&[row("r1", 0, 5), row("g1", 3, 1)], 2, true);
        // A green row that would sort after the last: not this page's.
        assert!(!v.wants(&row("g9", 3, 0)));
        // One on the page: replaced.
        assert!(v.wants(&row("g1", 3, 2)));
        // An amber one ranks before the green last row: in, the green out.
        assert!(v.wants(&row("a1", 1, 1)));
        assert!(v.shown.contains_key("a1") && !v.shown.contains_key("g1"));
        // The green one that left is no longer this page's.
        assert!(!v.wants(&row("g1", 3, 3)));
        // A later page takes only its own rows.
        let mut later = page(&[row("g5", 3, 1)], 2, false);
        assert!(!later.wants(&row("r9", 0, 9)));
        assert!(later.wants(&row("g5", 3, 2)));
    }

    #[test]
    fn a_row_that_leaves_the_filters_is_sent_once_then_not() {
        let mut v = page(&[row("r1", 0, 5)], 10, true);
        v.filters.health = Some("red".into());
        // It turned green: the tab must drop it.
        assert!(v.wants(&row("r1", 3, 0)));
        assert!(!v.shown.contains_key("r1"));
        assert!(!v.wants(&row("r1", 3, 0)));
        // A red one matches and there is room.
        assert!(v.wants(&row("r2", 0, 1)));
    }

    #[test]
    fn a_view_is_claimed_once() {
        let views = Views::default();
        let id = views.register(page(&[], 1, true), 1_000).unwrap();
        assert_eq!(id.len(), 24);
        assert!(views.claim(&id).is_some());
        assert!(views.claim(&id).is_none());
        // One not claimed in time is gone at the next registration.
        let old = views.register(page(&[], 1, true), 1_000).unwrap();
        views.register(page(&[], 1, true), 1_000 + CLAIM_WITHIN_MS + 1);
        assert!(views.claim(&old).is_none());
    }
}
