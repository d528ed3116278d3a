//! The fleet's reconcile plan, pure: what to create, restart and remove so
//! the runners match the desired count per role, with an intensity limit
//! on restarts (N in T, then the role is marked failed).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

/// One runner container as the engine reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    pub id: String,
    pub unit: String,
    pub role: String,
    pub running: bool,
}

/// What to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Create {
        unit: String,
        role: String,
    },
    Restart {
        unit: String,
        id: String,
        reason: String,
    },
    Remove {
        unit: String,
        id: String,
        reason: String,
    },
    /// Past the restart intensity: the role is not restarted any more.
    RoleFailed {
        role: String,
        restarts: usize,
    },
}

/// `<role>-<n>`, n from 1: stable unit ids.
pub fn unit_name(role: &str, n: u32) -> String {
    format!("{role}-{n}")
}

#[derive(Debug, Clone)]
pub struct Planner {
    max_restarts: usize,
    window_ms: u64,
    /// A unit restarted this recently is not restarted again for being
    /// stale: it needs time to report (the supervisor's `stale_after`).
    stale_grace_ms: u64,
    last_restart: HashMap<String, u64>,
    restarts: HashMap<String, VecDeque<u64>>,
    failed: BTreeSet<String>,
}

impl Planner {
    pub fn new(max_restarts: usize, window_ms: u64) -> Self {
        Self {
            max_restarts,
            window_ms,
            stale_grace_ms: 0,
            last_restart: HashMap::new(),
            restarts: HashMap::new(),
            failed: BTreeSet::new(),
        }
    }

    /// Sets the grace after a restart before staleness counts again.
    pub fn with_stale_grace(mut self, ms: u64) -> Self {
        self.stale_grace_ms = ms;
        self
    }

    pub fn failed_roles(&self) -> &BTreeSet<String> {
        &self.failed
    }

    /// Clears a failed role (an operator's `scale` or `restart`).
    pub fn reset_role(&mut self, role: &str) {
        self.failed.remove(role);
        self.restarts
            .retain(|u, _| !u.starts_with(&format!("{role}-")));
    }

    /// Takes back the restart of `unit` just planned (it was not done: the
    /// unit was heard from before it could be): it counts against nothing.
    pub fn unplan_restart(&mut self, unit: &str) {
        self.last_restart.remove(unit);
        if let Some(q) = self.restarts.get_mut(unit) {
            q.pop_back();
        }
    }

    /// Records a restart of `unit` of `role`; false if that exceeds the intensity.
    fn allow_restart(&mut self, role: &str, unit: &str, now: u64) -> bool {
        let q = self.restarts.entry(unit.to_string()).or_default();
        while q
            .front()
            .is_some_and(|t| now.saturating_sub(*t) > self.window_ms)
        {
            q.pop_front();
        }
        if q.len() >= self.max_restarts {
            self.failed.insert(role.to_string());
            return false;
        }
        q.push_back(now);
        true
    }

    pub fn plan(
        &mut self,
        desired: &BTreeMap<String, u32>,
        observed: &[Observed],
        stale: &BTreeSet<String>,
        now: u64,
    ) -> Vec<Action> {
        let mut actions = Vec::new();
        let mut want: BTreeMap<String, String> = BTreeMap::new();
        for (role, n) in desired {
            for i in 1..=*n {
                want.insert(unit_name(role, i), role.clone());
            }
        }
        let mut seen: BTreeSet<&str> = BTreeSet::new();
        for o in observed {
            if !want.contains_key(&o.unit) || seen.contains(o.unit.as_str()) {
                actions.push(Action::Remove {
                    unit: o.unit.clone(),
                    id: o.id.clone(),
                    reason: if want.contains_key(&o.unit) {
                        "duplicate".into()
                    } else {
                        "not desired".into()
                    },
                });
                continue;
            }
            seen.insert(&o.unit);
            if self.failed.contains(&o.role) {
                continue;
            }
            let recently = self
                .last_restart
                .get(&o.unit)
                .is_some_and(|t| now.saturating_sub(*t) < self.stale_grace_ms);
            let why = if !o.running {
                Some("exited")
            } else if stale.contains(&o.unit) && !recently {
                Some("stale")
            } else {
                None
            };
            if let Some(why) = why {
                if self.allow_restart(&o.role, &o.unit, now) {
                    self.last_restart.insert(o.unit.clone(), now);
                    actions.push(Action::Restart {
                        unit: o.unit.clone(),
                        id: o.id.clone(),
                        reason: why.into(),
                    });
                } else {
                    let restarts = self.restarts.get(&o.unit).map_or(0, |q| q.len());
                    if !actions
                        .iter()
                        .any(|a| matches!(a, Action::RoleFailed { role, .. } if role == &o.role))
                    {
                        actions.push(Action::RoleFailed {
                            role: o.role.clone(),
                            restarts,
                        });
                    }
                }
            }
        }
        for (unit, role) in &want {
            if !seen.contains(unit.as_str()) && !self.failed.contains(role) {
                actions.push(Action::Create {
                    unit: unit.clone(),
                    role: role.clone(),
                });
            }
        }
        actions
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obs(unit: &str, running: bool) -> Observed {
        Observed {
            id: format!("id-{unit}"),
            unit: unit.into(),
            role: unit.rsplit_once('-').unwrap().0.into(),
            running,
        }
    }

    fn desired(pairs: &[(&str, u32)]) -> BTreeMap<String, u32> {
        pairs.iter().map(|(r, n)| (r.to_string(), *n)).collect()
    }

    #[test]
    fn creates_scales_and_removes_orphans() {
        let mut p = Planner::new(3, 10_000);
        let none = BTreeSet::new();
        let a = p.plan(&desired(&[("coder", 2)]), &[], &none, 0);
        assert_eq!(
            a,
            [
                Action::Create {
                    unit: "coder-1".into(),
                    role: "coder".into()
                },
                Action::Create {
                    unit: "coder-2".into(),
                    role: "coder".into()
                }
            ]
        );
        // Scale down and an orphan of a role no longer configured.
        let a = p.plan(
            &desired(&[("coder", 1)]),
            &[
                obs("coder-1", true),
                obs("coder-2", true),
                obs("old-1", true),
            ],
            &none,
            0,
        );
        assert_eq!(a.len(), 2);
        assert!(
            a.iter()
                .all(|x| matches!(x, Action::Remove { reason, .. } if reason == "not desired"))
        );
        assert!(
            p.plan(&desired(&[("coder", 1)]), &[obs("coder-1", true)], &none, 0)
                .is_empty()
        );
    }

    #[test]
    fn restarts_exited_and_stale_within_the_intensity() {
        let mut p = Planner::new(2, 10_000);
        let d = desired(&[("coder", 1)]);
        let stale: BTreeSet<String> = ["coder-1".to_string()].into();
        let a = p.plan(&d, &[obs("coder-1", true)], &stale, 0);
        assert!(matches!(&a[0], Action::Restart { reason, .. } if reason == "stale"));
        let a = p.plan(&d, &[obs("coder-1", false)], &BTreeSet::new(), 1_000);
        assert!(matches!(&a[0], Action::Restart { reason, .. } if reason == "exited"));
        // A third restart within 10 s: the role fails, once.
        let a = p.plan(&d, &[obs("coder-1", false)], &BTreeSet::new(), 2_000);
        assert_eq!(
            a,
            [Action::RoleFailed {
                role: "coder".into(),
                restarts: 2
            }]
        );
        assert!(
            p.plan(&d, &[obs("coder-1", false)], &BTreeSet::new(), 3_000)
                .is_empty()
        );
        assert!(p.failed_roles().contains("coder"));
        // Stale again right after a stale restart: it gets a grace to report.
        let mut g = Planner::new(5, 60_000).with_stale_grace(3_000);
        let stale1: BTreeSet<String> = ["coder-1".to_string()].into();
        assert_eq!(
            g.plan(&d, &[obs("coder-1", true)], &stale1, 10_000).len(),
            1
        );
        assert!(
            g.plan(&d, &[obs("coder-1", true)], &stale1, 11_000)
                .is_empty()
        );
        assert_eq!(
            g.plan(&d, &[obs("coder-1", true)], &stale1, 13_500).len(),
            1
        );
        // Outside the window, after an operator reset, it restarts again.
        p.reset_role("coder");
        let a = p.plan(&d, &[obs("coder-1", false)], &BTreeSet::new(), 30_000);
        assert!(matches!(&a[0], Action::Restart { .. }));
    }
}
