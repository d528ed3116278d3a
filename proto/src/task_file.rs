//! A task file as `xo enqueue` reads it, a client model: one task object or
//! an array, and the order a batch is sent in. Pure: bytes in, tasks out.

use std::collections::BTreeMap;

use crate::queue::Task;

/// Why a task file is refused: nothing of it is enqueued.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TaskFileError {
    #[error("not JSON: {0}")]
    NotJson(String),
    #[error("expected a task object or an array of tasks")]
    NotTasks,
    /// One task does not read as a task: `task` names it (`task #2 (T-2)`),
    /// `field` the path to what is wrong, if it is a field.
    #[error("{task}: {}{reason}", field.as_ref().map(|f| format!("field {f}: ")).unwrap_or_default())]
    Task {
        task: String,
        field: Option<String>,
        reason: String,
    },
    /// Tasks that depend on each other in a circle, its first named again
    /// at its end.
    #[error(
        "dependency cycle: {} (no task of it could ever start); remove one of these depends_on entries",
        .0.join(" -> ")
    )]
    Cycle(Vec<String>),
}

/// Reads a task file: one task object or an array. Errors name the task
/// (position and id) and the field.
pub fn tasks_from_json(bytes: &[u8]) -> Result<Vec<Task>, TaskFileError> {
    let v: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| TaskFileError::NotJson(e.to_string()))?;
    let items = match v {
        serde_json::Value::Array(items) => items,
        obj @ serde_json::Value::Object(_) => vec![obj],
        _ => return Err(TaskFileError::NotTasks),
    };
    let mut tasks = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let name = match item.get("task_id").and_then(|t| t.as_str()) {
            Some(id) => format!("task #{} ({id})", i + 1),
            None => format!("task #{}", i + 1),
        };
        let task: Task = serde_path_to_error::deserialize(item).map_err(|e| {
            let path = e.path().to_string();
            TaskFileError::Task {
                task: name,
                field: (path != "." && !path.is_empty()).then_some(path),
                reason: e.inner().to_string(),
            }
        })?;
        tasks.push(task);
    }
    Ok(tasks)
}

/// Orders a batch so every task comes after the tasks of the batch it
/// depends on (otherwise in file order): a batch sent in parts then never
/// names a task a later part brings. A cycle is an error naming it.
pub fn dependency_order(tasks: Vec<Task>) -> Result<Vec<Task>, TaskFileError> {
    let pos: BTreeMap<String, usize> = tasks
        .iter()
        .enumerate()
        .map(|(i, t)| (t.task_id.clone(), i))
        .collect();
    let mut state = vec![0u8; tasks.len()];
    let mut order = Vec::with_capacity(tasks.len());
    for start in 0..tasks.len() {
        if state[start] != 0 {
            continue;
        }
        let deps_of = |i: usize| -> Vec<usize> {
            tasks[i]
                .depends_on
                .iter()
                .rev()
                .filter_map(|d| pos.get(d).copied())
                .collect()
        };
        let mut path: Vec<(usize, Vec<usize>)> = vec![(start, deps_of(start))];
        state[start] = 1;
        while let Some((node, rest)) = path.last_mut() {
            let node = *node;
            match rest.pop() {
                None => {
                    state[node] = 2;
                    order.push(node);
                    path.pop();
                }
                Some(next) => match state[next] {
                    1 => {
                        let from = path.iter().position(|(n, _)| *n == next).unwrap_or(0);
                        let mut cycle: Vec<String> = path[from..]
                            .iter()
                            .map(|(n, _)| tasks[*n].task_id.clone())
                            .collect();
                        cycle.push(tasks[next].task_id.clone());
                        return Err(TaskFileError::Cycle(cycle));
                    }
                    2 => {}
                    _ => {
                        state[next] = 1;
                        let d = deps_of(next);
                        path.push((next, d));
                    }
                },
            }
        }
    }
    let mut slots: Vec<Option<Task>> = tasks.into_iter().map(Some).collect();
    Ok(order.into_iter().filter_map(|i| slots[i].take()).collect())
}
