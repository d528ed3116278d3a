//! Alerts: what needs a human, published on `xo.event.alert.<kind>` by the
//! service that sees it and delivered to the operator's webhooks by the
//! notifier.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What an alert is about.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum AlertKind {
    /// A task was blocked or failed and waits for the operator.
    TaskBlocked,
    /// An agent asked a question; the task waits for `xo answer`.
    Question,
    /// Pending work that no runner can claim.
    QueueStuck,
    /// A fleet role could not be kept at its size (restarts exhausted).
    RoleFailed,
    /// A task's or the goal's budget ran out.
    BudgetExhausted,
    /// The queue halted.
    QueueHalted,
    /// Requests on a task's lease kept coming with a token or a claimant
    /// that does not hold it: a runner guessing or replaying another's lease.
    LeaseRefused,
    /// A review supervisor wrote knowledge that asks for the operator's
    /// confirmation (seed 001's `needs_user_review`); held out of prompts
    /// until accepted on the console's Knowledge page.
    KnowledgeReview,
    /// A unit needs a person (its reason in the title: `stuck` when its
    /// steering of a stretch was spent), once a unit and stretch.
    UnitNeedsYou,
    /// Reports were lost before the supervisor read them: dropped by its
    /// connection (too slow to read) or missing from units' sequences. At
    /// most once a minute, with the counts since the last.
    ReportsLost,
}

impl AlertKind {
    pub const ALL: [AlertKind; 10] = [
        Self::TaskBlocked,
        Self::Question,
        Self::QueueStuck,
        Self::RoleFailed,
        Self::BudgetExhausted,
        Self::QueueHalted,
        Self::LeaseRefused,
        Self::KnowledgeReview,
        Self::UnitNeedsYou,
        Self::ReportsLost,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            Self::TaskBlocked => "task_blocked",
            Self::Question => "question",
            Self::QueueStuck => "queue_stuck",
            Self::RoleFailed => "role_failed",
            Self::BudgetExhausted => "budget_exhausted",
            Self::QueueHalted => "queue_halted",
            Self::LeaseRefused => "lease_refused",
            Self::KnowledgeReview => "knowledge_review",
            Self::UnitNeedsYou => "unit_needs_you",
            Self::ReportsLost => "reports_lost",
        }
    }
}

impl std::fmt::Display for AlertKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One alert.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Alert {
    pub v: u16,
    pub kind: AlertKind,
    /// One line a human reads first.
    pub title: String,
    /// What happened and what to do.
    pub detail: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// The unit it is about (`unit_needs_you`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
    /// The service that raised it (`queue`, `fleet`).
    pub source: String,
    pub at: u64,
}

impl crate::Message for Alert {
    const NAME: &'static str = "Alert";
    fn version(&self) -> u16 {
        self.v
    }
}
