//! Control APIs: each request names its service, verb and reply type, so the
//! subject is `xo.ctl.<service>.<verb>` and no caller spells it.
//!
//! A service's API is declared once with [`api!`](crate::api): one line a
//! request (type, verb, reply). That line makes the [`Request`] impl and a
//! variant of the service's API enum, which carries the request and the
//! port its answer goes back through, so a service's actor matches on the
//! proto request itself. [`Api::route`] decodes a request by its verb; the
//! one serve loop (`xo_bus::api`) does the rest for every service.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize, de::DeserializeOwned};

use crate::{Health, SaluteReport, Severity, Steering, Subjects};

/// A control request and its reply type. Implemented only by [`api!`](crate::api).
pub trait Request: Serialize + DeserializeOwned + Send + 'static {
    const SERVICE: &'static str;
    const VERB: &'static str;
    type Response: Serialize + DeserializeOwned + Send + 'static;

    fn subject(subjects: &Subjects) -> String {
        subjects.ctl(Self::SERVICE, Self::VERB)
    }

    /// How much longer than a service's usual answer time this request may
    /// take (a long-poll's wait).
    fn wait(&self) -> Duration {
        Duration::ZERO
    }

    /// The unit a runner's request acts for, when its API declares one
    /// (`scope:`): the request then goes to `xo.ctl.<service>.<verb>.<unit>`,
    /// a subject NATS lets only that unit's user publish on, and the
    /// service refuses it unless the subject and the body name the same
    /// unit. `None` (or empty): the plain subject, which only trusted
    /// users may publish on.
    fn scope(&self) -> Option<&str> {
        None
    }

    /// The subject this request goes to: [`Request::subject`], with its
    /// [`scope`](Request::scope) as a last token when it has one.
    fn subject_of(&self, subjects: &Subjects) -> String {
        match self.scope().filter(|s| !s.is_empty()) {
            Some(unit) => format!("{}.{unit}", Self::subject(subjects)),
            None => Self::subject(subjects),
        }
    }
}

/// Checks that a request which came on a unit's subject (`scope`) names
/// that unit in its body: the subject is what the server authenticated
/// (a runner's NATS user may publish only on its own unit's subjects), the
/// body is what the runner claims.
pub fn check_scope<R: Request>(req: &R, scope: Option<&str>) -> Result<(), ServiceError> {
    let Some(subject_unit) = scope else {
        return Ok(());
    };
    match req.scope() {
        Some(named) if named == subject_unit => Ok(()),
        named => Err(ServiceError::new(
            ErrorCode::Invalid,
            format!(
                "{}.{}: sent on the subject of unit {subject_unit:?} but acts for {:?}; a runner acts only for its own unit (send it on `{}.{}.<unit>` with that unit in the body)",
                R::SERVICE,
                R::VERB,
                named.unwrap_or(""),
                R::SERVICE,
                R::VERB,
            ),
        )),
    }
}

/// A family of reply ports: how a service's actor answers a request.
/// (`xo_bus::api::ActorPorts` is ractor's `RpcReplyPort`.)
pub trait Ports {
    type Port<T: Send + 'static>: Send + 'static;
}

/// A service's whole control API: an enum with one variant a request, each
/// holding the request and the port for its answer.
pub trait Api<P: Ports>: Sized + Send + 'static {
    /// The service name: the subject group is `xo.ctl.<SERVICE>`.
    const SERVICE: &'static str;
    /// One a request, in declaration order.
    const VERBS: &'static [&'static str];
    /// The verbs also served on `<verb>.<unit>` ([`Request::scope`]).
    const SCOPED: &'static [&'static str];

    /// Decodes the request `verb` names and hands it to `to` with the
    /// variant that carries it. An unknown verb is `not_found`, a body that
    /// does not decode `invalid`, each naming what was wrong; a request that
    /// came on a unit's subject (`scope`) and acts for another unit is
    /// `invalid` ([`check_scope`]).
    fn route<T: Route<Self, P>>(
        verb: &str,
        scope: Option<&str>,
        payload: &[u8],
        content_type: Option<&str>,
        limit: usize,
        to: T,
    ) -> Result<T::Out, ServiceError>;
}

/// What [`Api::route`] hands a decoded request to.
pub trait Route<A, P: Ports> {
    type Out;
    fn route<R: Request>(self, req: R, variant: fn(R, P::Port<R::Response>) -> A) -> Self::Out;
}

/// Decodes a control request body (JSON or MessagePack) into `R`; a body
/// over `limit` bytes (`wire.max_payload`) is refused.
pub fn decode_request<R: Request>(
    payload: &[u8],
    content_type: Option<&str>,
    limit: usize,
) -> Result<R, ServiceError> {
    crate::codec::decode_plain(payload, content_type, limit).map_err(|e| {
        ServiceError::new(
            ErrorCode::Invalid,
            format!("{}.{}: {e}", R::SERVICE, R::VERB),
        )
    })
}

/// Declares a service's control API, one line a request:
///
/// ```ignore
/// xo_proto::api! {
///     /// The queue's control API.
///     pub enum QueueApi for QUEUE {
///         Claim(Claim) => "claim" -> Option<Claimed>, wait: |q| Duration::from_millis(q.wait_ms), scope: |q| Some(&q.claimant);
///         Halt(Halt) => "halt" -> QueueStatus;
///     }
/// }
/// ```
///
/// (`wait`: how much longer the request may take; `scope`: the unit it
/// acts for, [`Request::scope`].) It makes `impl Request` for each request type and
/// `pub enum QueueApi<P: Ports> { Claim(Claim, P::Port<Option<Claimed>>), … }`
/// with its [`Api`] impl.
#[macro_export]
macro_rules! api {
    (
        $(#[$meta:meta])*
        $vis:vis enum $api:ident for $service:path {
            $(
                $(#[$vmeta:meta])*
                $variant:ident($req:ty) => $verb:literal -> $resp:ty $(, wait: |$q:ident| $wait:expr)? $(, scope: |$sq:ident| $scope:expr)?;
            )*
        }
    ) => {
        $(
            impl $crate::control::Request for $req {
                const SERVICE: &'static str = $service;
                const VERB: &'static str = $verb;
                type Response = $resp;
                $(
                    fn wait(&self) -> ::std::time::Duration {
                        let $q = self;
                        $wait
                    }
                )?
                $(
                    fn scope(&self) -> Option<&str> {
                        let $sq = self;
                        $scope
                    }
                )?
            }
        )*

        $(#[$meta])*
        $vis enum $api<P: $crate::control::Ports> {
            $(
                $(#[$vmeta])*
                $variant($req, P::Port<$resp>),
            )*
        }

        impl<P: $crate::control::Ports + 'static> $crate::control::Api<P> for $api<P> {
            const SERVICE: &'static str = $service;
            const VERBS: &'static [&'static str] = &[$($verb),*];
            const SCOPED: &'static [&'static str] = &[$($({
                let _ = stringify!($sq);
                $verb
            },)?)*];

            fn route<T: $crate::control::Route<Self, P>>(
                verb: &str,
                scope: Option<&str>,
                payload: &[u8],
                content_type: Option<&str>,
                limit: usize,
                to: T,
            ) -> Result<T::Out, $crate::control::ServiceError> {
                match verb {
                    $(
                        $verb => {
                            let req = $crate::control::decode_request::<$req>(payload, content_type, limit)?;
                            $crate::control::check_scope(&req, scope)?;
                            Ok(to.route(req, $api::$variant))
                        }
                    )*
                    other => Err($crate::control::ServiceError::new(
                        $crate::control::ErrorCode::NotFound,
                        format!("unknown verb {other:?} on {}; known: {}", $service, [$($verb),*].join(", ")),
                    )),
                }
            }
        }
    };
}

/// Error codes shared by every service's replies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    Invalid,
    NotFound,
    Unavailable,
    Timeout,
    Internal,
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Invalid => "invalid",
            Self::NotFound => "not found",
            Self::Unavailable => "unavailable",
            Self::Timeout => "timeout",
            Self::Internal => "internal",
        })
    }
}

/// A service error as it crosses the bus.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, thiserror::Error)]
#[error("{code}: {message}")]
pub struct ServiceError {
    pub code: ErrorCode,
    pub message: String,
}

impl ServiceError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

/// The envelope of every control reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Reply<T> {
    Ok(T),
    Err(ServiceError),
}

impl<T> From<Result<T, ServiceError>> for Reply<T> {
    fn from(r: Result<T, ServiceError>) -> Self {
        match r {
            Ok(v) => Reply::Ok(v),
            Err(e) => Reply::Err(e),
        }
    }
}

impl<T> Reply<T> {
    pub fn into_result(self) -> Result<T, ServiceError> {
        match self {
            Reply::Ok(v) => Ok(v),
            Reply::Err(e) => Err(e),
        }
    }
}

/// The supervisor's control service name.
pub const SUPERVISOR: &str = "supervisor";

/// List the units the supervisor knows, sorted by id: all of them, or a
/// page (`limit` units after `after`). A large fleet's whole list can
/// exceed the bus's message size: page it ([`ListUnits::PAGE`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ListUnits {
    /// Only units whose id sorts after this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// At most this many.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
    /// Only these units (those the supervisor knows; empty: every unit).
    /// The console asks for the rows that changed this way.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub units: Vec<String>,
    /// Only the units on this task (the task page names its units).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
}

impl ListUnits {
    /// A page that stays far below the default message size limit
    /// (a unit's summary is about 300 bytes of JSON).
    pub const PAGE: usize = 500;

    /// The page after `after`.
    pub fn page(after: Option<String>) -> Self {
        Self {
            after,
            limit: Some(Self::PAGE),
            ..Self::default()
        }
    }

    /// Only the units on `task`.
    pub fn on_task(task: impl Into<String>) -> Self {
        Self {
            task: Some(task.into()),
            ..Self::default()
        }
    }

    /// Only `units` (at most [`Self::PAGE`] of them make one reply).
    pub fn only(units: Vec<String>) -> Self {
        Self {
            units,
            ..Self::default()
        }
    }
}

/// Show one unit with its latest report and recent steering.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShowUnit {
    pub unit: String,
}

/// Send an operator's steering to a unit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SteerUnit {
    pub unit: String,
    pub message: String,
    #[serde(default = "default_operator_severity")]
    pub severity: Severity,
    /// Who steers (the console's operator, the CLI's user), for the audit.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub by: String,
}

/// An operator's acknowledgement of a unit in trouble: seen, and in hand
/// (`by`, `why`) until `until`. The console sinks it below the units of
/// its colour nobody has acknowledged; it lapses at `until`, or as soon as
/// the unit gets worse than it was (its health worse than `health`, or it
/// starts to need a person), and does not come back by itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Acknowledged {
    pub by: String,
    pub why: String,
    /// When it was given, and until when it holds (ms since the epoch).
    pub at: u64,
    pub until: u64,
    /// The unit's health when it was given.
    pub health: crate::Health,
}

/// Acknowledges a unit (`xo ack UNIT`, the console's unit page).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AckUnit {
    pub unit: String,
    /// Who acknowledges (the console's operator, the CLI's user).
    pub by: String,
    /// Why: what is being done about it.
    pub why: String,
    /// For how long, in milliseconds (at most a week).
    pub for_ms: u64,
}

/// How long an acknowledgement holds when none is said: 30 minutes.
pub const ACK_DEFAULT_MS: u64 = 30 * 60_000;

/// The longest an acknowledgement holds: a week.
pub const MAX_ACK_MS: u64 = 7 * 24 * 3_600_000;

impl AckUnit {
    /// What is wrong with this request, if anything.
    pub fn check(&self) -> Result<(), Refusal> {
        if self.why.trim().is_empty() {
            return Err(Refusal::NoWhy);
        }
        let chars = self.why.chars().count();
        if chars > MAX_ACK_WHY_CHARS {
            return Err(Refusal::WhyTooLong { chars });
        }
        if self.for_ms < 60_000 || self.for_ms > MAX_ACK_MS {
            return Err(Refusal::AckDuration { ms: self.for_ms });
        }
        Ok(())
    }
}

/// The longest why of an acknowledgement, in characters.
pub const MAX_ACK_WHY_CHARS: usize = 500;

/// Why an operator's request (a steering, an acknowledgement) is refused,
/// in plain words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the steering message is empty: say what the unit should do")]
    EmptyMessage,
    #[error(
        "the steering message is {chars} characters; at most {MAX_STEERING_CHARS}: the agent reads it on its next turn, so say what to do, not the whole log"
    )]
    MessageTooLong { chars: usize },
    #[error("an acknowledgement needs a why: say what is being done about the unit")]
    NoWhy,
    #[error("the why of an acknowledgement is {chars} characters; at most {MAX_ACK_WHY_CHARS}")]
    WhyTooLong { chars: usize },
    #[error("an acknowledgement holds from 1 minute to 7 days, not {ms} ms")]
    AckDuration { ms: u64 },
}

/// The longest steering message an operator may send, in characters: the
/// agent reads it on its next turn, beside its work (say what to do, not
/// the whole log).
pub const MAX_STEERING_CHARS: usize = 4_000;

impl SteerUnit {
    /// What is wrong with this request, if anything (empty, too long).
    pub fn check(&self) -> Result<(), Refusal> {
        if self.message.trim().is_empty() {
            return Err(Refusal::EmptyMessage);
        }
        let chars = self.message.chars().count();
        if chars > MAX_STEERING_CHARS {
            return Err(Refusal::MessageTooLong { chars });
        }
        Ok(())
    }
}

fn default_operator_severity() -> Severity {
    Severity::Warning
}

/// One row of `xo units`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct UnitSummary {
    pub unit: String,
    pub role: String,
    /// The health the XO assessed.
    pub health: Health,
    /// The health the unit reported for itself.
    pub self_health: Health,
    /// What it said with it (`status.note` of its last report).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub self_note: Option<String>,
    pub stale: bool,
    /// Its last report said its session ended (or waits for its user):
    /// not stale for being silent.
    #[serde(default)]
    pub ended: bool,
    /// Reports refused in a row for their epoch (an earlier life of the
    /// unit, or its clock too far off) while it is heard: from 3 on, the
    /// XO does not show it green (`xo units` STATE `refused`).
    #[serde(default)]
    pub refused_reports: u32,
    pub turn: u64,
    pub seq: u64,
    /// Milliseconds since the Unix epoch of the last report or heartbeat.
    pub last_seen: u64,
    #[serde(default)]
    pub task_id: Option<String>,
    pub context_fill: f64,
    pub steering_sent: u64,
    pub restarts: u32,
    /// Of the latest report: PACE level, turns since progress, cost so far.
    #[serde(default)]
    pub pace: crate::Pace,
    #[serde(default)]
    pub turns_since_progress: u32,
    #[serde(default)]
    pub cost_usd: f64,
    /// The last steering sent: its kind and when (ms since the epoch).
    #[serde(default)]
    pub last_steering: Option<(crate::AnomalyKind, u64)>,
    /// The unit needs a person, and why (`xo units` NEEDS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needs: Option<crate::NeedsYou>,
    /// Waiting for its provider's usage limit to reset, until then (ms
    /// since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_until: Option<u64>,
    /// Records of its session the sensor could not read (its last
    /// report's `status.unreadable`): not steered on them.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unreadable: u64,
    /// An operator's acknowledgement in force (`xo ack`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ack: Option<Acknowledged>,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// The units of `units` that need a person, the longest waiting first
/// (`xo units --needs`, the console's `/needs` and its header count).
pub fn needing(units: &[UnitSummary]) -> Vec<&UnitSummary> {
    let mut v: Vec<&UnitSummary> = units.iter().filter(|u| u.needs.is_some()).collect();
    v.sort_by(|a, b| {
        let since = |u: &UnitSummary| u.needs.as_ref().map_or(u64::MAX, |n| n.since);
        since(a).cmp(&since(b)).then_with(|| a.unit.cmp(&b.unit))
    });
    v
}

/// `xo units UNIT`: a summary, the latest report and the last steering.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct UnitDetail {
    pub summary: UnitSummary,
    pub report: Option<SaluteReport>,
    pub recent_steering: Vec<Steering>,
    /// The unit's last reports as points, oldest first (at most
    /// [`HISTORY_POINTS`], kept by its supervisor since it started).
    #[serde(default)]
    pub history: Vec<ReportPoint>,
}

/// How many report points a supervisor keeps per unit.
pub const HISTORY_POINTS: usize = 48;

pub use crate::followed::{FOLLOW_TURNS, Followed, followed};

/// One report, as the unit page's charts draw it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ReportPoint {
    pub turn: u64,
    /// Milliseconds since the Unix epoch, when the supervisor took it.
    pub at: u64,
    pub context_fill: f64,
    pub cost_usd: f64,
    pub turns_since_progress: u32,
}

/// The supervisor's counters.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SupervisorStats {}

/// Counters since the supervisor started.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StatsReply {
    /// Reports received (bus and files).
    pub reports: u64,
    pub heartbeats: u64,
    /// Reports run through the radio check.
    pub evaluated: u64,
    /// Reports ignored as duplicates or out of order.
    pub duplicates: u64,
    /// Messages sent to the dead-letter subject.
    pub dead_letters: u64,
    pub steering: u64,
    pub units: u64,
    pub watcher_restarts: u64,
    /// Units forgotten after `supervisor.unit_retention_ms` of silence.
    #[serde(default)]
    pub evicted: u64,
    /// Reports never received, counted from the gaps in each unit's
    /// sequence numbers (lost in transit: core NATS keeps nothing for a
    /// publisher without a connection, or a subject nobody subscribes to).
    #[serde(default)]
    pub missed: u64,
    /// Messages the supervisor's connection dropped because it read them
    /// too slowly (the NATS client's slow-consumer count: a lower bound;
    /// what a unit's sequence shows missing is in `missed`).
    #[serde(default)]
    pub dropped: u64,
    /// Reports shed on purpose under overload: each replaced, while it
    /// waited for its watcher, by a newer report of its unit (every unit
    /// is judged on its latest; `supervisor.inbox_high`).
    #[serde(default)]
    pub shed: u64,
    /// Inputs (a message, a report file) whose handling panicked: each
    /// was counted, logged and skipped, and the input went on with the
    /// next (this process's inputs, the supervisor's file poller among them).
    #[serde(default)]
    pub panics: u64,
    /// `steering` by anomaly kind (wire names; kinds never steered left out).
    #[serde(default)]
    pub steering_by_kind: std::collections::BTreeMap<String, u64>,
    /// Steering sent in each of the last [`SteeringMinute::KEPT`] minutes
    /// that had any, oldest first (the console's steering-rate chart).
    #[serde(default)]
    pub steering_minutes: Vec<SteeringMinute>,
    /// How often each unit's state is written now (ms):
    /// `supervisor.persist_interval_ms`, longer past
    /// `supervisor.persist_writes_per_s` (what a crash can lose). Of
    /// several supervisors, the longest.
    #[serde(default)]
    pub persist_every_ms: u64,
}

/// The steering sent in one minute, by anomaly kind.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SteeringMinute {
    /// The minute's start, milliseconds since the Unix epoch.
    pub minute: u64,
    /// Wire kind → steering messages sent.
    pub by_kind: std::collections::BTreeMap<String, u64>,
}

impl SteeringMinute {
    /// Minutes a supervisor keeps.
    pub const KEPT: usize = 60;

    /// Adds `other`'s minutes into `all` (sharded supervisors' sums), kept
    /// in order and to the last [`Self::KEPT`] minutes.
    pub fn merge(all: &mut Vec<SteeringMinute>, other: Vec<SteeringMinute>) {
        for m in other {
            match all.binary_search_by_key(&m.minute, |x| x.minute) {
                Ok(i) => {
                    for (k, n) in m.by_kind {
                        *all[i].by_kind.entry(k).or_default() += n;
                    }
                }
                Err(i) => all.insert(i, m),
            }
        }
        let extra = all.len().saturating_sub(Self::KEPT);
        all.drain(..extra);
    }
}

crate::api! {
    /// The supervisor's control API (`xo.ctl.supervisor.<verb>`, NATS micro
    /// service `xo-supervisor`).
    pub enum SupervisorApi for SUPERVISOR {
        Units(ListUnits) => "units" -> Vec<UnitSummary>;
        Unit(ShowUnit) => "unit" -> UnitDetail;
        Steer(SteerUnit) => "steer" -> Steering;
        Ack(AckUnit) => "ack" -> UnitSummary;
        Stats(SupervisorStats) => "stats" -> StatsReply;
    }
}

#[cfg(test)]
mod tests {
    use super::SteeringMinute;

    /// An operator's steering is refused empty or over the bound, counted
    /// in characters (not bytes), in plain words.
    #[test]
    fn a_steering_is_refused_empty_or_too_long() {
        let steer = |m: String| super::SteerUnit {
            unit: "u".into(),
            message: m,
            severity: crate::Severity::Warning,
            by: String::new(),
        };
        let refused = |m: String| steer(m).check().unwrap_err().to_string();
        assert!(refused("  ".into()).contains("empty"));
        let at_bound = "é".repeat(super::MAX_STEERING_CHARS);
        assert_eq!(steer(at_bound.clone()).check(), Ok(()));
        let why = refused(at_bound + "!");
        assert!(why.contains("is 4001 characters; at most 4000"), "{why}");
    }

    /// Sharded supervisors' minutes add up by minute and kind, in order.
    #[test]
    fn steering_minutes_merge_by_minute_and_kind() {
        let m = |minute: u64, kinds: &[(&str, u64)]| SteeringMinute {
            minute,
            by_kind: kinds.iter().map(|(k, n)| (k.to_string(), *n)).collect(),
        };
        let mut all = vec![m(1, &[("loop", 1)]), m(3, &[("stall", 2)])];
        SteeringMinute::merge(
            &mut all,
            vec![m(2, &[("loop", 4)]), m(3, &[("stall", 1), ("loop", 1)])],
        );
        assert_eq!(
            all,
            [
                m(1, &[("loop", 1)]),
                m(2, &[("loop", 4)]),
                m(3, &[("loop", 1), ("stall", 3)])
            ]
        );
        let mut many: Vec<SteeringMinute> = Vec::new();
        SteeringMinute::merge(&mut many, (0..70).map(|i| m(i, &[("loop", 1)])).collect());
        assert_eq!(many.len(), SteeringMinute::KEPT);
        assert_eq!(many[0].minute, 10);
    }
}
