//! The API's supervisor routes: the units, what needs a person, steering,
//! acknowledgements and the supervisor's counters.

use super::*;

pub(super) async fn units(State(c): State<Shared>) -> Result<NoApi<Response>, ApiError> {
    let json = c.units_json().await?;
    Ok(NoApi(
        (
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            json,
        )
            .into_response(),
    ))
}

/// `/api/v1/needs`: the units that need a person, the longest waiting
/// first (what the header's "Needs you" counts).
pub(super) async fn needs(State(c): State<Shared>) -> ApiResult<Vec<UnitSummary>> {
    let units = c.units().await?;
    Ok(Json(
        crate::pages::needing(&units).into_iter().cloned().collect(),
    ))
}

pub(super) async fn unit(
    State(c): State<Shared>,
    Path(UnitPath { unit }): Path<UnitPath>,
) -> ApiResult<xo_proto::control::UnitDetail> {
    id("unit", &unit)?;
    call(&c, ShowUnit { unit }).await
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct SteerBody {
    message: String,
    #[serde(default)]
    severity: Option<Severity>,
    /// The client that steers (a script's name), for the audit: the line
    /// says `OPERATOR (api: CLIENT)`, the operator being whose token it is.
    #[serde(default)]
    by: Option<String>,
}

pub(super) async fn steer(
    State(c): State<Shared>,
    Path(UnitPath { unit }): Path<UnitPath>,
    JsonBody(b): JsonBody<SteerBody>,
) -> ApiResult<xo_proto::Steering> {
    id("unit", &unit)?;
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
            by: crate::auth::who().by(b.by.as_deref()),
        },
    )
    .await
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct AckBody {
    /// What is being done about the unit.
    why: String,
    /// For how long, in milliseconds (default 30 minutes; 1 minute to 7 days).
    #[serde(default)]
    for_ms: Option<u64>,
    /// The client that acknowledges, for the audit (as for steering).
    #[serde(default)]
    by: Option<String>,
}

pub(super) async fn ack(
    State(c): State<Shared>,
    Path(UnitPath { unit }): Path<UnitPath>,
    JsonBody(b): JsonBody<AckBody>,
) -> ApiResult<UnitSummary> {
    id("unit", &unit)?;
    let req = xo_proto::control::AckUnit {
        unit,
        by: crate::auth::who().by(b.by.as_deref()),
        why: b.why,
        for_ms: b.for_ms.unwrap_or(xo_proto::control::ACK_DEFAULT_MS),
    };
    req.check()
        .map_err(|why| ApiError::invalid(why.to_string()))?;
    call(&c, req).await
}

pub(super) async fn stats(State(c): State<Shared>) -> ApiResult<xo_proto::control::StatsReply> {
    call(&c, SupervisorStats {}).await
}
