//! Prompt composition (SUP-1, SUP-2). A [`ComposedPrompt`] can only be made
//! here, and a driver accepts nothing else: no prompt reaches an agent
//! without the templates, the task and the reply format, in this order:
//!
//! global template, project template, role template, knowledge, active
//! directives, the task (with a minimal state snapshot and task-type
//! guidelines), feedback of a retry, then the required reply format.

use serde::Serialize;
use xo_proto::queue::{ReplayMark, Task};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum PromptKind {
    Prompt,
    FixPrompt,
    ClarificationPrompt,
    InterrogationPrompt,
    HelperPrompt,
}

impl PromptKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Prompt => "PROMPT",
            Self::FixPrompt => "FIX_PROMPT",
            Self::ClarificationPrompt => "CLARIFICATION_PROMPT",
            Self::InterrogationPrompt => "INTERROGATION_PROMPT",
            Self::HelperPrompt => "HELPER_PROMPT",
        }
    }
}

/// The sections of a prompt, in their only order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Section {
    Steering,
    Global,
    Project,
    Role,
    Knowledge,
    Directives,
    Task,
    Feedback,
    ReplyFormat,
}

/// A prompt made by [`compose`]. Its fields are private and it has no other
/// constructor, so holding one proves composition happened.
#[derive(Debug, Clone, PartialEq)]
pub struct ComposedPrompt {
    kind: PromptKind,
    task_id: String,
    sections: Vec<(Section, String)>,
    text: String,
}

impl ComposedPrompt {
    pub fn kind(&self) -> PromptKind {
        self.kind
    }
    pub fn task_id(&self) -> &str {
        &self.task_id
    }
    /// The full prompt text.
    pub fn text(&self) -> &str {
        &self.text
    }
    /// Every section, empty ones included, in order.
    pub fn sections(&self) -> &[(Section, String)] {
        &self.sections
    }
    pub fn section(&self, s: Section) -> Option<&str> {
        self.sections
            .iter()
            .find(|(k, _)| *k == s)
            .map(|(_, t)| t.as_str())
    }

    /// The same prompt with the XO's steering put in front (the command
    /// driver's way of applying steering before the agent's next step).
    pub fn with_steering(&self, messages: &[String]) -> ComposedPrompt {
        if messages.is_empty() {
            return self.clone();
        }
        let mut sections = vec![(Section::Steering, steering_section(messages))];
        sections.extend(
            self.sections
                .iter()
                .filter(|(k, _)| *k != Section::Steering)
                .cloned(),
        );
        Self::assemble(self.kind, self.task_id.clone(), sections)
    }

    fn assemble(kind: PromptKind, task_id: String, sections: Vec<(Section, String)>) -> Self {
        let cap = sections.iter().map(|(_, t)| t.len() + 2).sum();
        let mut text = String::with_capacity(cap);
        for (_, t) in &sections {
            let t = t.trim_end();
            if t.is_empty() {
                continue;
            }
            if !text.is_empty() {
                text.push_str("\n\n");
            }
            text.push_str(t);
        }
        text.push('\n');
        Self {
            kind,
            task_id,
            sections,
            text,
        }
    }
}

/// The steering section put in front of a prompt.
pub fn steering_section(messages: &[String]) -> String {
    let mut s = String::from("## SUPERVISOR STEERING\nAct on this before anything else:\n");
    for m in messages {
        s.push_str("- ");
        s.push_str(m);
        s.push('\n');
    }
    s
}

/// The three template layers (SUP-2, SUP-4, SUP-5).
#[derive(Debug, Clone, Copy, Default)]
pub struct Templates<'a> {
    pub global: &'a str,
    pub project: &'a str,
    pub role: &'a str,
}

/// Seed 003's minimal state snapshot: only what the task needs.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Snapshot {
    pub project_id: String,
    pub sandbox_root: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub goal: Option<String>,
    pub attempt: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replay: Option<ReplayMark>,
    /// The operator's answer to this task's question.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub question: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
}

/// What the runner adds around the task.
#[derive(Debug, Clone, Default)]
pub struct Context<'a> {
    /// A `## PROJECT KNOWLEDGE` section (empty until a knowledge store answers).
    pub knowledge: &'a str,
    pub directives: &'a [String],
    pub snapshot: Snapshot,
    /// Headings the reply's message must contain (project rule).
    pub required_sections: &'a [String],
    /// Manager tasks: the task list to reconcile (seed 002), from the queue.
    pub task_list: Option<&'a str>,
}

/// Why a retry prompt is made.
#[derive(Debug, Clone, PartialEq)]
pub enum Feedback {
    /// Failed criteria; `strict` after the same failure twice.
    Fix { failures: Vec<String>, strict: bool },
    /// The agent asked a question or was ambiguous.
    Clarify { question: String },
    /// One question about one criterion (at most 4 per criterion).
    Interrogate {
        criterion: String,
        number: u32,
        hints: Vec<String>,
    },
    /// Seed 003's helper agent: the failed criteria and the files that
    /// exist (code discovery); asks for verification commands.
    Helper {
        failures: Vec<String>,
        files: Vec<String>,
    },
}

/// Seed 003's task types, each with its guidelines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskType {
    Implementation,
    Config,
    Test,
    Doc,
    Refactor,
    Fix,
}

impl TaskType {
    pub fn detect(task: &Task) -> Self {
        let text = format!("{} {}", task.intent, task.instructions).to_lowercase();
        let has = |words: &[&str]| words.iter().any(|w| text.contains(w));
        if has(&["fix", "bug", "repair", "broken"]) {
            Self::Fix
        } else if has(&["refactor", "rename", "restructure", "clean up", "cleanup"]) {
            Self::Refactor
        } else if has(&["test", "spec", "coverage"]) {
            Self::Test
        } else if has(&["readme", "document", "docs", "changelog"]) {
            Self::Doc
        } else if has(&["config", "setting", "yaml", "toml", "environment variable"]) {
            Self::Config
        } else {
            Self::Implementation
        }
    }

    pub fn guidelines(self) -> &'static str {
        match self {
            Self::Implementation => {
                "Implementation: make the smallest change that meets every criterion; keep existing behaviour; add or update tests for what you change."
            }
            Self::Config => {
                "Config: change only the settings named; keep the file's format and comments; validate the result parses."
            }
            Self::Test => {
                "Test: each test asserts behaviour that could break; run the tests and report their result."
            }
            Self::Doc => {
                "Doc: write for the reader who will use it; keep examples runnable and consistent with the code."
            }
            Self::Refactor => {
                "Refactor: behaviour must not change; run the tests before and after."
            }
            Self::Fix => {
                "Fix: reproduce the failure first, fix its cause, and show it no longer fails."
            }
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Implementation => "implementation",
            Self::Config => "config",
            Self::Test => "test",
            Self::Doc => "doc",
            Self::Refactor => "refactor",
            Self::Fix => "fix",
        }
    }
}

/// Composes a prompt. The only way to make a [`ComposedPrompt`].
pub fn compose(
    kind: PromptKind,
    templates: &Templates<'_>,
    task: &Task,
    ctx: &Context<'_>,
    feedback: Option<&Feedback>,
) -> ComposedPrompt {
    let sections = vec![
        (Section::Global, templates.global.to_string()),
        (Section::Project, templates.project.to_string()),
        (Section::Role, templates.role.to_string()),
        (Section::Knowledge, ctx.knowledge.to_string()),
        (Section::Directives, directives_section(ctx.directives)),
        (Section::Task, {
            let mut t = task_section(task, &ctx.snapshot);
            if let Some(list) = ctx
                .task_list
                .filter(|_| kind != PromptKind::InterrogationPrompt)
            {
                t.push('\n');
                t.push_str(list);
            }
            t
        }),
        (
            Section::Feedback,
            feedback.map(feedback_section).unwrap_or_default(),
        ),
        (
            Section::ReplyFormat,
            reply_format(task, kind, ctx.required_sections),
        ),
    ];
    ComposedPrompt::assemble(kind, task.task_id.clone(), sections)
}

fn directives_section(directives: &[String]) -> String {
    if directives.is_empty() {
        return String::new();
    }
    let mut s = String::from(
        "## ACTIVE DIRECTIVES\nCheck each directive below. Each directive MUST be addressed: do it, explain in your reply why it is already handled, or escalate.\n",
    );
    for d in directives {
        s.push_str("- ");
        s.push_str(d);
        s.push('\n');
    }
    s
}

fn task_section(task: &Task, snap: &Snapshot) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(512 + task.instructions.len());
    let _ = writeln!(s, "## TASK {}", task.task_id);
    let _ = writeln!(s, "Intent: {}\n", task.intent);
    let _ = writeln!(s, "Instructions:\n{}", task.instructions.trim_end());
    if !task.acceptance_criteria.is_empty() {
        s.push_str("\nAcceptance criteria (all must be met):\n");
        for (i, c) in task.acceptance_criteria.iter().enumerate() {
            let _ = writeln!(s, "{}. {c}", i + 1);
        }
    }
    if !task.required_artifacts.is_empty() {
        let _ = writeln!(
            s,
            "\nRequired artifacts: {}",
            task.required_artifacts.join(", ")
        );
    }
    if let Some(cmd) = &task.test_command {
        let must = if task.tests_required {
            " (must pass)"
        } else {
            ""
        };
        let _ = writeln!(s, "\nTest command{must}: {cmd}");
    }
    let state = serde_json::to_string(snap).unwrap_or_default();
    let _ = writeln!(s, "\n## STATE\n{state}");
    let tt = TaskType::detect(task);
    let _ = write!(s, "\n## GUIDELINES ({})\n{}", tt.name(), tt.guidelines());
    s
}

fn feedback_section(f: &Feedback) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    match f {
        Feedback::Fix { failures, strict } => {
            s.push_str("## FIX REQUIRED\nThe previous attempt failed validation:\n");
            for x in failures {
                let _ = writeln!(s, "- {x}");
            }
            if *strict {
                s.push_str("\nSTRICT MODE: the same failure happened twice. Change your approach; address each failure above one by one and verify each before replying.\n");
            }
        }
        Feedback::Clarify { question } => {
            let _ = write!(
                s,
                "## CLARIFICATION\nYou asked or hesitated: \"{question}\". Do not ask; choose the most reasonable interpretation consistent with the task, state it in your reply, and complete the task."
            );
        }
        Feedback::Interrogate {
            criterion,
            number,
            hints,
        } => {
            let _ = writeln!(
                s,
                "## INTERROGATION (question {number})\nIs this criterion met: \"{criterion}\"? Reply with status ok and a message that starts with YES or NO, followed by the evidence (the file and what in it)."
            );
            if !hints.is_empty() {
                let _ = writeln!(s, "Possibly relevant files: {}", hints.join(", "));
            }
        }
        Feedback::Helper { failures, files } => {
            s.push_str("## VALIDATION HELPER
You are the helper: the task's validation judged these criteria not met. Do not change any file. Check each against the code that exists and give, for each, one read-only shell command, run in the working directory, that exits 0 exactly when the criterion is met (a command that succeeds without the code proves nothing and is ignored).
Not met:
");
            for x in failures {
                let _ = writeln!(s, "- {x}");
            }
            s.push_str(
                "Files that exist (code discovery):
",
            );
            for f in files {
                let _ = writeln!(s, "- {f}");
            }
            s.push_str("Reply with status ok and an output object: {\"checks\": [{\"criterion\": \"<as written above>\", \"command\": \"<shell command>\"}]}.\n");
        }
    }
    s
}

fn reply_format(task: &Task, kind: PromptKind, required: &[String]) -> String {
    let mut s = String::from(
        "## REPLY FORMAT\nEnd your reply with exactly one JSON object, on its own:\n{\"status\": \"ok\" | \"blocked\" | \"error\" | \"escalate\", \"message\": \"<summary of what you did>\"",
    );
    if task.role == xo_proto::queue::MANAGER_ROLE && kind != PromptKind::InterrogationPrompt {
        s.push_str(", \"next_task\": \"<task id>\" | null, \"keep\": [<ids of pending tasks kept as they are>], \"tasks\": [<new and changed pending tasks>]");
    }
    if kind == PromptKind::HelperPrompt {
        s.push_str(", \"output\": {\"checks\": [{\"criterion\": \"...\", \"command\": \"...\"}]}");
    } else if task.expected_json_schema.is_some() && kind != PromptKind::InterrogationPrompt {
        s.push_str(", \"output\": {<fields of the expected schema>}");
    }
    s.push_str("}\nok: done; blocked: you cannot proceed (say why); error: you failed; escalate: a human must decide.");
    if let Some(schema) = &task.expected_json_schema {
        s.push_str("\nExpected output schema: ");
        s.push_str(&schema.to_string());
    }
    if !required.is_empty() {
        s.push_str("\nYour message must contain these headings: ");
        s.push_str(&required.join(", "));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_is_fixed_and_empty_sections_keep_it() {
        let mut task = Task::new("t1", "add a greeting", "write hello.txt", "coder");
        task.acceptance_criteria = vec!["file exists: hello.txt".into()];
        let t = Templates {
            global: "GLOBAL-T",
            project: "PROJECT-T",
            role: "ROLE-T",
        };
        let dirs = vec!["DIRECTIVE-1".to_string()];
        let ctx = Context {
            task_list: None,
            knowledge: "## PROJECT KNOWLEDGE\nKNOW-1",
            directives: &dirs,
            snapshot: Snapshot {
                project_id: "p".into(),
                ..Default::default()
            },
            required_sections: &[],
        };
        let p = compose(PromptKind::Prompt, &t, &task, &ctx, None);
        let text = p.text();
        let pos: Vec<usize> = [
            "GLOBAL-T",
            "PROJECT-T",
            "ROLE-T",
            "KNOW-1",
            "## ACTIVE DIRECTIVES",
            "DIRECTIVE-1",
            "## TASK t1",
            "write hello.txt",
            "1. file exists: hello.txt",
            "## STATE",
            "## GUIDELINES",
            "## REPLY FORMAT",
        ]
        .iter()
        .map(|m| {
            text.find(m)
                .unwrap_or_else(|| panic!("{m} missing in {text}"))
        })
        .collect();
        assert!(pos.windows(2).all(|w| w[0] < w[1]), "{pos:?}\n{text}");
        let kinds: Vec<Section> = p.sections().iter().map(|(k, _)| *k).collect();
        assert!(kinds.windows(2).all(|w| w[0] < w[1]));
        // Empty templates are allowed; the order of the rest is kept.
        let p = compose(
            PromptKind::Prompt,
            &Templates {
                global: "",
                project: "PROJECT-T",
                role: "",
            },
            &task,
            &Context::default(),
            None,
        );
        assert!(
            p.text().starts_with("PROJECT-T\n\n## TASK t1"),
            "{}",
            p.text()
        );
        assert_eq!(p.sections().len(), 8);
    }

    #[test]
    fn retry_prompts_carry_feedback_before_the_reply_format() {
        let task = Task::new("t2", "fix the parser", "it crashes", "coder");
        assert_eq!(TaskType::detect(&task), TaskType::Fix);
        let f = Feedback::Fix {
            failures: vec!["file exists: out.txt: missing".into()],
            strict: true,
        };
        let p = compose(
            PromptKind::FixPrompt,
            &Templates::default(),
            &task,
            &Context::default(),
            Some(&f),
        );
        let t = p.text();
        assert!(t.find("STRICT MODE").unwrap() < t.find("## REPLY FORMAT").unwrap());
        assert!(t.find("## TASK").unwrap() < t.find("## FIX REQUIRED").unwrap());
        let s = p.with_steering(&["[SUPERVISOR] Loop detected.".into()]);
        assert!(s.text().starts_with("## SUPERVISOR STEERING"));
        assert_eq!(s.kind(), PromptKind::FixPrompt);
        assert!(s.text().ends_with(p.text()), "steering only prepends");
    }

    #[test]
    fn manager_and_schema_replies_ask_for_their_fields() {
        let mut task = Task::new("m", "reconcile", "x", "manager");
        task.expected_json_schema = Some(serde_json::json!({"count": "number"}));
        let p = compose(
            PromptKind::Prompt,
            &Templates::default(),
            &task,
            &Context::default(),
            None,
        );
        let rf = p.section(Section::ReplyFormat).unwrap();
        assert!(
            rf.contains("next_task") && rf.contains("\"output\""),
            "{rf}"
        );
    }
}
