//! What a reviewer may answer (seed 001's output schemas), validated
//! strictly: a reply with an unknown field, a missing one or an over-long
//! rule is discarded, never half applied. The model never supplies ids,
//! sources or times; those are added when findings are applied.

use std::collections::BTreeSet;

use serde::Deserialize;
use xo_proto::knowledge::*;

use crate::schedule::Reviewer;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DirectiveOut {
    #[serde(rename = "type")]
    pub kind: DirectiveType,
    pub description: String,
    #[serde(default)]
    pub rationale: String,
    pub priority: DirectivePriority,
    #[serde(default)]
    pub files: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DocOut {
    pub name: String,
    pub title: String,
    pub rules: Vec<String>,
    #[serde(default)]
    pub examples: String,
    #[serde(default)]
    pub rationale: String,
    #[serde(default)]
    pub milestone: Option<String>,
    /// The internaliser asked for the operator's confirmation (not a field
    /// of the other reviewers' documents).
    #[serde(skip)]
    pub needs_user_review: bool,
}

impl DocOut {
    /// The document as the knowledge store takes it: provisional, with no
    /// author or history yet (the store adds them).
    pub fn to_doc(&self, category: Category) -> KnowledgeDoc {
        KnowledgeDoc {
            tags: Vec::new(),
            category,
            name: self.name.clone(),
            title: self.title.clone(),
            status: DocStatus::Provisional,
            updated_by: String::new(),
            after_task: None,
            milestone: self.milestone.clone(),
            uses: 0,
            needs_user_review: self.needs_user_review,
            rules: self.rules.clone(),
            examples: self.examples.clone(),
            rationale: self.rationale.clone(),
            changelog: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CodeStyleOut {
    pub conventions_updated: Vec<String>,
    pub documents: Vec<DocOut>,
    pub directives: Vec<DirectiveOut>,
    pub summary: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DesignOut {
    pub design_updates: Vec<String>,
    pub documents: Vec<DocOut>,
    pub directives: Vec<DirectiveOut>,
    pub summary: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ItemCategory {
    Lesson,
    Domain,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KnowledgeItem {
    pub category: ItemCategory,
    pub content: String,
    #[serde(default)]
    pub source_task: Option<String>,
    pub confidence: String,
    #[serde(default)]
    pub needs_user_review: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InternaliserOut {
    pub knowledge_items: Vec<KnowledgeItem>,
    pub summary: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Aligned,
    MinorDrift,
    MajorDrift,
}

impl Verdict {
    /// The wire name, as the run log records it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Aligned => "aligned",
            Self::MinorDrift => "minor_drift",
            Self::MajorDrift => "major_drift",
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AssessorOut {
    pub verdict: Verdict,
    pub summary: String,
    #[serde(default)]
    pub evidence: Vec<String>,
}

/// A reviewer's validated findings.
#[derive(Debug, Clone)]
pub struct Findings {
    pub documents: Vec<(Category, DocOut)>,
    pub directives: Vec<DirectiveOut>,
    pub verdict: Option<Verdict>,
    pub summary: String,
}

impl Findings {
    /// What is compared between runs for convergence.
    pub fn keys(&self) -> BTreeSet<String> {
        self.documents
            .iter()
            .map(|(c, d)| format!("doc:{}/{}", c.as_str(), d.name))
            .chain(
                self.directives
                    .iter()
                    .map(|d| format!("dir:{}", d.description.to_lowercase())),
            )
            .collect()
    }
}

/// Why a reviewer's reply is discarded as a whole.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadFindings {
    /// The `output` is not the reviewer's schema (serde's words).
    #[error("{reviewer} reply does not match its schema: {reason}")]
    Schema {
        reviewer: &'static str,
        reason: String,
    },
    /// A directive's text is over the limit.
    #[error("{what} is {len} characters, at most {MAX_DIRECTIVE_CHARS}")]
    TooLong { what: &'static str, len: usize },
    #[error("a directive has an empty description")]
    EmptyDirective,
}

/// The longest directive description or rationale a reviewer may write.
pub const MAX_DIRECTIVE_CHARS: usize = 200;

fn check_len(what: &'static str, s: &str) -> Result<(), BadFindings> {
    let n = s.chars().count();
    if n > MAX_DIRECTIVE_CHARS {
        return Err(BadFindings::TooLong { what, len: n });
    }
    Ok(())
}

fn slug(text: &str) -> String {
    let s: String = text
        .to_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let words: Vec<&str> = s.split('-').filter(|w| !w.is_empty()).take(6).collect();
    let s = words.join("-");
    if s.is_empty() { "item".into() } else { s }
}

/// The findings of a reviewer that writes documents into its own folder.
fn documents_and_directives(
    c: Category,
    documents: Vec<DocOut>,
    directives: Vec<DirectiveOut>,
    summary: String,
) -> Findings {
    Findings {
        documents: documents.into_iter().map(|d| (c, d)).collect(),
        directives,
        verdict: None,
        summary,
    }
}

/// Validates a reviewer's `output` against its schema; any error discards
/// the whole reply.
pub fn parse_findings(r: Reviewer, output: &serde_json::Value) -> Result<Findings, BadFindings> {
    let de = |e: serde_json::Error| BadFindings::Schema {
        reviewer: r.name(),
        reason: e.to_string(),
    };
    let check_dirs = |ds: &[DirectiveOut]| -> Result<(), BadFindings> {
        for d in ds {
            check_len("directive description", &d.description)?;
            check_len("directive rationale", &d.rationale)?;
            if d.description.trim().is_empty() {
                return Err(BadFindings::EmptyDirective);
            }
        }
        Ok(())
    };
    Ok(match r {
        Reviewer::CodeStyle => {
            let o: CodeStyleOut = serde_json::from_value(output.clone()).map_err(de)?;
            check_dirs(&o.directives)?;
            documents_and_directives(Category::Conventions, o.documents, o.directives, o.summary)
        }
        Reviewer::Design => {
            let o: DesignOut = serde_json::from_value(output.clone()).map_err(de)?;
            check_dirs(&o.directives)?;
            documents_and_directives(Category::Design, o.documents, o.directives, o.summary)
        }
        Reviewer::Internaliser => {
            let o: InternaliserOut = serde_json::from_value(output.clone()).map_err(de)?;
            let documents = o
                .knowledge_items
                .into_iter()
                .filter(|i| !i.content.trim().is_empty())
                .map(|i| {
                    let c = match i.category {
                        ItemCategory::Lesson => Category::Lessons,
                        ItemCategory::Domain => Category::Domain,
                    };
                    let title: String = i.content.chars().take(60).collect();
                    let mut rationale = format!("confidence: {}", i.confidence);
                    if let Some(t) = &i.source_task {
                        rationale.push_str(&format!("; from task {t}"));
                    }
                    (
                        c,
                        DocOut {
                            name: slug(&i.content),
                            title,
                            rules: vec![i.content.replace('\n', " ")],
                            examples: String::new(),
                            rationale,
                            milestone: None,
                            needs_user_review: i.needs_user_review,
                        },
                    )
                })
                .collect();
            Findings {
                documents,
                directives: Vec::new(),
                verdict: None,
                summary: o.summary,
            }
        }
        Reviewer::Assessor => {
            let o: AssessorOut = serde_json::from_value(output.clone()).map_err(de)?;
            Findings {
                documents: Vec::new(),
                directives: Vec::new(),
                verdict: Some(o.verdict),
                summary: o.summary,
            }
        }
    })
}

pub fn flat_schema(r: Reviewer) -> serde_json::Value {
    match r {
        Reviewer::CodeStyle => {
            serde_json::json!({"conventions_updated": "array", "documents": "array", "directives": "array", "summary": "string"})
        }
        Reviewer::Design => {
            serde_json::json!({"design_updates": "array", "documents": "array", "directives": "array", "summary": "string"})
        }
        Reviewer::Internaliser => {
            serde_json::json!({"knowledge_items": "array", "summary": "string"})
        }
        Reviewer::Assessor => {
            serde_json::json!({"verdict": "string", "summary": "string", "evidence": "array"})
        }
    }
}

pub fn remit(r: Reviewer) -> &'static str {
    match r {
        Reviewer::CodeStyle => {
            "You are the code style supervisor. Read the files the recent tasks changed and compare them with the conventions. If no convention exists for a pattern, establish one (a document). If code does not match a convention, write a cleanup directive. If it matches, do nothing. You own conventions/ only. Each document: name (one token), title, rules (short imperative rules, at most 500 characters in all), examples, rationale. Reply output: {\"conventions_updated\": [names], \"documents\": [documents], \"directives\": [{\"type\": \"cleanup\"|\"functional\", \"description\": \"<= 200 chars\", \"rationale\": \"<= 200 chars\", \"priority\": \"critical\"|\"normal\"|\"low\", \"files\": [..]}], \"summary\": \"...\"}."
        }
        Reviewer::Design => {
            "You are the design supervisor. Compare the design documents with what has been built. Decide whether a divergence means the implementation or the design is wrong. Update design documents that are outdated; write a functional directive when the approach must change. You own design/ only. Reply output: {\"design_updates\": [names], \"documents\": [documents with name, title, rules, examples, rationale, milestone], \"directives\": [...], \"summary\": \"...\"}."
        }
        Reviewer::Internaliser => {
            "You are the internaliser. From the recent plans, results and validation feedback, capture anything novel: a discovered pattern, a surprising library behaviour, an implicit design decision. Capture facts, never prescribe. Reply output: {\"knowledge_items\": [{\"category\": \"lesson\"|\"domain\", \"content\": \"...\", \"source_task\": \"<task id>\", \"confidence\": \"high\"|\"medium\"|\"low\", \"needs_user_review\": false}], \"summary\": \"...\"}."
        }
        Reviewer::Assessor => {
            "You are the assessor. Judge whether the work done so far is aligned with the goal, using the reviewers' run log as evidence of drift. Reply output: {\"verdict\": \"aligned\"|\"minor_drift\"|\"major_drift\", \"summary\": \"...\", \"evidence\": [\"...\"]}. major_drift halts the queue for the operator."
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_are_validated_strictly() {
        let ok = serde_json::json!({"conventions_updated": ["errors"], "documents": [{"name": "errors", "title": "Errors", "rules": ["raise ToolError"]}],
            "directives": [{"type": "cleanup", "description": "standardise errors", "rationale": "consistency", "priority": "low", "files": ["a.rs"]}], "summary": "1 fix"});
        let f = parse_findings(Reviewer::CodeStyle, &ok).unwrap();
        assert_eq!(f.documents[0].0, Category::Conventions);
        assert_eq!(f.directives[0].kind, DirectiveType::Cleanup);
        let mut long = ok.clone();
        long["directives"][0]["description"] = serde_json::json!("x".repeat(201));
        assert!(
            parse_findings(Reviewer::CodeStyle, &long)
                .unwrap_err()
                .to_string()
                .contains("at most 200")
        );
        assert_eq!(
            parse_findings(Reviewer::CodeStyle, &long).unwrap_err(),
            BadFindings::TooLong {
                what: "directive description",
                len: 201
            }
        );
        let mut blank = ok.clone();
        blank["directives"][0]["description"] = serde_json::json!("  ");
        assert_eq!(
            parse_findings(Reviewer::CodeStyle, &blank).unwrap_err(),
            BadFindings::EmptyDirective
        );
        let mut extra = ok.clone();
        extra["mood"] = serde_json::json!("happy");
        assert!(
            parse_findings(Reviewer::CodeStyle, &extra)
                .unwrap_err()
                .to_string()
                .contains("mood")
        );
        assert!(matches!(
            parse_findings(Reviewer::CodeStyle, &extra).unwrap_err(),
            BadFindings::Schema { reviewer, .. } if reviewer == Reviewer::CodeStyle.name()
        ));
        let bad_prio = serde_json::json!({"design_updates": [], "documents": [], "directives": [{"type": "functional", "description": "x", "priority": "asap"}], "summary": ""});
        assert!(parse_findings(Reviewer::Design, &bad_prio).is_err());
        let design = serde_json::json!({"design_updates": ["store"], "documents": [{"name": "store", "title": "Store", "rules": ["one actor owns state"], "milestone": "m1"}],
            "directives": [{"type": "functional", "description": "move state into one actor", "priority": "normal"}], "summary": "1 update"});
        let f = parse_findings(Reviewer::Design, &design).unwrap();
        assert_eq!(
            (f.documents[0].0, f.documents[0].1.milestone.as_deref()),
            (Category::Design, Some("m1"))
        );
        assert_eq!(f.directives[0].kind, DirectiveType::Functional);
        let items = serde_json::json!({"knowledge_items": [{"category": "lesson", "content": "JetStream KV needs nats-server 2.10", "source_task": "t3", "confidence": "high", "needs_user_review": false}], "summary": "s"});
        let f = parse_findings(Reviewer::Internaliser, &items).unwrap();
        assert_eq!(f.documents[0].0, Category::Lessons);
        assert_eq!(f.documents[0].1.name, "jetstream-kv-needs-nats-server-2");
        let v = parse_findings(
            Reviewer::Assessor,
            &serde_json::json!({"verdict": "major_drift", "summary": "off", "evidence": []}),
        )
        .unwrap();
        assert_eq!(v.verdict, Some(Verdict::MajorDrift));
    }
}
