//! The knowledge document's format on disk (seed 001): rules, not prose.
//! A client model: the knowledge service, `xo knowledge` and the review
//! supervisors read and write documents with it. Pure text in, text out.
//!
//! ```text
//! # Error Handling Conventions
//!
//! _Last updated by: code_style, task_12_
//! _Status: established_
//! _Milestone: m1_
//! _Tags: parser, src/lexer_
//! _Uses: 3_
//!
//! ## Rules
//!
//! 1. All tool functions raise `ToolError`, never a bare `Exception`
//!
//! ## Examples
//! ...
//! ## Rationale
//! ...
//! ## Changelog
//!
//! - 2026-11-22T10:00:00.000Z code_style after task_12: created
//! ```
//!
//! A document awaiting the operator's review carries `_Needs user review: yes_`.

use crate::knowledge::{Category, ChangeEntry, DocStatus, KnowledgeDoc};

/// A document that does not parse: the file and line, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path} line {line}: {reason}")]
pub struct DocError {
    pub path: String,
    pub line: usize,
    pub reason: String,
}

/// The rules section of one document stays short (seed 001).
pub const MAX_RULES_CHARS: usize = 500;

pub fn parse(
    text: &str,
    category: Category,
    name: &str,
    path: &str,
) -> Result<KnowledgeDoc, DocError> {
    let err = |line: usize, reason: String| DocError {
        path: path.to_string(),
        line,
        reason,
    };
    let mut title = None;
    let mut status = None;
    let mut updated_by = String::new();
    let mut after_task = None;
    let mut milestone = None;
    let mut tags = Vec::new();
    let mut uses = 0u32;
    let mut needs_user_review = false;
    let mut section: Option<&str> = None;
    let mut rules = Vec::new();
    let mut examples = String::new();
    let mut rationale = String::new();
    let mut changelog = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        let line = raw.trim_end();
        if title.is_none() {
            if line.trim().is_empty() {
                continue;
            }
            match line.strip_prefix("# ") {
                Some(t) if !t.trim().is_empty() => {
                    title = Some(t.trim().to_string());
                    continue;
                }
                _ => {
                    return Err(err(
                        n,
                        "the document must start with a `# Title` line".into(),
                    ));
                }
            }
        }
        if let Some(h) = line.strip_prefix("## ") {
            section = Some(match h.trim() {
                "Rules" => "rules",
                "Examples" => "examples",
                "Rationale" => "rationale",
                "Changelog" => "changelog",
                other => {
                    return Err(err(
                        n,
                        format!(
                            "unknown section {other:?} (Rules, Examples, Rationale, Changelog)"
                        ),
                    ));
                }
            });
            continue;
        }
        match section {
            None => {
                let t = line.trim();
                if t.is_empty() {
                    continue;
                }
                let Some(meta) = t.strip_prefix('_').and_then(|m| m.strip_suffix('_')) else {
                    return Err(err(
                        n,
                        format!("expected `_Key: value_` metadata or a `## ` section, found {t:?}"),
                    ));
                };
                let Some((k, v)) = meta.split_once(':') else {
                    return Err(err(n, format!("metadata {t:?} has no `:`")));
                };
                let v = v.trim();
                match k.trim() {
                    "Last updated by" => {
                        let (who, task) = match v.split_once(',') {
                            Some((w, t)) => (w.trim(), Some(t.trim().to_string())),
                            None => (v, None),
                        };
                        updated_by = who.to_string();
                        after_task = task.filter(|t| !t.is_empty());
                    }
                    "Status" => {
                        status = Some(match v {
                            "provisional" => DocStatus::Provisional,
                            "established" => DocStatus::Established,
                            "deprecated" => DocStatus::Deprecated,
                            other => {
                                return Err(err(
                                    n,
                                    format!(
                                        "status {other:?} is not provisional, established or deprecated"
                                    ),
                                ));
                            }
                        })
                    }
                    "Milestone" => milestone = Some(v.to_string()).filter(|m| !m.is_empty()),
                    "Tags" => {
                        tags = v
                            .split(',')
                            .map(|t| t.trim().to_string())
                            .filter(|t| !t.is_empty())
                            .collect()
                    }
                    "Uses" => {
                        uses = v
                            .parse()
                            .map_err(|_| err(n, format!("uses {v:?} is not a number")))?
                    }
                    "Needs user review" => {
                        needs_user_review = match v {
                            "yes" => true,
                            "no" => false,
                            _ => {
                                return Err(err(
                                    n,
                                    format!("needs user review {v:?} is not yes or no"),
                                ));
                            }
                        }
                    }
                    other => return Err(err(n, format!("unknown metadata {other:?}"))),
                }
            }
            Some("rules") => {
                let t = line.trim();
                if t.is_empty() {
                    continue;
                }
                let item = t.strip_prefix("- ").or_else(|| {
                    t.split_once(". ")
                        .filter(|(d, _)| d.chars().all(|c| c.is_ascii_digit()))
                        .map(|(_, r)| r)
                });
                match item {
                    Some(r) => rules.push(r.trim().to_string()),
                    None => match rules.last_mut() {
                        // A continuation line of the rule above.
                        Some(last) if raw.starts_with(' ') => {
                            last.push(' ');
                            last.push_str(t);
                        }
                        _ => {
                            return Err(err(
                                n,
                                format!("a rule must be a list item (`1. ` or `- `), found {t:?}"),
                            ));
                        }
                    },
                }
            }
            Some("examples") => {
                examples.push_str(raw);
                examples.push('\n');
            }
            Some("rationale") => {
                rationale.push_str(raw);
                rationale.push('\n');
            }
            Some(_) => {
                let t = line.trim();
                if t.is_empty() {
                    continue;
                }
                let Some(entry) = t.strip_prefix("- ") else {
                    return Err(err(
                        n,
                        format!("a changelog line must start with `- `, found {t:?}"),
                    ));
                };
                let grammar = || {
                    err(
                        n,
                        "a changelog line is `- <time> <who>[ after <task>]: <what>`".into(),
                    )
                };
                // The time is the first word; the rest is `<who>…: <what>`
                // (`: <what>` when no one is named, as `render` writes it).
                // A time glued to the colon (`<time>: <what>`) names no one.
                let (first, rest) = entry.split_once(' ').ok_or_else(grammar)?;
                let (at, head, what) = match rest.split_once(": ") {
                    Some((head, what)) => (first, head, what),
                    None => match first.strip_suffix(':') {
                        Some(at) => (at, "", rest),
                        None => return Err(grammar()),
                    },
                };
                let at = at.to_string();
                let (by, task) = match head.split_once(" after ") {
                    Some((b, t)) => (b.to_string(), Some(t.to_string())),
                    None => (head.to_string(), None),
                };
                changelog.push(ChangeEntry {
                    at,
                    by,
                    task,
                    what: what.to_string(),
                });
            }
        }
    }
    let title = title.ok_or_else(|| err(1, "the document is empty".into()))?;
    let status = status.ok_or_else(|| err(1, "no `_Status: ..._` line".into()))?;
    if rules.is_empty() {
        return Err(err(
            text.lines().count().max(1),
            "no rules: a document needs a `## Rules` list".into(),
        ));
    }
    Ok(KnowledgeDoc {
        category,
        name: name.to_string(),
        title,
        status,
        updated_by,
        after_task,
        milestone,
        tags,
        uses,
        needs_user_review,
        rules,
        examples: examples.trim().to_string(),
        rationale: rationale.trim().to_string(),
        changelog,
    })
}

pub fn render(d: &KnowledgeDoc) -> String {
    let mut s = format!("# {}\n\n", d.title);
    match &d.after_task {
        Some(t) => s.push_str(&format!("_Last updated by: {}, {t}_\n", d.updated_by)),
        None => s.push_str(&format!("_Last updated by: {}_\n", d.updated_by)),
    }
    s.push_str(&format!("_Status: {}_\n", d.status.as_str()));
    if let Some(m) = &d.milestone {
        s.push_str(&format!("_Milestone: {m}_\n"));
    }
    if !d.tags.is_empty() {
        s.push_str(&format!("_Tags: {}_\n", d.tags.join(", ")));
    }
    if d.needs_user_review {
        s.push_str("_Needs user review: yes_\n");
    }
    s.push_str(&format!("_Uses: {}_\n\n## Rules\n\n", d.uses));
    for (i, r) in d.rules.iter().enumerate() {
        s.push_str(&format!("{}. {r}\n", i + 1));
    }
    if !d.examples.is_empty() {
        s.push_str(&format!("\n## Examples\n\n{}\n", d.examples));
    }
    if !d.rationale.is_empty() {
        s.push_str(&format!("\n## Rationale\n\n{}\n", d.rationale));
    }
    if !d.changelog.is_empty() {
        s.push_str("\n## Changelog\n\n");
        for c in &d.changelog {
            match &c.task {
                Some(t) => s.push_str(&format!("- {} {} after {t}: {}\n", c.at, c.by, c.what)),
                None => s.push_str(&format!("- {} {}: {}\n", c.at, c.by, c.what)),
            }
        }
    }
    s
}

/// Why a document is refused by [`check`]; each case names the document.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidDoc {
    #[error(transparent)]
    Name(#[from] crate::InvalidToken),
    #[error("{id}: the title must be one non-empty line")]
    Title { id: String },
    #[error("{id}: a document needs at least one rule")]
    NoRules { id: String },
    #[error("{id}: rule {rule:?} must be one non-empty line")]
    Rule { id: String, rule: String },
    #[error(
        "{id}: the rules are {chars} characters, at most {MAX_RULES_CHARS} (one concern per document)"
    )]
    RulesTooLong { id: String, chars: usize },
    #[error("{id}: examples and rationale may not contain headings")]
    Heading { id: String },
}

/// Checks what a writer may not get wrong: a one-token name, a title, rules
/// within the length limit.
pub fn check(d: &KnowledgeDoc) -> Result<(), InvalidDoc> {
    crate::validate_token("document name", &d.name)?;
    let id = || d.id();
    if d.title.trim().is_empty() || d.title.contains('\n') {
        return Err(InvalidDoc::Title { id: id() });
    }
    if d.rules.is_empty() {
        return Err(InvalidDoc::NoRules { id: id() });
    }
    if let Some(r) = d
        .rules
        .iter()
        .find(|r| r.trim().is_empty() || r.contains('\n'))
    {
        return Err(InvalidDoc::Rule {
            id: id(),
            rule: r.clone(),
        });
    }
    let chars: usize = d.rules.iter().map(|r| r.chars().count()).sum();
    if chars > MAX_RULES_CHARS {
        return Err(InvalidDoc::RulesTooLong { id: id(), chars });
    }
    for text in [&d.examples, &d.rationale] {
        if text
            .lines()
            .any(|l| l.starts_with("## ") || l.starts_with("# "))
        {
            return Err(InvalidDoc::Heading { id: id() });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A changelog line renders as it parses, whoever it names: no one
    /// (`<time> : <what>`), or a time glued to its colon (found by the fuzz
    /// test: `10:00:: created` read back as another time).
    #[test]
    fn a_changelog_line_renders_as_it_parses() {
        for (line, at, by, what) in [
            (
                "- 2026-11-22T10:00:00Z qa after t1: created",
                "2026-11-22T10:00:00Z",
                "qa",
                "created",
            ),
            (
                "- 2026-11-22T10:00:00Z : created",
                "2026-11-22T10:00:00Z",
                "",
                "created",
            ),
            (
                "- 2026-11-22T10:00:00Z: created",
                "2026-11-22T10:00:00Z",
                "",
                "created",
            ),
            (
                "- 2026-11-22T10:00:: created",
                "2026-11-22T10:00:",
                "",
                "created",
            ),
            (
                "- 2026-11-22T10:00: : created: twice",
                "2026-11-22T10:00:",
                "",
                "created: twice",
            ),
        ] {
            let doc = format!(
                "# T\n\n_Last updated by: qa_\n_Status: established_\n\n## Rules\n\n1. R\n\n## Changelog\n\n{line}\n"
            );
            let d = parse(&doc, Category::Conventions, "t", "t.md").unwrap();
            let c = &d.changelog[0];
            assert_eq!(
                (c.at.as_str(), c.by.as_str(), c.what.as_str()),
                (at, by, what),
                "{line}"
            );
            let again = parse(&render(&d), Category::Conventions, "t", "t.md").unwrap();
            assert_eq!(again, d, "{line}");
        }
        for bad in ["- created", "- 2026-11-22T10:00 created"] {
            let doc = format!(
                "# T\n\n_Last updated by: qa_\n_Status: established_\n\n## Rules\n\n1. R\n\n## Changelog\n\n{bad}\n"
            );
            assert!(
                parse(&doc, Category::Conventions, "t", "t.md").is_err(),
                "{bad}"
            );
        }
    }

    const DOC: &str = "# Error Handling Conventions\n\n_Last updated by: code_style, task_12_\n_Status: established_\n_Uses: 3_\n\n## Rules\n\n1. Tools raise `ToolError`, never a bare `Exception`\n2. Agents never swallow errors\n   silently\n\n## Examples\n\nGood:\n  raise ToolError(\"x\")\n\n## Rationale\n\nQA diagnoses from summaries.\n\n## Changelog\n\n- 2026-11-22T10:00:00.000Z code_style after task_12: created\n";

    #[test]
    fn round_trip() {
        let d = parse(
            DOC,
            Category::Conventions,
            "errors",
            "conventions/errors.md",
        )
        .unwrap();
        assert_eq!(d.title, "Error Handling Conventions");
        assert_eq!(d.status, DocStatus::Established);
        assert_eq!(d.updated_by, "code_style");
        assert_eq!(d.after_task.as_deref(), Some("task_12"));
        assert_eq!(d.uses, 3);
        assert_eq!(d.rules.len(), 2);
        assert_eq!(d.rules[1], "Agents never swallow errors silently");
        assert!(d.examples.contains("raise ToolError"));
        assert_eq!(d.changelog[0].task.as_deref(), Some("task_12"));
        let again = parse(&render(&d), Category::Conventions, "errors", "x").unwrap();
        assert_eq!(again, d);
    }

    #[test]
    fn a_document_awaiting_review_says_so_and_round_trips() {
        let text = DOC.replace("_Uses: 3_", "_Needs user review: yes_\n_Uses: 3_");
        let d = parse(&text, Category::Conventions, "errors", "x.md").unwrap();
        assert!(d.needs_user_review);
        assert!(render(&d).contains("_Needs user review: yes_"));
        assert_eq!(
            parse(&render(&d), Category::Conventions, "errors", "x.md").unwrap(),
            d
        );
        let plain = parse(DOC, Category::Conventions, "errors", "x.md").unwrap();
        assert!(!plain.needs_user_review && !render(&plain).contains("Needs user review"));
        let bad = DOC.replace("_Uses: 3_", "_Needs user review: maybe_\n_Uses: 3_");
        let e = parse(&bad, Category::Conventions, "errors", "x.md")
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"maybe\" is not yes or no"), "{e}");
    }

    #[test]
    fn errors_name_the_line() {
        let e = |t: &str| {
            parse(t, Category::Design, "d", "design/d.md")
                .unwrap_err()
                .to_string()
        };
        assert!(e("no title\n").contains("design/d.md line 1"));
        let bad_status = DOC.replace("established", "maybe");
        assert!(e(&bad_status).contains("line 4") && e(&bad_status).contains("\"maybe\""));
        let bad_section = DOC.replace("## Examples", "## Notes");
        assert!(e(&bad_section).contains("unknown section \"Notes\""));
        let bad_rule = DOC.replace("1. Tools", "Tools");
        assert!(e(&bad_rule).contains("line 9"), "{}", e(&bad_rule));
        assert!(e("# T\n_Status: provisional_\n").contains("no rules"));
    }

    #[test]
    fn checks() {
        let mut d = parse(DOC, Category::Conventions, "errors", "x").unwrap();
        assert!(check(&d).is_ok());
        d.rules = vec!["x".repeat(501)];
        assert!(check(&d).unwrap_err().to_string().contains("at most 500"));
        d.rules = vec!["ok".into()];
        d.name = "../evil".into();
        assert!(check(&d).is_err());
    }

    /// Each refusal is its own case, naming the document; the words stay.
    #[test]
    fn a_refused_document_says_which_way() {
        let good = parse(DOC, Category::Conventions, "errors", "x").unwrap();
        let with = |f: &dyn Fn(&mut KnowledgeDoc)| {
            let mut d = good.clone();
            f(&mut d);
            check(&d).unwrap_err()
        };
        let id = good.id();
        assert!(matches!(
            with(&|d| d.name = "../evil".into()),
            InvalidDoc::Name(crate::InvalidToken::Char { .. })
        ));
        assert_eq!(
            with(&|d| d.title = " ".into()),
            InvalidDoc::Title { id: id.clone() }
        );
        assert_eq!(
            with(&|d| d.rules.clear()),
            InvalidDoc::NoRules { id: id.clone() }
        );
        assert_eq!(
            with(&|d| d.rules = vec!["a\nb".into()]),
            InvalidDoc::Rule {
                id: id.clone(),
                rule: "a\nb".into()
            }
        );
        let long = with(&|d| d.rules = vec!["x".repeat(501)]);
        assert_eq!(
            long,
            InvalidDoc::RulesTooLong {
                id: id.clone(),
                chars: 501
            }
        );
        assert_eq!(
            long.to_string(),
            format!("{id}: the rules are 501 characters, at most 500 (one concern per document)")
        );
        assert_eq!(
            with(&|d| d.rationale = "# heading".into()),
            InvalidDoc::Heading { id }
        );
    }
}
