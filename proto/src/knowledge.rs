//! The knowledge store's contract (seed 001): documents, their lifecycle,
//! ownership, directives, review events, and the `knowledge` control API.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The knowledge service's control service name.
pub const KNOWLEDGE: &str = "knowledge";

/// The store's folders.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Category {
    Conventions,
    Design,
    Lessons,
    Domain,
}

impl Category {
    pub const ALL: [Category; 4] = [Self::Conventions, Self::Design, Self::Lessons, Self::Domain];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Conventions => "conventions",
            Self::Design => "design",
            Self::Lessons => "lessons",
            Self::Domain => "domain",
        }
    }

    pub fn parse(s: &str) -> Result<Self, UnknownCategory> {
        Self::ALL
            .into_iter()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| UnknownCategory(s.to_string()))
    }
}

/// A category name none of [`Category::ALL`] has.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("category {0:?} is not conventions, design, lessons or domain")]
pub struct UnknownCategory(pub String);

impl From<UnknownCategory> for String {
    fn from(e: UnknownCategory) -> Self {
        e.to_string()
    }
}

#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum DocStatus {
    /// New: a reviewer's best guess.
    #[default]
    Provisional,
    /// Used in enough clean tasks, or confirmed by the operator.
    Established,
    /// Never injected again.
    Deprecated,
}

impl DocStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Provisional => "provisional",
            Self::Established => "established",
            Self::Deprecated => "deprecated",
        }
    }
}

/// Who writes to the store. Each reviewer owns its folders; the operator
/// may write anywhere (user seeding).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Author {
    CodeStyle,
    Design,
    Internaliser,
    Assessor,
    Operator,
}

impl Author {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::CodeStyle => "code_style",
            Self::Design => "design",
            Self::Internaliser => "internaliser",
            Self::Assessor => "assessor",
            Self::Operator => "operator",
        }
    }

    /// Seed 001's ownership rules.
    pub fn may_write(self, c: Category) -> bool {
        match self {
            Self::Operator => true,
            Self::CodeStyle => c == Category::Conventions,
            Self::Design => c == Category::Design,
            Self::Internaliser => matches!(c, Category::Lessons | Category::Domain),
            Self::Assessor => false,
        }
    }
}

/// One line of a document's changelog.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ChangeEntry {
    /// RFC 3339.
    pub at: String,
    pub by: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    pub what: String,
}

/// A knowledge document: rules, not prose (seed 001's format).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct KnowledgeDoc {
    pub category: Category,
    /// File stem: one token.
    pub name: String,
    pub title: String,
    #[serde(default)]
    pub status: DocStatus,
    /// Who last updated it, and after which task.
    #[serde(default)]
    pub updated_by: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_task: Option<String>,
    /// The milestone it belongs to (design documents and lessons).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub milestone: Option<String>,
    /// Words and paths it is about (`parser`, `src/lexer`, `role:coder`,
    /// `type:fix`): documents chosen by relevance match them first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// Clean tasks it was injected into.
    #[serde(default)]
    pub uses: u32,
    /// Its writer asked for the operator's confirmation (seed 001's
    /// `needs_user_review`): listed for review in the console and never
    /// injected into a prompt until the operator accepts it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub needs_user_review: bool,
    pub rules: Vec<String>,
    #[serde(default)]
    pub examples: String,
    #[serde(default)]
    pub rationale: String,
    #[serde(default)]
    pub changelog: Vec<ChangeEntry>,
}

impl KnowledgeDoc {
    /// `<category>/<name>`
    pub fn id(&self) -> String {
        format!("{}/{}", self.category.as_str(), self.name)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DocSummary {
    pub id: String,
    pub title: String,
    pub status: DocStatus,
    pub uses: u32,
    pub updated_by: String,
    pub tokens: usize,
    /// Awaiting the operator's review ([`KnowledgeDoc::needs_user_review`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub needs_user_review: bool,
}

/// A file on disk that does not parse; listed, never silently dropped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct InvalidDoc {
    pub path: String,
    pub error: String,
}

/// Published on `xo.knowledge.changed.<category>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct KnowledgeChanged {
    pub v: u16,
    pub id: String,
    /// `put`, `deprecate`, `promote`, `disk` (edited by hand) or `removed`.
    pub change: String,
    pub by: String,
    pub at: u64,
}

impl crate::Message for KnowledgeChanged {
    const NAME: &'static str = "KnowledgeChanged";
    fn version(&self) -> u16 {
        self.v
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DirectiveType {
    Functional,
    Cleanup,
}

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum DirectivePriority {
    Critical,
    Normal,
    Low,
}

/// A reviewer's directive (seed 001), published on `xo.directive.<source>`
/// and enqueued as a task in the lane its type and priority give.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Directive {
    pub v: u16,
    pub id: String,
    #[serde(rename = "type")]
    pub kind: DirectiveType,
    pub source: String,
    /// At most 200 characters.
    pub description: String,
    /// At most 200 characters.
    #[serde(default)]
    pub rationale: String,
    pub priority: DirectivePriority,
    #[serde(default)]
    pub files: Vec<String>,
    pub at: u64,
}

impl crate::Message for Directive {
    const NAME: &'static str = "Directive";
    fn version(&self) -> u16 {
        self.v
    }
}

impl Directive {
    /// The queue lane: critical first, functional before planned work,
    /// cleanup after.
    pub fn lane(&self) -> crate::queue::Lane {
        use crate::queue::Lane;
        match (self.priority, self.kind) {
            (DirectivePriority::Critical, _) => Lane::Critical,
            (_, DirectiveType::Functional) => Lane::Functional,
            (_, DirectiveType::Cleanup) => Lane::Cleanup,
        }
    }
}

/// How a review run ended (`ReviewRun::outcome`; on the wire its name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReviewOutcome {
    /// The model was asked and its reply used.
    Ran,
    /// Not run: no model, budget spent, the model unreachable.
    Skipped,
    /// Run, but its reply was malformed.
    Discarded,
    /// An outcome from a newer peer.
    #[serde(other)]
    Unknown,
}

impl ReviewOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ran => "ran",
            Self::Skipped => "skipped",
            Self::Discarded => "discarded",
            Self::Unknown => "unknown",
        }
    }
}

impl std::fmt::Display for ReviewOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<&str> for ReviewOutcome {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// One reviewer run (or skip), on `xo.event.review.<reviewer>` and in the run log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ReviewRun {
    pub v: u16,
    /// `code_style`, `design`, `internaliser` or `assessor`.
    pub reviewer: String,
    pub project: String,
    /// Completed tasks when it ran.
    pub task_count: u64,
    /// Why it ran: `interval`, `milestone`, `replan`, `abort`, `urgency`.
    pub trigger: String,
    /// `ran`, `skipped` (no model, budget spent, unreachable) or `discarded` (malformed reply).
    #[schemars(with = "String")]
    pub outcome: ReviewOutcome,
    pub summary: String,
    #[serde(default)]
    pub directives: u32,
    #[serde(default)]
    pub documents: u32,
    /// Assessor: `aligned`, `minor_drift`, `major_drift`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<String>,
    #[serde(default)]
    pub converging: bool,
    #[serde(default)]
    pub bootstrap: bool,
    pub tokens_in: u64,
    pub tokens_out: u64,
    #[serde(deserialize_with = "crate::finite::cost_usd")]
    pub cost_usd: f64,
    pub at: u64,
}

impl crate::Message for ReviewRun {
    const NAME: &'static str = "ReviewRun";
    fn version(&self) -> u16 {
        self.v
    }
}

// ---- control requests ----

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ListDocs {
    #[serde(default)]
    pub category: Option<Category>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DocList {
    pub docs: Vec<DocSummary>,
    pub invalid: Vec<InvalidDoc>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GetDoc {
    /// `<category>/<name>`
    pub id: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PutDoc {
    pub doc: KnowledgeDoc,
    pub author: Author,
    #[serde(default)]
    pub task: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeprecateDoc {
    pub id: String,
    pub author: Author,
    pub reason: String,
}

/// The operator's decision on a document awaiting review: accepted, it is
/// established (confirmed) and may be injected; rejected, it is
/// deprecated. Either is a `KNOWLEDGE_REVIEWED` line in the queue's audit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReviewDoc {
    /// `<category>/<name>`
    pub id: String,
    pub accept: bool,
    /// Who decided (`operator`, the console's user).
    #[serde(default)]
    pub by: String,
    /// Why, in the operator's words (kept in the changelog and the audit).
    #[serde(default)]
    pub note: String,
}

/// A review decision applied.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Reviewed {
    pub doc: KnowledgeDoc,
    /// Its status before the decision.
    pub before: DocStatus,
    /// Set when the decision is applied but the queue did not write its
    /// audit line (the queue down): what went wrong, to say to the operator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit_error: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Select {
    #[serde(default)]
    pub milestone: Option<String>,
    /// Token budget; default 2,000.
    #[serde(default)]
    pub budget_tokens: Option<usize>,
    /// What the task is about, for documents chosen by relevance (lessons
    /// and design documents of no milestone, domain documents).
    #[serde(default)]
    pub about: About,
}

/// A task as relevance sees it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct About {
    #[serde(default)]
    pub role: String,
    /// The task type (`implementation`, `fix`, `test`, …).
    #[serde(default)]
    pub task_type: String,
    /// Intent, instructions and criteria.
    #[serde(default)]
    pub text: String,
    /// Paths it touches: working directory, required artifacts, files named.
    #[serde(default)]
    pub paths: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Selection {
    /// The `## PROJECT KNOWLEDGE` section ("" when nothing applies).
    pub section: String,
    /// Ids of the documents in it.
    pub docs: Vec<String>,
    pub tokens: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordUses {
    pub docs: Vec<String>,
    /// The task completed without a validation failure.
    pub clean: bool,
    #[serde(default)]
    pub task: Option<String>,
}

crate::api! {
    /// The knowledge store's control API (`xo.ctl.knowledge.<verb>`, NATS
    /// micro service `xo-knowledge`).
    pub enum KnowledgeApi for KNOWLEDGE {
        List(ListDocs) => "list" -> DocList;
        Get(GetDoc) => "get" -> KnowledgeDoc;
        Put(PutDoc) => "put" -> KnowledgeDoc;
        Deprecate(DeprecateDoc) => "deprecate" -> KnowledgeDoc;
        /// Accepts or rejects a document awaiting the operator's review.
        Review(ReviewDoc) => "review" -> Reviewed;
        Select(Select) => "select" -> Selection;
        /// Replies with the ids promoted to established.
        Uses(RecordUses) => "uses" -> Vec<String>;
    }
}

/// The review supervisors' control service name.
pub const REVIEW: &str = "review";

/// The review run log, newest last.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListReviewRuns {
    /// Only the last N runs (default all).
    #[serde(default)]
    pub last: Option<usize>,
}

crate::api! {
    /// The review supervisors' control API (`xo.ctl.review.<verb>`).
    pub enum ReviewApi for REVIEW {
        Runs(ListReviewRuns) => "runs" -> Vec<ReviewRun>;
    }
}
