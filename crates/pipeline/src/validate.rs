//! Deterministic, rule-based validation (seed 003): required artifacts,
//! acceptance criteria, test command, expected JSON schema and exit code,
//! with a match quality per criterion and an overall confidence. No model
//! is called here; free-text criteria are rated and left uncertain for the
//! interrogator.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use xo_proto::queue::{CriterionResult, Task, ValidationReport};

use crate::driver::AgentOutput;
use crate::halt::AgentReply;
use crate::sandbox::Sandbox;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum MatchQuality {
    Exact,
    High,
    Medium,
    Low,
    None,
}

impl MatchQuality {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Exact => "EXACT",
            Self::High => "HIGH",
            Self::Medium => "MEDIUM",
            Self::Low => "LOW",
            Self::None => "NONE",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Confidence {
    High,
    Medium,
    Low,
    Uncertain,
}

impl Confidence {
    /// Seed 003's name for it, on the wire.
    pub fn level(self) -> xo_proto::queue::ConfidenceLevel {
        use xo_proto::queue::ConfidenceLevel as L;
        match self {
            Self::High => L::High,
            Self::Medium => L::Medium,
            Self::Low => L::Low,
            Self::Uncertain => L::Uncertain,
        }
    }

    pub fn score(self) -> f64 {
        match self {
            Self::High => 0.95,
            Self::Medium => 0.7,
            Self::Low => 0.4,
            Self::Uncertain => 0.2,
        }
    }
}

/// The deterministic kinds of criterion; anything else is free text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Criterion {
    FileExists(String),
    FileContains(String, String),
    CommandSucceeds(String),
    OutputContains(String),
    FreeText(String),
}

impl Criterion {
    /// `file exists: PATH`, `file contains: PATH :: TEXT`,
    /// `command succeeds: CMD`, `output contains: TEXT`; else free text.
    pub fn parse(text: &str) -> Self {
        let t = text.trim();
        let lower = t.to_ascii_lowercase();
        let after = |p: &str| t[p.len()..].trim().to_string();
        if lower.starts_with("file exists:") {
            Self::FileExists(after("file exists:"))
        } else if lower.starts_with("file contains:") {
            let rest = after("file contains:");
            match rest.split_once("::") {
                Some((p, x)) => Self::FileContains(p.trim().into(), x.trim().into()),
                None => Self::FreeText(t.into()),
            }
        } else if lower.starts_with("command succeeds:") {
            Self::CommandSucceeds(after("command succeeds:"))
        } else if lower.starts_with("output contains:") {
            Self::OutputContains(after("output contains:"))
        } else {
            Self::FreeText(t.into())
        }
    }
}

/// One criterion's verdict; `passed: None` is uncertain.
#[derive(Debug, Clone, PartialEq)]
pub struct Check {
    pub criterion: String,
    pub passed: Option<bool>,
    pub quality: MatchQuality,
    pub detail: String,
    /// Files the pre-analysis found relevant (for interrogation).
    pub hints: Vec<String>,
}

/// The validator's report.
#[derive(Debug, Clone, PartialEq)]
pub struct Validation {
    pub checks: Vec<Check>,
    /// Non-critical findings (a non-zero exit code, optional tests failing).
    pub notes: Vec<String>,
}

impl Validation {
    pub fn failed(&self) -> Vec<&Check> {
        self.checks
            .iter()
            .filter(|c| c.passed == Some(false))
            .collect()
    }
    pub fn uncertain(&self) -> Vec<&Check> {
        self.checks.iter().filter(|c| c.passed.is_none()).collect()
    }
    pub fn valid(&self) -> bool {
        self.checks.iter().all(|c| c.passed == Some(true))
    }

    pub fn confidence(&self) -> Confidence {
        if !self.uncertain().is_empty() || !self.failed().is_empty() {
            return Confidence::Uncertain;
        }
        let worst = self
            .checks
            .iter()
            .map(|c| c.quality)
            .max()
            .unwrap_or(MatchQuality::Exact);
        let mut c = match worst {
            MatchQuality::Exact | MatchQuality::High => Confidence::High,
            MatchQuality::Medium => Confidence::Medium,
            _ => Confidence::Low,
        };
        if !self.notes.is_empty() && c == Confidence::High {
            c = Confidence::Medium;
        }
        c
    }

    /// Failures as the fix prompt lists them.
    pub fn failure_lines(&self) -> Vec<String> {
        self.failed()
            .iter()
            .map(|c| format!("{}: {}", c.criterion, c.detail))
            .collect()
    }

    pub fn report(&self) -> ValidationReport {
        let failed = self.failed().len();
        let uncertain = self.uncertain().len();
        let summary = if self.valid() {
            format!("{} check(s) passed", self.checks.len())
        } else {
            format!(
                "{failed} failed, {uncertain} uncertain of {} check(s): {}",
                self.checks.len(),
                self.failure_lines().join("; ")
            )
        };
        ValidationReport {
            passed: self.valid(),
            summary,
            criteria: self
                .checks
                .iter()
                .map(|c| CriterionResult {
                    criterion: c.criterion.clone(),
                    passed: c.passed == Some(true),
                    detail: c.detail.clone(),
                    quality: Some(c.quality.as_str().into()),
                })
                .collect(),
            confidence: Some(self.confidence().score()),
            confidence_level: Some(self.confidence().level()),
            failed_criteria: self.failed().iter().map(|c| c.criterion.clone()).collect(),
            uncertain_criteria: self
                .uncertain()
                .iter()
                .map(|c| c.criterion.clone())
                .collect(),
            ..Default::default()
        }
    }

    /// A passing validation becomes a [`Validated`] output; nothing else does.
    pub fn accept(self, reply: AgentReply) -> Result<Validated, Validation> {
        if self.valid() {
            Ok(Validated {
                validation: self,
                reply,
            })
        } else {
            Err(self)
        }
    }
}

/// A reply that passed validation. Its fields are private and
/// [`Validation::accept`] is its only constructor.
#[derive(Debug, Clone)]
pub struct Validated {
    validation: Validation,
    reply: AgentReply,
}

impl Validated {
    pub fn validation(&self) -> &Validation {
        &self.validation
    }
    pub fn reply(&self) -> &AgentReply {
        &self.reply
    }
}

/// What validation needs besides the output.
#[derive(Debug, Clone)]
pub struct Checker<'a> {
    pub sandbox: &'a Sandbox,
    pub cwd: &'a Path,
    pub env: &'a [(String, String)],
    pub timeout: Duration,
    pub max_output: usize,
    /// The commands run the agent's code: confined as the agent is.
    pub confine: Option<&'a crate::confine::Confinement>,
}

impl Checker<'_> {
    /// Runs a check's command in the working directory, as the agent ran
    /// (its environment, confinement, timeout and output bound).
    async fn shell(&self, cmd: &str) -> Result<crate::proc::AgentOutput, crate::proc::ProcError> {
        self.shell_in(cmd, self.cwd).await
    }

    /// A helper's verification command: `Ok(true)` when it exits 0 in the
    /// working directory and not in an empty one (a command that succeeds
    /// without the code, like `true`, proves nothing); `Err` says why it
    /// does not count.
    pub async fn verifies(&self, cmd: &str, empty: &Path) -> Result<(), NotVerified> {
        match self.shell(cmd).await {
            Ok(o) if o.exit_code == Some(0) => {}
            Ok(o) => {
                return Err(NotVerified::Exit {
                    code: o.exit_code,
                    last: last_line(&o.stdout, &o.stderr),
                });
            }
            Err(e) => return Err(NotVerified::Start(e)),
        }
        match self.shell_in(cmd, empty).await {
            Ok(o) if o.exit_code == Some(0) => Err(NotVerified::ProvesNothing),
            _ => Ok(()),
        }
    }

    async fn shell_in(
        &self,
        cmd: &str,
        cwd: &Path,
    ) -> Result<crate::proc::AgentOutput, crate::proc::ProcError> {
        crate::proc::shell(
            cmd,
            cwd,
            self.env,
            self.timeout,
            self.max_output,
            self.confine,
        )
        .await
    }

    /// Validates one run. Runs commands (test command, `command succeeds`)
    /// for real in the working directory.
    pub async fn validate(&self, task: &Task, out: &AgentOutput, reply: &AgentReply) -> Validation {
        let mut checks = Vec::new();
        let mut notes = Vec::new();
        for a in &task.required_artifacts {
            let (passed, detail) = match self.sandbox.resolve(self.cwd, a) {
                Ok(p) if p.exists() => (true, "exists".to_string()),
                Ok(_) => (false, "missing".to_string()),
                Err(e) => (false, e.to_string()),
            };
            checks.push(exact(format!("required artifact: {a}"), passed, detail));
        }
        for c in &task.acceptance_criteria {
            checks.push(self.criterion(c, out).await);
        }
        if let Some(cmd) = &task.test_command {
            match self.shell(cmd).await {
                Ok(o) if o.exit_code == Some(0) => {
                    checks.push(exact(format!("test command: {cmd}"), true, "exit 0".into()))
                }
                Ok(o) => {
                    let detail = format!(
                        "exit {}{}",
                        o.exit_code
                            .map(|c| c.to_string())
                            .unwrap_or_else(|| "by signal".into()),
                        last_line(&o.stdout, &o.stderr)
                    );
                    if task.tests_required {
                        checks.push(exact(format!("test command: {cmd}"), false, detail));
                    } else {
                        notes.push(format!(
                            "test command {cmd} failed ({detail}); tests not required"
                        ));
                    }
                }
                Err(e) => checks.push(exact(format!("test command: {cmd}"), false, e.to_string())),
            }
        }
        if let Some(schema) = &task.expected_json_schema {
            let (passed, detail) = match check_schema(schema, reply.object.get("output")) {
                Ok(()) => (true, "output matches".to_string()),
                Err(e) => (false, e.to_string()),
            };
            checks.push(exact("expected JSON schema".into(), passed, detail));
        }
        if let Some(code) = out.exit_code.filter(|c| *c != 0) {
            notes.push(format!("the agent exited with code {code}"));
        }
        if out.truncated {
            notes.push("the agent's output was longer than the bound and was cut".into());
        }
        Validation { checks, notes }
    }

    async fn criterion(&self, text: &str, out: &AgentOutput) -> Check {
        let file = |p: &str| self.sandbox.resolve(self.cwd, p);
        match Criterion::parse(text) {
            Criterion::FileExists(p) => {
                let (ok, d) = match file(&p) {
                    Ok(f) if f.exists() => (true, "exists".into()),
                    Ok(_) => (false, format!("{p} does not exist")),
                    Err(e) => (false, e.to_string()),
                };
                exact(text.into(), ok, d)
            }
            Criterion::FileContains(p, needle) => {
                let (ok, d) = match file(&p).map(std::fs::read_to_string) {
                    Ok(Ok(body)) if body.contains(&needle) => (true, "found".into()),
                    Ok(Ok(_)) => (false, format!("{p} does not contain {needle:?}")),
                    Ok(Err(e)) => (false, format!("{p}: {e}")),
                    Err(e) => (false, e.to_string()),
                };
                exact(text.into(), ok, d)
            }
            Criterion::CommandSucceeds(cmd) => {
                let (ok, d) = match self.shell(&cmd).await {
                    Ok(o) if o.exit_code == Some(0) => (true, "exit 0".into()),
                    Ok(o) => (
                        false,
                        format!("exit {:?}{}", o.exit_code, last_line(&o.stdout, &o.stderr)),
                    ),
                    Err(e) => (false, e.to_string()),
                };
                exact(text.into(), ok, d)
            }
            Criterion::OutputContains(needle) => {
                let ok = out.stdout.contains(&needle);
                let d = if ok {
                    "found".into()
                } else {
                    format!("output does not contain {needle:?}")
                };
                exact(text.into(), ok, d)
            }
            Criterion::FreeText(t) => {
                let (quality, hints, found, total) = pre_analysis(self.cwd, &t);
                Check {
                    criterion: t,
                    passed: None,
                    quality,
                    detail: format!("free text; {found}/{total} keywords found in the sandbox"),
                    hints,
                }
            }
        }
    }
}

fn exact(criterion: String, passed: bool, detail: String) -> Check {
    Check {
        criterion,
        passed: Some(passed),
        quality: if passed {
            MatchQuality::Exact
        } else {
            MatchQuality::None
        },
        detail,
        hints: Vec::new(),
    }
}

fn last_line(stdout: &str, stderr: &str) -> String {
    let l = stderr
        .lines()
        .rev()
        .chain(stdout.lines().rev())
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    if l.is_empty() {
        String::new()
    } else {
        format!(": {}", l.chars().take(200).collect::<String>())
    }
}

/// Why a helper's verification command does not count (a verdict on the
/// criterion, not a failure of the pipeline).
#[derive(Debug, thiserror::Error)]
pub enum NotVerified {
    /// It exits non-zero in the working directory (with its last line).
    #[error("exit {code:?}{last}")]
    Exit { code: Option<i32>, last: String },
    /// It could not be run.
    #[error(transparent)]
    Start(#[from] crate::proc::ProcError),
    /// It also exits 0 in an empty folder.
    #[error("it succeeds without the code too, so it proves nothing")]
    ProvesNothing,
}

/// Why a reply's `output` does not match the task's expected JSON schema
/// (a verdict in the validation report).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaMismatch {
    #[error("expected_json_schema is not an object of field: type")]
    NotASchema,
    #[error("the reply has no \"output\" object")]
    NoOutput,
    #[error("output.{0} is missing")]
    Missing(String),
    #[error("output.{name} is not a {ty} (it is {value})")]
    WrongType {
        name: String,
        ty: String,
        value: String,
    },
    #[error("output.{0} is not in the schema")]
    Extra(String),
}

/// Seed 003's JSON schema rule: a map of field → type name; every field
/// present with its type, and no other field.
pub fn check_schema(schema: &Value, output: Option<&Value>) -> Result<(), SchemaMismatch> {
    let Some(fields) = schema.as_object() else {
        return Err(SchemaMismatch::NotASchema);
    };
    let Some(obj) = output.and_then(Value::as_object) else {
        return Err(SchemaMismatch::NoOutput);
    };
    for (name, ty) in fields {
        let ty = ty.as_str().unwrap_or("any");
        let Some(v) = obj.get(name) else {
            return Err(SchemaMismatch::Missing(name.clone()));
        };
        let ok = match ty {
            "string" => v.is_string(),
            "number" => v.is_number(),
            "integer" => v.is_i64() || v.is_u64(),
            "boolean" => v.is_boolean(),
            "array" => v.is_array(),
            "object" => v.is_object(),
            "null" => v.is_null(),
            _ => true,
        };
        if !ok {
            return Err(SchemaMismatch::WrongType {
                name: name.clone(),
                ty: ty.to_string(),
                value: v.to_string(),
            });
        }
    }
    if let Some(extra) = obj.keys().find(|k| !fields.contains_key(*k)) {
        return Err(SchemaMismatch::Extra(extra.clone()));
    }
    Ok(())
}

const STOP: [&str; 24] = [
    "this", "that", "with", "from", "have", "should", "must", "will", "when", "there", "their",
    "which", "into", "each", "every", "been", "they", "them", "also", "than", "then", "only",
    "some", "such",
];

/// The files under `cwd` (not in `.git` or `.xo`), at most `limit`.
fn files_under(cwd: &Path, limit: usize) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![cwd.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in rd.flatten() {
            let name = e.file_name();
            if name == ".git" || name == ".xo" {
                continue;
            }
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() {
                stack.push(e.path());
            } else if ft.is_file() {
                out.push(e.path());
                if out.len() >= limit {
                    return out;
                }
            }
        }
    }
    out
}

/// Seed 003's code discovery for the helper agent: the files under `cwd`
/// (not `.git` or `.xo`), relative, sorted, at most `limit`.
pub fn code_discovery(cwd: &Path, limit: usize) -> Vec<String> {
    let mut out: Vec<String> = files_under(cwd, limit)
        .iter()
        .filter_map(|p| p.strip_prefix(cwd).ok())
        .map(|p| p.display().to_string())
        .collect();
    out.sort();
    out
}

/// Seed 003's pre-analysis: the criterion's keywords searched in the
/// sandbox's file names and contents (bounded), giving a match quality and
/// the most relevant files.
pub fn pre_analysis(cwd: &Path, text: &str) -> (MatchQuality, Vec<String>, usize, usize) {
    let mut words: Vec<String> = text
        .split(|c: char| !c.is_alphanumeric() && c != '_')
        .filter(|w| w.len() >= 4)
        .map(|w| w.to_lowercase())
        .filter(|w| !STOP.contains(&w.as_str()))
        .collect();
    words.sort();
    words.dedup();
    if words.is_empty() {
        return (MatchQuality::Low, Vec::new(), 0, 0);
    }
    let mut found = vec![false; words.len()];
    let mut scored: Vec<(usize, String)> = Vec::new();
    for path in files_under(cwd, 500) {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let body = match path.metadata() {
            Ok(m) if m.len() <= 256 * 1024 => std::fs::read_to_string(&path).unwrap_or_default(),
            _ => String::new(),
        }
        .to_lowercase();
        let lname = name.to_lowercase();
        let mut score = 0;
        for (i, w) in words.iter().enumerate() {
            if lname.contains(w.as_str()) || body.contains(w.as_str()) {
                found[i] = true;
                score += 1;
            }
        }
        if score > 0 {
            let rel = path
                .strip_prefix(cwd)
                .map(|p| p.display().to_string())
                .unwrap_or(name);
            scored.push((score, rel));
        }
    }
    scored.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let hits = found.iter().filter(|f| **f).count();
    let ratio = hits as f64 / words.len() as f64;
    let q = if ratio >= 0.99 {
        MatchQuality::High
    } else if ratio >= 0.5 {
        MatchQuality::Medium
    } else {
        MatchQuality::Low
    };
    (
        q,
        scored.into_iter().take(3).map(|(_, p)| p).collect(),
        hits,
        words.len(),
    )
}

/// SUP-3: the output template applied to a validated reply.
#[derive(Debug, Clone, PartialEq)]
pub struct FormattedOutput {
    pub raw: String,
    pub formatted: String,
    pub template_applied: bool,
}

/// `{status}`, `{message}`, `{task_id}` and `{output}` (the raw output) are
/// replaced, in one pass (text the agent wrote is never expanded again);
/// an empty template gives the message unchanged.
pub fn format_output(template: &str, v: &Validated, task_id: &str, raw: &str) -> FormattedOutput {
    let r = v.reply();
    if template.trim().is_empty() {
        return FormattedOutput {
            raw: raw.to_string(),
            formatted: r.message.clone(),
            template_applied: false,
        };
    }
    let formatted = xo_runtime::template::fill(
        template,
        &[
            ("{status}", r.status.as_str()),
            ("{message}", &r.message),
            ("{task_id}", task_id),
            ("{output}", raw),
        ],
    );
    FormattedOutput {
        raw: raw.to_string(),
        formatted,
        template_applied: true,
    }
}

#[cfg(test)]
mod tests;
