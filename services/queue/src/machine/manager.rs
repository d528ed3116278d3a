//! The Manager: its view of the queue, and its reply reconciled.

use super::*;
use serde_json::json;

impl Machine {
    /// The task list a Manager task reconciles, as its prompt shows it
    /// (under [`MANAGER_LIST_BUDGET`] characters), and the pending tasks it
    /// shows. Pending first (the Manager may change those), then what it may
    /// not change: blocked and failed (with their reasons), running,
    /// waiting for an answer; completed ones counted.
    pub fn manager_view(&self, manager: &str) -> (String, Vec<String>) {
        use std::fmt::Write;
        let cut = |s: &str, n: usize| -> String {
            let s = s.replace('\n', " ");
            if s.chars().count() > n {
                format!("{}…", s.chars().take(n).collect::<String>())
            } else {
                s
            }
        };
        let mut by_state: BTreeMap<u8, Vec<&TaskRecord>> = BTreeMap::new();
        for id in self.by_seq.values() {
            let Some(r) = self.tasks.get(id) else {
                continue;
            };
            if r.task.role == MANAGER_ROLE || r.task.task_id == manager {
                continue;
            }
            let rank = match r.state {
                TaskState::Pending => 0,
                TaskState::Blocked | TaskState::Failed => 1,
                TaskState::Running => 2,
                TaskState::AwaitingResponse => 3,
                TaskState::Completed => 4,
                TaskState::Cancelled => 5,
            };
            by_state.entry(rank).or_default().push(r);
        }
        let mut s = String::from(
            "## TASK LIST (reconcile it)\nOne line a task: id | state | role | lane | attempt/retries | intent | depends on | reason.\n",
        );
        let mut shown = Vec::new();
        let mut hidden = 0usize;
        for (rank, list) in &by_state {
            if *rank == 4 {
                let last: Vec<&str> = list
                    .iter()
                    .rev()
                    .take(10)
                    .map(|r| r.task.task_id.as_str())
                    .collect();
                let _ = writeln!(s, "completed: {} (latest: {})", list.len(), last.join(", "));
                continue;
            }
            if *rank == 5 {
                let _ = writeln!(s, "cancelled: {}", list.len());
                continue;
            }
            for r in list {
                let line = format!(
                    "- {} | {} | {} | {} | {}/{} | {} | {} | {}\n",
                    r.task.task_id,
                    r.state.as_str(),
                    r.task.role,
                    r.task.lane.as_str(),
                    r.attempt,
                    r.retries,
                    cut(&r.task.intent, 100),
                    if r.task.depends_on.is_empty() {
                        "-".to_string()
                    } else {
                        r.task.depends_on.join(",")
                    },
                    r.reason
                        .as_deref()
                        .or(r.question.as_deref())
                        .map_or("-".to_string(), |x| cut(x, 160)),
                );
                if s.len() + line.len() > MANAGER_LIST_BUDGET {
                    hidden += 1;
                    continue;
                }
                s.push_str(&line);
                if r.state == TaskState::Pending {
                    shown.push(r.task.task_id.clone());
                }
            }
        }
        if hidden > 0 {
            let _ = writeln!(
                s,
                "({hidden} more tasks not shown for length: they are kept as they are.)"
            );
        }
        s.push_str("\nYou may change only pending tasks. In your reply, `keep` lists the ids of pending tasks to keep as they are; `tasks` holds new tasks and changed pending tasks as whole task objects (task_id, intent, instructions, role). A pending task listed above that is in neither is cancelled. Running, waiting, blocked, failed and completed tasks stay as they are whatever you reply. `next_task`: the id to run next, or null when the goal is met.\n");
        (s, shown)
    }

    /// The task list built for the Manager task the last claim handed out.
    pub fn take_manager_list(&mut self) -> Option<String> {
        self.manager_list.take()
    }

    /// Applies a validated Manager reply: pending tasks absent from it are
    /// cancelled, new ones enqueued, changed ones replaced; `next_task` is
    /// served next; no `next_task` marks the goal complete.
    pub(super) fn reconcile(&mut self, manager: &str, reply: ManagerReply, now: u64) -> Changes {
        let mut c = Changes::default();
        let listed: BTreeSet<String> = reply
            .tasks
            .iter()
            .map(|t| t.task_id.clone())
            .chain(reply.keep.iter().cloned())
            .collect();
        // Only pending tasks the Manager was shown can be dropped by
        // leaving them out (a list cut to the prompt budget hides none).
        let shown: Option<BTreeSet<String>> = self
            .tasks
            .get(manager)
            .and_then(|r| r.shown.clone())
            .map(|v| v.into_iter().collect());
        let stale: Vec<String> = self
            .tasks
            .values()
            .filter(|t| {
                t.state == TaskState::Pending
                    && t.task.role != MANAGER_ROLE
                    && !listed.contains(&t.task.task_id)
                    && shown.as_ref().is_none_or(|s| s.contains(&t.task.task_id))
            })
            .map(|t| t.task.task_id.clone())
            .collect();
        for id in &stale {
            c.merge(self.task_change(EventName::TaskCancelled, id, None, |r| {
                r.state = TaskState::Cancelled;
                r.reason = Some(format!(
                    "dropped by the Manager's reconciliation ({manager})"
                ));
                r.updated_at = now;
            }));
        }
        let (mut added, mut updated) = (Vec::new(), Vec::new());
        for t in reply.tasks {
            match self.tasks.get(&t.task_id).map(|r| r.state) {
                None => {
                    added.push(t.task_id.clone());
                    c.merge(self.insert(t, now, false, None))
                }
                Some(TaskState::Pending) => {
                    let id = t.task_id.clone();
                    updated.push(id.clone());
                    c.merge(self.task_change(EventName::TaskUpdated, &id, None, |r| {
                        r.task = t;
                        r.updated_at = now;
                    }));
                }
                Some(_) => {}
            }
        }
        match reply.next_task {
            Some(next) => {
                if self
                    .tasks
                    .get(&next)
                    .is_some_and(|r| r.state == TaskState::Pending)
                {
                    self.mutate(&next, |r| r.priority = true);
                    c.tasks.insert(next);
                }
            }
            None => {
                self.status.goal.completed = true;
                c.status = true;
            }
        }
        c.audit.push(AuditDraft {
            event: EventName::ManagerReconciled,
            task_id: None,
            before: Default::default(),
            after: json!({"message": reply.message, "status": reply.status, "manager": manager,
                "cancelled": stale, "added": added, "updated": updated, "kept": reply.keep})
            .into(),
            report: None,
            exchange: None,
        });
        c
    }
}

/// Why a Manager's reply is not in seed 002's format: it changes nothing
/// and the Manager's task is run again with the same inputs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadManagerReply {
    #[error("no manager_reply")]
    Missing,
    /// Not the reply's shape (serde's words).
    #[error("{0}")]
    Shape(String),
    #[error("status {status:?} is not one of {}", REPLY_STATUSES.join(", "))]
    Status { status: String },
    #[error("message is empty")]
    EmptyMessage,
    /// A task the queue would refuse to enqueue (its words).
    #[error("{0}")]
    Task(String),
    #[error("task {0} listed twice")]
    Twice(String),
    #[error("keep names {0}, which is not in the queue")]
    KeepsUnknown(String),
}

/// Seed 002's format check of a Manager reply.
pub fn parse_manager_reply(
    v: Option<&serde_json::Value>,
    roles: &BTreeSet<String>,
    assign_role: impl Fn(&mut Task),
) -> Result<ManagerReply, BadManagerReply> {
    let v = v.ok_or(BadManagerReply::Missing)?;
    let mut reply: ManagerReply =
        serde_json::from_value(v.clone()).map_err(|e| BadManagerReply::Shape(e.to_string()))?;
    for t in &mut reply.tasks {
        assign_role(t);
    }
    if !REPLY_STATUSES.contains(&reply.status.as_str()) {
        return Err(BadManagerReply::Status {
            status: reply.status,
        });
    }
    if reply.message.trim().is_empty() {
        return Err(BadManagerReply::EmptyMessage);
    }
    let mut seen = BTreeSet::new();
    for t in &reply.tasks {
        validate_task(t, roles).map_err(|e| BadManagerReply::Task(e.message))?;
        if !seen.insert(&t.task_id) {
            return Err(BadManagerReply::Twice(t.task_id.clone()));
        }
    }
    Ok(reply)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each way a Manager's reply is out of format is its own case; the
    /// words are those the retry event records.
    #[test]
    fn a_bad_manager_reply_says_which_way() {
        let roles: BTreeSet<String> = ["coder".to_string()].into();
        let parse = |v: serde_json::Value| parse_manager_reply(Some(&v), &roles, |_| {});
        let task = json!({"task_id": "T-1", "intent": "i", "instructions": "x", "role": "coder",
            "acceptance_criteria": ["a.txt exists"]});
        assert!(parse(json!({"status": "ok", "message": "m", "tasks": [task]})).is_ok());
        assert_eq!(
            parse_manager_reply(None, &roles, |_| {}).unwrap_err(),
            BadManagerReply::Missing
        );
        assert!(matches!(
            parse(json!({"status": "ok"})).unwrap_err(),
            BadManagerReply::Shape(m) if m.contains("message")
        ));
        let status = parse(json!({"status": "done", "message": "m"})).unwrap_err();
        assert_eq!(
            status,
            BadManagerReply::Status {
                status: "done".into()
            }
        );
        assert_eq!(
            status.to_string(),
            "status \"done\" is not one of ok, blocked, error, escalate"
        );
        assert_eq!(
            parse(json!({"status": "ok", "message": " "})).unwrap_err(),
            BadManagerReply::EmptyMessage
        );
        assert_eq!(
            parse(json!({"status": "ok", "message": "m", "tasks": [task, task]})).unwrap_err(),
            BadManagerReply::Twice("T-1".into())
        );
        let mut nameless = task.clone();
        nameless["intent"] = json!("");
        assert!(matches!(
            parse(json!({"status": "ok", "message": "m", "tasks": [nameless]})).unwrap_err(),
            BadManagerReply::Task(m) if m.contains("intent is empty")
        ));
    }
}
