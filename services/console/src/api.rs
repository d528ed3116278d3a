//! `/api/v1/...`: one route per control request, with the bus's own types
//! as JSON. Errors are `{code, message}` with the HTTP status of the code
//! (`invalid` 400, `not_found` 404, `unavailable` 503, `timeout` 504,
//! `internal` 500; `unauthorized` 401, `forbidden`/`csrf`/`read_only` 403).
//! A body that does not decode is refused naming the field.

use std::sync::Arc;

use aide::NoApi;
use aide::axum::ApiRouter;
use aide::axum::routing::{get_with, post_with};
use aide::generate::GenContext;
use aide::openapi::{self, OpenApi, Operation};
use aide::operation::{OperationInput, OperationOutput};
use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{FromRequest, Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use schemars::JsonSchema;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use xo_proto::Request;
use xo_proto::control::{
    ErrorCode, ServiceError, ShowUnit, SteerUnit, SupervisorStats, UnitSummary,
};
use xo_proto::fleet::{FleetLs, FleetRestart, FleetScale};
use xo_proto::knowledge::{Author, DeprecateDoc, GetDoc, ListDocs, ListReviewRuns, ReviewDoc};
use xo_proto::queue::{
    Answer, AuditTail, AuditVerify, Cancel, Enqueue, GetStatus, Halt, Init, ListTasks, Resume,
    RetryTask, SetGoal, Start, Step, TaskRecord, TaskState,
};
use xo_proto::settings::{GetSettings, PutSettings};
use xo_proto::{Severity, validate_token};

mod queue;
mod units;
use queue::*;
pub use queue::{all_tasks, find_task};
use units::*;

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

/// What every refusal's body is.
#[derive(Debug, serde::Serialize, JsonSchema)]
pub struct ErrorBody {
    /// `invalid`, `not_found`, `unavailable`, `timeout`, `internal`,
    /// `unauthorized`, `forbidden`, `csrf`, `read_only`, `host`.
    pub code: String,
    /// What was wrong and what to do.
    pub message: String,
}

impl OperationOutput for ApiError {
    type Inner = ErrorBody;

    fn operation_response(ctx: &mut GenContext, op: &mut Operation) -> Option<openapi::Response> {
        Json::<ErrorBody>::operation_response(ctx, op)
    }

    fn inferred_responses(
        ctx: &mut GenContext,
        op: &mut Operation,
    ) -> Vec<(Option<openapi::StatusCode>, openapi::Response)> {
        let Some(r) = Self::operation_response(ctx, op) else {
            return Vec::new();
        };
        [
            (400, "invalid: a field or value named in the message"),
            (401, "unauthorized: no token, or not this console's"),
            (
                403,
                "forbidden: read-only console, or a cookie write without X-XO-CSRF",
            ),
            (404, "not_found: no such unit, task, document or route"),
            (
                503,
                "unavailable: the service that answers it is not running",
            ),
            (504, "timeout: the service did not answer in time"),
        ]
        .into_iter()
        .map(|(code, what)| {
            let mut r = r.clone();
            r.description = what.to_string();
            (Some(openapi::StatusCode::Code(code)), r)
        })
        .collect()
    }
}

type ApiResult<T> = Result<Json<T>, ApiError>;

/// A JSON body decoded by [`body`] (an empty body is `{}`; an error names
/// the field), documented as `T`'s schema.
#[derive(Debug)]
pub struct JsonBody<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(req, state)
            .await
            .map_err(|e| ApiError::invalid(format!("body: {e}")))?;
        body(&bytes).map(JsonBody)
    }
}

impl<T: JsonSchema> OperationInput for JsonBody<T> {
    fn operation_input(ctx: &mut GenContext, op: &mut Operation) {
        Json::<T>::operation_input(ctx, op);
    }
}

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

/// `{unit}` in a path.
#[derive(Deserialize, JsonSchema)]
struct UnitPath {
    /// The unit's id.
    unit: String,
}

/// `{id}` in a path.
#[derive(Deserialize, JsonSchema)]
struct TaskPath {
    /// The task's id.
    id: String,
}

/// `{id}/{verb}` in a path.
#[derive(Deserialize, JsonSchema)]
struct TaskVerbPath {
    /// The task's id.
    id: String,
    /// `answer`, `retry` or `cancel`.
    verb: String,
}

/// `{verb}` of a queue action.
#[derive(Deserialize, JsonSchema)]
struct QueueVerbPath {
    /// `start`, `step`, `halt` or `resume`.
    verb: String,
}

/// `{category}/{name}` of a knowledge document.
#[derive(Deserialize, JsonSchema)]
struct DocPath {
    /// `rules`, `examples`, … (the document's folder).
    category: String,
    /// The document's name.
    name: String,
}

/// `{role}` of a runner role.
#[derive(Deserialize, JsonSchema)]
struct RolePath {
    /// The role.
    role: String,
}

/// `?project=` of the audit.
#[derive(Deserialize, JsonSchema)]
struct ProjectQuery {
    /// The project (default: the goal's).
    #[serde(default)]
    project: Option<String>,
}

/// `?category=` of the knowledge list.
#[derive(Deserialize, JsonSchema)]
struct CategoryQuery {
    /// Only this category.
    #[serde(default)]
    category: Option<String>,
}

/// `?last=` of the review runs.
#[derive(Deserialize, JsonSchema)]
struct LastQuery {
    /// The last N runs (default: all kept).
    #[serde(default)]
    last: Option<String>,
}

fn id(what: &str, v: &str) -> Result<(), ApiError> {
    validate_token(what, v).map_err(ApiError::invalid)
}

/// The routes of `/api/v1`, each with its OpenAPI operation: the spec is
/// made from the same list the router is (`/api/v1/openapi.json`).
fn api_routes() -> ApiRouter<Shared> {
    ApiRouter::new()
        .api_route(
            "/units",
            get_with(units, |o| {
                o.summary("Every unit as the supervisor sees it")
                    .response::<200, Json<Vec<UnitSummary>>>()
            }),
        )
        .api_route(
            "/needs",
            get_with(needs, |o| {
                o.summary("The units that need a person, the longest waiting first")
            }),
        )
        .api_route(
            "/units/{unit}",
            get_with(unit, |o| {
                o.summary("One unit: latest report, steering, report history")
            }),
        )
        .api_route(
            "/units/{unit}/steer",
            post_with(steer, |o| o.summary("Send [SUPERVISOR] steering to a unit")),
        )
        .api_route(
            "/units/{unit}/ack",
            post_with(ack, |o| {
                o.summary("Acknowledge a unit: in hand, by whom, why, for how long")
            }),
        )
        .api_route(
            "/stats",
            get_with(stats, |o| o.summary("The supervisor's counters")),
        )
        .api_route(
            "/queue",
            get_with(status, |o| o.summary("The queue's status")),
        )
        .api_route(
            "/queue/init",
            post_with(init, |o| o.summary("Initialise the queue")),
        )
        .api_route(
            "/queue/goal",
            post_with(goal, |o| o.summary("Set the goal")),
        )
        .api_route(
            "/queue/{verb}",
            post_with(queue_verb, |o| {
                o.summary("start, step, halt (with a reason) or resume")
                    .input::<Json<HaltBody>>()
            }),
        )
        .api_route(
            "/tasks",
            get_with(tasks, |o| o.summary("Tasks, a page at a time")).post_with(enqueue, |o| {
                o.summary("Enqueue tasks (validated as a whole)")
            }),
        )
        .api_route("/tasks/{id}", get_with(task, |o| o.summary("One task")))
        .api_route(
            "/tasks/{id}/diff",
            get_with(task_diff, |o| {
                o.summary("What a completed task changed on its branch (worktree isolation)")
            }),
        )
        .api_route(
            "/tasks/{id}/{verb}",
            post_with(task_verb, |o| {
                o.summary("answer (with the text), retry or cancel a task")
                    .input::<Json<AnswerBody>>()
            }),
        )
        .api_route(
            "/audit",
            get_with(audit_tail, |o| {
                o.summary("The last lines of a project's audit log")
            }),
        )
        .api_route(
            "/audit/verify",
            get_with(audit_verify, |o| {
                o.summary("Verify the audit log's hash chain")
            }),
        )
        .api_route(
            "/knowledge",
            get_with(knowledge, |o| o.summary("Knowledge documents")),
        )
        .api_route(
            "/knowledge/{category}/{name}",
            get_with(doc, |o| o.summary("One knowledge document")),
        )
        .api_route(
            "/knowledge/{category}/{name}/deprecate",
            post_with(deprecate, |o| {
                o.summary("Deprecate a document, with a reason")
            }),
        )
        .api_route(
            "/knowledge/{category}/{name}/review",
            post_with(review_doc, |o| {
                o.summary("Accept or reject a document awaiting review")
            }),
        )
        .api_route(
            "/directives",
            get_with(directives, |o| {
                o.summary("The review supervisors' directives")
            }),
        )
        .api_route("/reviews", get_with(reviews, |o| o.summary("Review runs")))
        .api_route(
            "/fleet",
            get_with(fleet, |o| o.summary("Runner containers per role")),
        )
        .api_route(
            "/fleet/{role}/scale",
            post_with(scale, |o| o.summary("Scale a role's containers")),
        )
        .api_route(
            "/fleet/units/{unit}/restart",
            post_with(restart, |o| o.summary("Restart a runner container")),
        )
        .api_route(
            "/settings",
            get_with(settings, |o| {
                o.summary("Operator settings, their keys and defaults")
            })
            .put_with(put_settings, |o| {
                o.summary("Change settings (checked, versioned, audited)")
            }),
        )
        .api_route(
            "/events",
            get_with(events::sse, |o| {
                o.summary("Live events (Server-Sent Events)")
                    .input::<Query<events::EventsQuery>>()
                    .response_with::<200, String, _>(|r| {
                        r.description("text/event-stream: one `event:` and JSON `data:` per event")
                    })
            }),
        )
}

/// The OpenAPI description of `/api/v1`, made from its routes.
pub fn openapi() -> OpenApi {
    let mut doc = base_doc();
    let _ = api_routes().finish_api(&mut doc);
    doc
}

fn base_doc() -> OpenApi {
    let mut doc = OpenApi {
        info: openapi::Info {
            title: "XO console API".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: Some(
                "One route per control request of the XO's services, with the bus's own types as JSON. Every request needs the console token (`Authorization: Bearer <token>`); errors are `{code, message}`. See docs/console.md.".into(),
            ),
            ..Default::default()
        },
        servers: vec![openapi::Server {
            url: "/api/v1".into(),
            ..Default::default()
        }],
        ..Default::default()
    };
    let mut components = openapi::Components::default();
    components.security_schemes.insert(
        "bearer".into(),
        openapi::ReferenceOr::Item(openapi::SecurityScheme::Http {
            scheme: "bearer".into(),
            bearer_format: None,
            description: Some("the console token (console.token, or XO_CONSOLE_TOKEN)".into()),
            extensions: Default::default(),
        }),
    );
    doc.components = Some(components);
    doc.security = vec![[("bearer".to_string(), Vec::new())].into_iter().collect()];
    doc
}

pub fn routes() -> Router<Shared> {
    let mut doc = base_doc();
    let router = api_routes().finish_api(&mut doc);
    let json: Arc<str> = serde_json::to_string_pretty(&doc)
        .unwrap_or_else(|e| {
            format!("{{\"error\": \"the OpenAPI description does not serialise: {e}\"}}")
        })
        .into();
    router
        .route(
            "/openapi.json",
            axum::routing::get(move || {
                let json = json.clone();
                async move {
                    (
                        [(axum::http::header::CONTENT_TYPE, "application/json")],
                        json.to_string(),
                    )
                }
            }),
        )
        .fallback(|| async {
            ApiError::not_found("no such API route; see docs/console.md and /api/v1/openapi.json")
        })
}

async fn knowledge(
    State(c): State<Shared>,
    Query(q): Query<CategoryQuery>,
) -> ApiResult<xo_proto::knowledge::DocList> {
    let category = match &q.category {
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
    Path(DocPath { category, name }): Path<DocPath>,
) -> ApiResult<xo_proto::knowledge::KnowledgeDoc> {
    call(
        &c,
        GetDoc {
            id: format!("{category}/{name}"),
        },
    )
    .await
}

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct DeprecateBody {
    /// Why it no longer holds.
    reason: String,
}

async fn deprecate(
    State(c): State<Shared>,
    Path(DocPath { category, name }): Path<DocPath>,
    JsonBody(d): JsonBody<DeprecateBody>,
) -> ApiResult<xo_proto::knowledge::KnowledgeDoc> {
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

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ReviewBody {
    /// true: established; false: deprecated.
    accept: bool,
    #[serde(default)]
    note: String,
}

/// The operator's decision on a document awaiting review (seed 001's
/// `needs_user_review`): `{"accept": true|false, "note": "..."}`.
async fn review_doc(
    State(c): State<Shared>,
    Path(DocPath { category, name }): Path<DocPath>,
    JsonBody(r): JsonBody<ReviewBody>,
) -> ApiResult<xo_proto::knowledge::Reviewed> {
    call(
        &c,
        ReviewDoc {
            id: format!("{category}/{name}"),
            accept: r.accept,
            by: crate::auth::who().by(None),
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
    Query(q): Query<LastQuery>,
) -> ApiResult<Vec<xo_proto::knowledge::ReviewRun>> {
    let last = match &q.last {
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

#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ScaleBody {
    /// Containers to run for the role.
    replicas: u32,
}

async fn scale(
    State(c): State<Shared>,
    Path(RolePath { role }): Path<RolePath>,
    JsonBody(s): JsonBody<ScaleBody>,
) -> ApiResult<xo_proto::fleet::FleetStatus> {
    id("role", &role)?;
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
    Path(UnitPath { unit }): Path<UnitPath>,
) -> ApiResult<xo_proto::fleet::FleetStatus> {
    id("unit", &unit)?;
    call(&c, FleetRestart { unit }).await
}

async fn settings(State(c): State<Shared>) -> ApiResult<xo_proto::settings::SettingsView> {
    call(&c, GetSettings {}).await
}

async fn put_settings(
    State(c): State<Shared>,
    JsonBody(mut p): JsonBody<PutSettings>,
) -> ApiResult<xo_proto::settings::SettingsView> {
    // Whose token it is, and the client the body names.
    p.by = crate::auth::who().by(Some(&p.by));
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
