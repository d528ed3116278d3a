//! The API's queue routes: its status and verbs, the tasks and their
//! actions, the audit.

use super::*;

pub(super) async fn status(State(c): State<Shared>) -> ApiResult<xo_proto::queue::QueueStatus> {
    call(&c, GetStatus {}).await
}

pub(super) async fn init(
    State(c): State<Shared>,
    JsonBody(mut b): JsonBody<Init>,
) -> ApiResult<xo_proto::queue::QueueStatus> {
    b.by = by(Some(&b.by));
    call(&c, b).await
}

pub(super) async fn goal(
    State(c): State<Shared>,
    JsonBody(mut b): JsonBody<SetGoal>,
) -> ApiResult<xo_proto::queue::QueueStatus> {
    b.by = by(Some(&b.by));
    call(&c, b).await
}

#[derive(Debug, Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct HaltBody {
    #[serde(default)]
    pub(super) reason: Option<String>,
}

pub(super) async fn queue_verb(
    State(c): State<Shared>,
    Path(QueueVerbPath { verb }): Path<QueueVerbPath>,
    NoApi(b): NoApi<Bytes>,
) -> ApiResult<xo_proto::queue::QueueStatus> {
    match verb.as_str() {
        "start" => call(&c, Start { by: by(None) }).await,
        "step" => call(&c, Step {}).await,
        "resume" => call(&c, Resume { by: by(None) }).await,
        "halt" => {
            let h: HaltBody = body(&b)?;
            call(
                &c,
                Halt {
                    reason: h.reason.unwrap_or_else(|| "halted from the console".into()),
                    by: by(None),
                },
            )
            .await
        }
        other => Err(ApiError::not_found(format!(
            "no queue action {other:?}; use start, step, halt, resume, init or goal"
        ))),
    }
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct TasksQuery {
    /// Only tasks in this state: pending, running, completed, blocked,
    /// awaiting_response or cancelled.
    #[serde(default)]
    state: Option<String>,
    /// Paging: tasks enqueued after this sequence number.
    #[serde(default)]
    after_seq: u64,
    /// Page size (default and most: the queue's page).
    #[serde(default)]
    limit: usize,
}

pub(super) fn parse_state(s: &str) -> Result<TaskState, ApiError> {
    serde_json::from_value(serde_json::Value::String(s.to_string())).map_err(|_| {
        ApiError::invalid(format!(
            "state {s:?}: use pending, running, completed, blocked, awaiting_response or cancelled"
        ))
    })
}

pub(super) async fn tasks(
    State(c): State<Shared>,
    Query(q): Query<TasksQuery>,
) -> ApiResult<Vec<TaskRecord>> {
    let state = q.state.as_deref().map(parse_state).transpose()?;
    call(
        &c,
        ListTasks {
            state,
            after_seq: q.after_seq,
            limit: q.limit,
            task_id: None,
        },
    )
    .await
}

/// Every task in `state` (all: `None`), page by page.
pub async fn all_tasks(
    c: &Shared,
    state: Option<TaskState>,
) -> Result<Vec<TaskRecord>, xo_proto::control::ServiceError> {
    c.client
        .all_tasks(state)
        .await
        .map_err(crate::call_error::<ListTasks>)
}

/// One task.
pub async fn find_task(c: &Shared, task_id: &str) -> Result<TaskRecord, ApiError> {
    let req = ListTasks {
        task_id: Some(task_id.to_string()),
        ..ListTasks::of(None)
    };
    c.call(&req)
        .await?
        .into_iter()
        .next()
        .ok_or_else(|| ApiError::not_found(format!("no task {task_id:?} in the queue")))
}

pub(super) async fn task(
    State(c): State<Shared>,
    Path(TaskPath { id: task_id }): Path<TaskPath>,
) -> ApiResult<TaskRecord> {
    id("task_id", &task_id)?;
    Ok(Json(find_task(&c, &task_id).await?))
}

pub(super) async fn task_diff(
    State(c): State<Shared>,
    Path(TaskPath { id: task_id }): Path<TaskPath>,
) -> ApiResult<xo_proto::queue::TaskDiff> {
    id("task_id", &task_id)?;
    let t = find_task(&c, &task_id).await?;
    match t.diff {
        Some(d) => Ok(Json(d)),
        None => Err(ApiError::not_found(format!(
            "task {task_id} has no diff: it has not completed ({}), or it ran in its project directory (runner.isolation = \"directory\")",
            t.state.as_str()
        ))),
    }
}

pub(super) async fn enqueue(
    State(c): State<Shared>,
    JsonBody(mut e): JsonBody<Enqueue>,
) -> ApiResult<Vec<String>> {
    // The body's `by` names the client; who it is comes from the token.
    e.by = by(Some(&e.by));
    if e.tasks.is_empty() {
        return Err(ApiError::invalid(
            "body field `tasks`: empty; give at least one task",
        ));
    }
    call(&c, e).await
}

#[derive(Deserialize, Default, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct AnswerBody {
    /// The answer (for `answer`).
    #[serde(default)]
    text: Option<String>,
}

pub(super) async fn task_verb(
    State(c): State<Shared>,
    Path(TaskVerbPath { id: task_id, verb }): Path<TaskVerbPath>,
    NoApi(b): NoApi<Bytes>,
) -> ApiResult<TaskRecord> {
    id("task_id", &task_id)?;
    match verb.as_str() {
        "answer" => {
            let a: AnswerBody = body(&b)?;
            let text = a.text.unwrap_or_default();
            if text.trim().is_empty() {
                return Err(ApiError::invalid(
                    "body field `text`: empty; give the answer",
                ));
            }
            call(
                &c,
                Answer {
                    task_id,
                    text,
                    by: by(None),
                },
            )
            .await
        }
        "retry" => {
            call(
                &c,
                RetryTask {
                    task_id,
                    by: by(None),
                },
            )
            .await
        }
        "cancel" => {
            call(
                &c,
                Cancel {
                    task_id,
                    by: by(None),
                },
            )
            .await
        }
        other => Err(ApiError::not_found(format!(
            "no task action {other:?}; use answer, retry or cancel"
        ))),
    }
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct AuditQuery {
    #[serde(default)]
    project: Option<String>,
    #[serde(default)]
    lines: Option<usize>,
}

pub(super) async fn audit_tail(
    State(c): State<Shared>,
    Query(q): Query<AuditQuery>,
) -> ApiResult<Vec<xo_proto::queue::AuditEvent>> {
    if let Some(p) = &q.project {
        id("project", p)?;
    }
    call(
        &c,
        AuditTail {
            project: q.project,
            lines: q.lines,
        },
    )
    .await
}

pub(super) async fn audit_verify(
    State(c): State<Shared>,
    Query(ProjectQuery { project }): Query<ProjectQuery>,
) -> ApiResult<xo_proto::queue::AuditCheck> {
    if let Some(p) = &project {
        id("project", p)?;
    }
    call(&c, AuditVerify { project }).await
}

/// How a write is signed: the token's operator, and the client a body
/// names (`NAME (api: CLIENT)`); a body cannot name someone else.
fn by(client: Option<&str>) -> String {
    crate::auth::who().by(client)
}
