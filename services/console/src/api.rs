//! `/api/v1/...`: one route per control request, with the bus's own types
//! as JSON. Errors are `{code, message}` with the HTTP status of the code
//! (`invalid` 400, `not_found` 404, `unavailable` 503, `timeout` 504,
//! `internal` 500; `unauthorized` 401, `forbidden`/`csrf`/`read_only` 403).
//! A body that does not decode is refused naming the field.

use std::collections::BTreeMap;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use xo_proto::Request;
use xo_proto::control::{ErrorCode, ServiceError, ShowUnit, SteerUnit, SupervisorStats};
use xo_proto::fleet::{FleetLs, FleetRestart, FleetScale};
use xo_proto::knowledge::{Author, DeprecateDoc, GetDoc, ListDocs, ListReviewRuns, ReviewDoc};
use xo_proto::queue::{
    Answer, AuditTail, AuditVerify, Cancel, Enqueue, GetStatus, Halt, Init, ListTasks, Resume,
    RetryTask, SetGoal, Start, Step, TaskRecord, TaskState,
};
use xo_proto::settings::{GetSettings, PutSettings};
use xo_proto::{Severity, validate_token};

use crate::{Shared, events};

/// An API error: a service's error or a refusal of the request itself.
#[derive(Debug)]
pub struct ApiError(pub StatusCode, pub String, pub String);

impl ApiError {
    pub fn invalid(message: impl Into<String>) -> Self {
        Self(StatusCode::BAD_REQUEST, "invalid".into(), message.into())
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Self(StatusCode::NOT_FOUND, "not_found".into(), message.into())
    }
}

/// The HTTP status of a service error code.
pub fn status_of(code: ErrorCode) -> StatusCode {
    match code {
        ErrorCode::Invalid => StatusCode::BAD_REQUEST,
        ErrorCode::NotFound => StatusCode::NOT_FOUND,
        ErrorCode::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorCode::Timeout => StatusCode::GATEWAY_TIMEOUT,
        ErrorCode::Internal => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

impl From<ServiceError> for ApiError {
    fn from(e: ServiceError) -> Self {
        let code = serde_json::to_value(e.code)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_else(|| "internal".into());
        Self(status_of(e.code), code, e.message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.0,
            Json(serde_json::json!({"code": self.1, "message": self.2})),
        )
            .into_response()
    }
}

type ApiResult<T> = Result<Json<T>, ApiError>;

/// Decodes a JSON body; an empty body is `{}`. Errors name the field.
pub fn body<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let bytes: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        bytes
    };
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." || path.is_empty() {
            ApiError::invalid(format!("body: {inner}"))
        } else {
            ApiError::invalid(format!("body field `{path}`: {inner}"))
        }
    })
}

async fn call<R: Request>(c: &Shared, req: R) -> ApiResult<R::Response> {
    Ok(Json(c.call(&req).await?))
}

fn id(what: &str, v: &str) -> Result<(), ApiError> {
    validate_token(what, v).map_err(ApiError::invalid)
}

pub fn routes() -> Router<Shared> {
    Router::new()
        .route("/units", get(units))
        .route("/units/{unit}", get(unit))
        .route("/units/{unit}/steer", post(steer))
        .route("/stats", get(stats))
        .route("/queue", get(status))
        .route("/queue/init", post(init))
        .route("/queue/goal", post(goal))
        .route("/queue/{verb}", post(queue_verb))
        .route("/tasks", get(tasks).post(enqueue))
        .route("/tasks/{id}", get(task))
        .route("/tasks/{id}/{verb}", post(task_verb))
        .route("/audit", get(audit_tail))
        .route("/audit/verify", get(audit_verify))
        .route("/knowledge", get(knowledge))
        .route("/knowledge/{category}/{name}", get(doc))
        .route("/knowledge/{category}/{name}/deprecate", post(deprecate))
        .route("/knowledge/{category}/{name}/review", post(review_doc))
        .route("/directives", get(directives))
        .route("/reviews", get(reviews))
        .route("/fleet", get(fleet))
        .route("/fleet/{role}/scale", post(scale))
        .route("/fleet/units/{unit}/restart", post(restart))
        .route("/settings", get(settings).put(put_settings))
        .route("/events", get(events::sse))
        .fallback(|| async { ApiError::not_found("no such API route; see docs/console.md") })
}

async fn units(State(c): State<Shared>) -> Result<Response, ApiError> {
    let json = c.units_json().await?;
    Ok((
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        json,
    )
        .into_response())
}

async fn unit(
    State(c): State<Shared>,
    Path(unit): Path<String>,
) -> ApiResult<xo_proto::control::UnitDetail> {
    id("unit", &unit)?;
    call(&c, ShowUnit { unit }).await
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SteerBody {
    message: String,
    #[serde(default)]
    severity: Option<Severity>,
}

async fn steer(
    State(c): State<Shared>,
    Path(unit): Path<String>,
    b: Bytes,
) -> ApiResult<xo_proto::Steering> {
    id("unit", &unit)?;
    let b: SteerBody = body(&b)?;
    if b.message.trim().is_empty() {
        return Err(ApiError::invalid(
            "body field `message`: empty; say what the unit should do",
        ));
    }
    call(
        &c,
        SteerUnit {
            unit,
            message: b.message,
            severity: b.severity.unwrap_or(Severity::Warning),
        },
    )
    .await
}

async fn stats(State(c): State<Shared>) -> ApiResult<xo_proto::control::StatsReply> {
    call(&c, SupervisorStats {}).await
}

async fn status(State(c): State<Shared>) -> ApiResult<xo_proto::queue::QueueStatus> {
    call(&c, GetStatus {}).await
}

async fn init(State(c): State<Shared>, b: Bytes) -> ApiResult<xo_proto::queue::QueueStatus> {
    call(&c, body::<Init>(&b)?).await
}

async fn goal(State(c): State<Shared>, b: Bytes) -> ApiResult<xo_proto::queue::QueueStatus> {
    call(&c, body::<SetGoal>(&b)?).await
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct HaltBody {
    #[serde(default)]
    reason: Option<String>,
}

async fn queue_verb(
    State(c): State<Shared>,
    Path(verb): Path<String>,
    b: Bytes,
) -> ApiResult<xo_proto::queue::QueueStatus> {
    match verb.as_str() {
        "start" => call(&c, Start {}).await,
        "step" => call(&c, Step {}).await,
        "resume" => call(&c, Resume {}).await,
        "halt" => {
            let h: HaltBody = body(&b)?;
            call(
                &c,
                Halt {
                    reason: h.reason.unwrap_or_else(|| "halted from the console".into()),
                },
            )
            .await
        }
        other => Err(ApiError::not_found(format!(
            "no queue action {other:?}; use start, step, halt, resume, init or goal"
        ))),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TasksQuery {
    #[serde(default)]
    state: Option<String>,
    /// Paging: tasks enqueued after this sequence number.
    #[serde(default)]
    after_seq: u64,
    /// Page size (default and most: the queue's page).
    #[serde(default)]
    limit: usize,
}

fn parse_state(s: &str) -> Result<TaskState, ApiError> {
    serde_json::from_value(serde_json::Value::String(s.to_string())).map_err(|_| {
        ApiError::invalid(format!(
            "state {s:?}: use pending, running, completed, blocked, awaiting_response or cancelled"
        ))
    })
}

async fn tasks(State(c): State<Shared>, Query(q): Query<TasksQuery>) -> ApiResult<Vec<TaskRecord>> {
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
    xo_bus::typed::all_tasks(&c.bus, &c.subjects, state, crate::CALL_TIMEOUT)
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

async fn task(State(c): State<Shared>, Path(task_id): Path<String>) -> ApiResult<TaskRecord> {
    id("task_id", &task_id)?;
    Ok(Json(find_task(&c, &task_id).await?))
}

async fn enqueue(State(c): State<Shared>, b: Bytes) -> ApiResult<Vec<String>> {
    let e: Enqueue = body(&b)?;
    if e.tasks.is_empty() {
        return Err(ApiError::invalid(
            "body field `tasks`: empty; give at least one task",
        ));
    }
    call(&c, e).await
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct AnswerBody {
    #[serde(default)]
    text: Option<String>,
}

async fn task_verb(
    State(c): State<Shared>,
    Path((task_id, verb)): Path<(String, String)>,
    b: Bytes,
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
            call(&c, Answer { task_id, text }).await
        }
        "retry" => call(&c, RetryTask { task_id }).await,
        "cancel" => call(&c, Cancel { task_id }).await,
        other => Err(ApiError::not_found(format!(
            "no task action {other:?}; use answer, retry or cancel"
        ))),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AuditQuery {
    #[serde(default)]
    project: Option<String>,
    #[serde(default)]
    lines: Option<usize>,
}

async fn audit_tail(
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

async fn audit_verify(
    State(c): State<Shared>,
    Query(q): Query<BTreeMap<String, String>>,
) -> ApiResult<xo_proto::queue::AuditCheck> {
    let project = q.get("project").cloned();
    if let Some(p) = &project {
        id("project", p)?;
    }
    call(&c, AuditVerify { project }).await
}

async fn knowledge(
    State(c): State<Shared>,
    Query(q): Query<BTreeMap<String, String>>,
) -> ApiResult<xo_proto::knowledge::DocList> {
    let category = match q.get("category") {
        None => None,
        Some(s) => Some(
            serde_json::from_value(serde_json::Value::String(s.clone()))
                .map_err(|e| ApiError::invalid(format!("category {s:?}: {e}")))?,
        ),
    };
    call(&c, ListDocs { category }).await
}

async fn doc(
    State(c): State<Shared>,
    Path((category, name)): Path<(String, String)>,
) -> ApiResult<xo_proto::knowledge::KnowledgeDoc> {
    call(
        &c,
        GetDoc {
            id: format!("{category}/{name}"),
        },
    )
    .await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DeprecateBody {
    reason: String,
}

async fn deprecate(
    State(c): State<Shared>,
    Path((category, name)): Path<(String, String)>,
    b: Bytes,
) -> ApiResult<xo_proto::knowledge::KnowledgeDoc> {
    let d: DeprecateBody = body(&b)?;
    if d.reason.trim().is_empty() {
        return Err(ApiError::invalid("body field `reason`: empty; say why"));
    }
    call(
        &c,
        DeprecateDoc {
            id: format!("{category}/{name}"),
            author: Author::Operator,
            reason: d.reason,
        },
    )
    .await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReviewBody {
    accept: bool,
    #[serde(default)]
    note: String,
}

/// The operator's decision on a document awaiting review (seed 001's
/// `needs_user_review`): `{"accept": true|false, "note": "..."}`.
async fn review_doc(
    State(c): State<Shared>,
    Path((category, name)): Path<(String, String)>,
    b: Bytes,
) -> ApiResult<xo_proto::knowledge::Reviewed> {
    let r: ReviewBody = body(&b)?;
    call(
        &c,
        ReviewDoc {
            id: format!("{category}/{name}"),
            accept: r.accept,
            by: "console".into(),
            note: r.note,
        },
    )
    .await
}

/// The directives of the review supervisors: the tasks that carry one.
pub async fn directive_tasks(c: &Shared) -> Result<Vec<TaskRecord>, ApiError> {
    let mut rows: Vec<TaskRecord> = all_tasks(c, None)
        .await?
        .into_iter()
        .filter(|t| t.task.directive.is_some())
        .collect();
    rows.sort_by_key(|t| (t.task.lane, t.seq));
    Ok(rows)
}

async fn directives(State(c): State<Shared>) -> ApiResult<Vec<TaskRecord>> {
    Ok(Json(directive_tasks(&c).await?))
}

async fn reviews(
    State(c): State<Shared>,
    Query(q): Query<BTreeMap<String, String>>,
) -> ApiResult<Vec<xo_proto::knowledge::ReviewRun>> {
    let last = match q.get("last") {
        None => None,
        Some(s) => Some(
            s.parse::<usize>()
                .map_err(|_| ApiError::invalid(format!("last {s:?}: a number of runs")))?,
        ),
    };
    call(&c, ListReviewRuns { last }).await
}

async fn fleet(State(c): State<Shared>) -> ApiResult<xo_proto::fleet::FleetStatus> {
    call(&c, FleetLs {}).await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScaleBody {
    replicas: u32,
}

async fn scale(
    State(c): State<Shared>,
    Path(role): Path<String>,
    b: Bytes,
) -> ApiResult<xo_proto::fleet::FleetStatus> {
    id("role", &role)?;
    let s: ScaleBody = body(&b)?;
    call(
        &c,
        FleetScale {
            role,
            replicas: s.replicas,
        },
    )
    .await
}

async fn restart(
    State(c): State<Shared>,
    Path(unit): Path<String>,
) -> ApiResult<xo_proto::fleet::FleetStatus> {
    id("unit", &unit)?;
    call(&c, FleetRestart { unit }).await
}

async fn settings(State(c): State<Shared>) -> ApiResult<xo_proto::settings::SettingsView> {
    call(&c, GetSettings {}).await
}

async fn put_settings(
    State(c): State<Shared>,
    b: Bytes,
) -> ApiResult<xo_proto::settings::SettingsView> {
    let mut p: PutSettings = body(&b)?;
    if p.by.is_empty() {
        p.by = "console".into();
    }
    call(&c, p).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_name_the_bad_field() {
        let e = body::<SteerBody>(br#"{"message": 3}"#).unwrap_err();
        assert_eq!(e.0, StatusCode::BAD_REQUEST);
        assert!(e.2.contains("`message`"), "{}", e.2);
        let e = body::<SteerBody>(br#"{"message":"x","severity":"loud"}"#).unwrap_err();
        assert!(e.2.contains("`severity`"), "{}", e.2);
        let e = body::<SteerBody>(b"{not json").unwrap_err();
        assert!(e.2.starts_with("body"), "{}", e.2);
        // An empty body is an empty object.
        assert!(body::<HaltBody>(b"").unwrap().reason.is_none());
    }

    #[test]
    fn service_errors_keep_their_code_and_status() {
        let e: ApiError = ServiceError::new(ErrorCode::Unavailable, "queue down").into();
        assert_eq!(e.0, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(e.1, "unavailable");
        let e: ApiError = ServiceError::new(ErrorCode::NotFound, "no").into();
        assert_eq!((e.0, e.1.as_str()), (StatusCode::NOT_FOUND, "not_found"));
    }
}
