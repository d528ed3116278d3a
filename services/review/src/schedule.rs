//! When reviewers run (seed 001): a counter per reviewer, urgency that pulls
//! runs forward, reviewers before the assessor, and convergence (a reviewer
//! whose findings barely change runs half as often). Pure: no I/O.

use std::collections::{BTreeMap, BTreeSet};

use xo_proto::knowledge::Author;
use xo_runtime::config::ReviewConfig;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reviewer {
    CodeStyle,
    Design,
    Internaliser,
    /// Alignment of done work with the goal; runs after the others.
    Assessor,
}

impl Reviewer {
    pub const ALL: [Reviewer; 4] = [
        Self::CodeStyle,
        Self::Design,
        Self::Internaliser,
        Self::Assessor,
    ];

    pub fn name(self) -> &'static str {
        self.author().as_str()
    }

    pub fn author(self) -> Author {
        match self {
            Self::CodeStyle => Author::CodeStyle,
            Self::Design => Author::Design,
            Self::Internaliser => Author::Internaliser,
            Self::Assessor => Author::Assessor,
        }
    }

    pub(crate) fn idx(self) -> usize {
        self as usize
    }
}

/// What the schedule hears.
#[derive(Debug, Clone, PartialEq)]
pub enum Signal {
    /// A task completed; `milestone_done` when it was the last of its milestone.
    Completed {
        milestone_done: Option<String>,
        manager: bool,
    },
    /// QA (validation) failed: urgency + 0.3.
    ValidationFailure,
    /// A task was aborted (blocked): urgency + 1.0, and the design reviewer runs.
    Abort,
    /// The plan churned (tasks cancelled or replaced): urgency + 0.2.
    Churn,
    /// The assessor found minor drift: urgency + 0.5.
    MinorDrift,
}

/// Seed 001's triggers: counters per reviewer, urgency that pulls runs
/// forward, reviewers before the assessor. Serialisable: the reviewers
/// keep it across restarts.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Schedule {
    completed: u64,
    since: [u32; 4],
    /// 0: event-triggered only (design).
    every: [u32; 4],
    urgency: f64,
}

impl Schedule {
    pub fn new(cfg: &ReviewConfig) -> Self {
        Self {
            completed: 0,
            since: [0; 4],
            every: [
                cfg.code_style_every,
                0,
                cfg.internaliser_every,
                cfg.assessor_every,
            ],
            urgency: 0.0,
        }
    }

    pub fn completed(&self) -> u64 {
        self.completed
    }
    pub fn urgency(&self) -> f64 {
        self.urgency
    }
    pub fn interval(&self, r: Reviewer) -> u32 {
        self.every[r.idx()]
    }

    /// A reviewer whose findings barely changed: its interval doubles.
    pub fn converging(&mut self, r: Reviewer) {
        let e = &mut self.every[r.idx()];
        *e = e.saturating_mul(2);
    }

    /// Takes a signal; returns the reviewers due now, each with why, in
    /// the order they run (the assessor last, so it reads their run log).
    pub fn signal(&mut self, s: Signal) -> Vec<(Reviewer, &'static str)> {
        let mut due: BTreeMap<Reviewer, &'static str> = BTreeMap::new();
        match s {
            Signal::Completed {
                milestone_done,
                manager,
            } => {
                self.completed += 1;
                for r in Reviewer::ALL {
                    let i = r.idx();
                    if self.every[i] == 0 {
                        continue;
                    }
                    self.since[i] += 1;
                    if self.since[i] >= self.every[i] {
                        due.entry(r).or_insert("interval");
                    }
                }
                if milestone_done.is_some() {
                    for r in Reviewer::ALL {
                        due.entry(r).or_insert("milestone");
                    }
                }
                if manager {
                    due.entry(Reviewer::Design).or_insert("replan");
                }
            }
            Signal::ValidationFailure => self.urgency += 0.3,
            Signal::Abort => {
                self.urgency += 1.0;
                due.entry(Reviewer::Design).or_insert("abort");
            }
            Signal::Churn => self.urgency += 0.2,
            Signal::MinorDrift => self.urgency += 0.5,
        }
        // Float sums of 0.3 steps: compare with a little slack.
        if self.urgency >= 1.0 - 1e-9 {
            for r in [
                Reviewer::CodeStyle,
                Reviewer::Design,
                Reviewer::Internaliser,
            ] {
                due.entry(r).or_insert("urgency");
            }
            self.urgency = 0.0;
        }
        for r in due.keys() {
            self.since[r.idx()] = 0;
        }
        due.into_iter().collect()
    }
}
/// Jaccard similarity of two finding sets (1.0 when both are empty).
pub fn similarity(a: &BTreeSet<String>, b: &BTreeSet<String>) -> f64 {
    let union = a.union(b).count();
    if union == 0 {
        return 1.0;
    }
    a.intersection(b).count() as f64 / union as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sched() -> Schedule {
        Schedule::new(&ReviewConfig::default())
    }

    fn done(s: &mut Schedule) -> Vec<(Reviewer, &'static str)> {
        s.signal(Signal::Completed {
            milestone_done: None,
            manager: false,
        })
    }

    #[test]
    fn counters_per_reviewer() {
        let mut s = sched();
        let mut runs: Vec<(u64, Reviewer)> = Vec::new();
        for _ in 0..15 {
            for (r, why) in done(&mut s) {
                assert_eq!(why, "interval");
                runs.push((s.completed(), r));
            }
        }
        let at = |r: Reviewer| {
            runs.iter()
                .filter(|(_, x)| *x == r)
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
        };
        assert_eq!(at(Reviewer::CodeStyle), [5, 10, 15]);
        assert_eq!(at(Reviewer::Internaliser), [3, 6, 9, 12, 15]);
        assert_eq!(at(Reviewer::Assessor), [10]);
        assert!(at(Reviewer::Design).is_empty(), "design is event-triggered");
        // At 15 the reviewers run before the assessor would.
        let mut s = sched();
        for _ in 0..9 {
            done(&mut s);
        }
        let due = done(&mut s);
        assert_eq!(due.last().map(|d| d.0), Some(Reviewer::Assessor));
    }

    #[test]
    fn milestone_replan_abort() {
        let mut s = sched();
        let due = s.signal(Signal::Completed {
            milestone_done: Some("m1".into()),
            manager: false,
        });
        assert_eq!(due.iter().map(|d| d.0).collect::<Vec<_>>(), Reviewer::ALL);
        assert!(due.iter().all(|d| d.1 == "milestone"));
        let due = s.signal(Signal::Completed {
            milestone_done: None,
            manager: true,
        });
        assert_eq!(due, [(Reviewer::Design, "replan")]);
        let due = s.signal(Signal::Abort);
        // An abort is +1.0: the design reviewer for the abort, the others by urgency.
        assert_eq!(
            due,
            [
                (Reviewer::CodeStyle, "urgency"),
                (Reviewer::Design, "abort"),
                (Reviewer::Internaliser, "urgency")
            ]
        );
        assert_eq!(s.urgency(), 0.0, "urgency resets after running");
    }

    #[test]
    fn urgency_accumulates() {
        let mut s = sched();
        assert!(s.signal(Signal::ValidationFailure).is_empty());
        assert!(s.signal(Signal::ValidationFailure).is_empty());
        assert!(s.signal(Signal::Churn).is_empty());
        assert!((s.urgency() - 0.8).abs() < 1e-9);
        let due = s.signal(Signal::Churn);
        assert_eq!(due.len(), 3, "0.3 + 0.3 + 0.2 + 0.2 reaches 1.0");
        assert!(s.signal(Signal::MinorDrift).is_empty());
        assert_eq!(s.signal(Signal::MinorDrift).len(), 3);
        // A run by urgency restarts the counters.
        let mut s = sched();
        for _ in 0..4 {
            done(&mut s);
        }
        s.signal(Signal::Abort);
        assert!(done(&mut s).iter().all(|d| d.0 != Reviewer::CodeStyle));
    }

    #[test]
    fn convergence_doubles_the_interval() {
        let mut s = sched();
        s.converging(Reviewer::CodeStyle);
        assert_eq!(s.interval(Reviewer::CodeStyle), 10);
        let runs: usize = (0..20)
            .map(|_| {
                done(&mut s)
                    .iter()
                    .filter(|d| d.0 == Reviewer::CodeStyle)
                    .count()
            })
            .sum();
        assert_eq!(runs, 2);
        let a: BTreeSet<String> = ["a", "b", "c", "d", "e"].map(String::from).into();
        let b: BTreeSet<String> = ["a", "b", "c", "d", "f"].map(String::from).into();
        assert!((similarity(&a, &b) - 4.0 / 6.0).abs() < 1e-9);
        assert_eq!(similarity(&BTreeSet::new(), &BTreeSet::new()), 1.0);
    }
}
