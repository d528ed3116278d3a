//! Stuck work: pending tasks no runner can claim, and why.

use super::*;

impl Machine {
    /// Pending work no runner can claim: nothing is running and no pending
    /// task both has its dependencies done and a role whose runners asked
    /// for work within `stale_after_ms`. Raises `QUEUE_STUCK` (status,
    /// audit, alert) with the reasons; clears it once work can go on.
    /// Runners have `stale_after_ms` from `heard_from` at the earliest to
    /// ask: the queue's own return to the bus after an outage (0: never
    /// lost), when their claims could arrive again.
    pub fn check_stuck(&mut self, now: u64, heard_from: u64) -> Changes {
        let why = if self.status.status == RunStatus::Running {
            let since = (*self.running_since.get_or_insert(now)).max(heard_from);
            self.stuck_reason(now, since)
        } else {
            self.running_since = None;
            None
        };
        if why == self.status.stuck {
            return Changes::default();
        }
        match why {
            Some(reason) => {
                let mut c = self.status_change(EventName::QueueStuck, |s| {
                    s.stuck = Some(reason.clone());
                });
                c.alert(
                    AlertKind::QueueStuck,
                    None,
                    "the queue is stuck: pending work no runner can claim".into(),
                    format!("{reason}. Cancel or retry the tasks named, or start a runner of the role named (`xo serve runner --role ROLE`)."),
                );
                c
            }
            None => self.status_change(EventName::QueueUnstuck, |s| s.stuck = None),
        }
    }

    pub(super) fn stuck_reason(&self, now: u64, running_since: u64) -> Option<String> {
        // Work in flight can unblock the rest: nothing to look at (checked
        // before the pending tasks are gathered; this runs every second).
        if !self.running.is_empty() {
            return None;
        }
        let pending: Vec<&TaskRecord> = self
            .ready
            .values()
            .flatten()
            .filter_map(|k| self.tasks.get(&k.3))
            .collect();
        if pending.is_empty() {
            return None;
        }
        let grace = now.saturating_sub(running_since) < self.policy.stale_after_ms;
        let live = |role: &str| {
            grace
                || self
                    .role_seen
                    .get(role)
                    .is_some_and(|t| now.saturating_sub(*t) < self.policy.stale_after_ms)
        };
        let mut reasons: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for t in &pending {
            // Waits for a Manager's reply; the Manager task is judged itself.
            if self.held.contains_key(&t.task.task_id) {
                continue;
            }
            let mut waits = None;
            for d in &t.task.depends_on {
                match self.tasks.get(d).map(|r| r.state) {
                    Some(TaskState::Completed) => {}
                    // Waits on work that may still happen.
                    Some(TaskState::Pending) => waits = waits.or(Some(None)),
                    Some(st) => {
                        waits = Some(Some(format!("waits on {d} ({})", st.as_str())));
                        break;
                    }
                    None => {
                        waits = Some(Some(format!("waits on {d} (not in the queue)")));
                        break;
                    }
                }
            }
            match waits {
                Some(Some(why)) => reasons.entry(why).or_default().push(t.task.task_id.clone()),
                Some(None) => {}
                None if live(&t.task.role) => return None,
                None => reasons
                    .entry(format!(
                        "no runner of role {:?} asked for work in {} s",
                        t.task.role,
                        self.policy.stale_after_ms / 1000
                    ))
                    .or_default()
                    .push(t.task.task_id.clone()),
            }
        }
        if reasons.is_empty() {
            // Only chains of pending tasks: each waits on another pending
            // task that waits in turn; the roots are named above, so this
            // is a cycle that came in through a Manager's reply.
            return Some(format!(
                "{QUEUE_STUCK}: {} pending tasks wait on each other",
                pending.len()
            ));
        }
        let parts: Vec<String> = reasons
            .into_iter()
            .map(|(why, ids)| {
                let shown: Vec<&str> = ids.iter().take(5).map(String::as_str).collect();
                let more = ids.len().saturating_sub(5);
                if more > 0 {
                    format!("{} and {more} more {why}", shown.join(", "))
                } else {
                    format!("{} {why}", shown.join(", "))
                }
            })
            .collect();
        Some(format!("{QUEUE_STUCK}: {}", parts.join("; ")))
    }
}
