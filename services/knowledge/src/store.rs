//! The knowledge folder: `conventions/`, `design/`, `lessons/`, `domain/`
//! and `_index.md`. Writes are checked for ownership and format, written
//! atomically, logged in each document's changelog, and the index is
//! rewritten on every change.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use xo_proto::knowledge::{
    About, Author, Category, ChangeEntry, DocList, DocStatus, DocSummary, InvalidDoc, KnowledgeDoc,
    Selection,
};

use crate::doc::{self, DocError};
use xo_bus::files::{Mode, replace};

/// Default knowledge budget of a prompt (seed 001: ~2k tokens).
pub const DEFAULT_BUDGET: usize = 2_000;

/// The knowledge crate's one error: of the store, its documents and its
/// service.
#[derive(Debug, thiserror::Error)]
pub enum KnowledgeError {
    #[error("document {0} not found")]
    NotFound(String),
    /// A document on disk that does not parse (file, line, why).
    #[error(transparent)]
    Invalid(#[from] DocError),
    /// A document a writer got wrong (name, title, rules, headings).
    #[error(transparent)]
    Check(#[from] xo_proto::knowledge_doc::InvalidDoc),
    /// A request the store does not do (a bad id, an unsafe write).
    #[error("{0}")]
    Refused(String),
    #[error("knowledge store {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    /// The transport, the store or a control call.
    #[error(transparent)]
    Bus(#[from] xo_bus::Error),
    /// The runtime: an actor tree that did not start or gave up, no store.
    #[error(transparent)]
    Runtime(#[from] xo_runtime::RuntimeError),
}

xo_bus::bus_error_from!(KnowledgeError);
xo_runtime::runtime_error_from!(KnowledgeError);

fn io(p: &Path, e: std::io::Error) -> KnowledgeError {
    KnowledgeError::Io {
        path: p.display().to_string(),
        source: e,
    }
}

/// Tokens as a model counts them (cl100k_base), not characters / 4.
pub fn count_tokens(text: &str) -> usize {
    static BPE: OnceLock<Option<tiktoken_rs::CoreBPE>> = OnceLock::new();
    match BPE.get_or_init(|| tiktoken_rs::cl100k_base().ok()) {
        Some(b) => b.encode_ordinary(text).len(),
        // The tokenizer's tables are built in; this cannot fail in practice.
        None => text.len().div_ceil(4),
    }
}

#[derive(Debug, Clone)]
pub struct KnowledgeStore {
    root: PathBuf,
    /// What documents are dated by (the service's clock).
    clock: xo_runtime::Clock,
}

/// Splits `<category>/<name>`.
pub fn parse_id(id: &str) -> Result<(Category, String), KnowledgeError> {
    let (c, n) = id.split_once('/').ok_or_else(|| {
        KnowledgeError::Refused(format!("document id {id:?} is not <category>/<name>"))
    })?;
    let c = Category::parse(c).map_err(|e| KnowledgeError::Refused(e.into()))?;
    xo_proto::validate_token("document name", n).map_err(|e| KnowledgeError::Refused(e.into()))?;
    Ok((c, n.to_string()))
}

/// The `.md` files of `<dir>/<category>/`, sorted: (category, file stem, path).
pub fn md_files(dir: &Path) -> Vec<(Category, String, PathBuf)> {
    let mut out = Vec::new();
    for c in Category::ALL {
        let Ok(rd) = std::fs::read_dir(dir.join(c.as_str())) else {
            continue;
        };
        let mut files: Vec<PathBuf> = rd
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().and_then(|e| e.to_str()) == Some("md"))
            .collect();
        files.sort();
        for p in files {
            let name = p
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or("")
                .to_string();
            out.push((c, name, p));
        }
    }
    out
}

impl KnowledgeStore {
    pub fn open(root: &Path) -> Result<Self, KnowledgeError> {
        for c in Category::ALL {
            let d = root.join(c.as_str());
            std::fs::create_dir_all(&d).map_err(|e| io(&d, e))?;
        }
        let s = Self {
            root: root.to_path_buf(),
            clock: xo_runtime::Clock::System,
        };
        if !root.join("_index.md").exists() {
            s.write_index()?;
        }
        Ok(s)
    }

    /// The store dating what it writes by `clock` (the service's).
    pub fn with_clock(mut self, clock: xo_runtime::Clock) -> Self {
        self.clock = clock;
        self
    }

    fn now_rfc3339(&self) -> String {
        xo_runtime::clock::rfc3339(self.clock.now_ms())
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn path(&self, c: Category, name: &str) -> PathBuf {
        self.root.join(c.as_str()).join(format!("{name}.md"))
    }

    /// Every document that parses, and every file that does not.
    pub fn load_all(&self) -> (Vec<KnowledgeDoc>, Vec<InvalidDoc>) {
        let mut docs = Vec::new();
        let mut invalid = Vec::new();
        for (c, name, p) in md_files(&self.root) {
            let shown = format!("{}/{}.md", c.as_str(), name);
            let res = std::fs::read_to_string(&p)
                .map_err(|e| e.to_string())
                .and_then(|t| doc::parse(&t, c, &name, &shown).map_err(|e| e.to_string()))
                .and_then(|d| {
                    xo_proto::validate_token("document name", &name)?;
                    Ok(d)
                });
            match res {
                Ok(d) => docs.push(d),
                Err(error) => invalid.push(InvalidDoc { path: shown, error }),
            }
        }
        (docs, invalid)
    }

    pub fn list(&self, category: Option<Category>) -> DocList {
        let (docs, invalid) = self.load_all();
        DocList {
            docs: docs
                .iter()
                .filter(|d| category.is_none_or(|c| c == d.category))
                .map(|d| DocSummary {
                    id: d.id(),
                    title: d.title.clone(),
                    status: d.status,
                    uses: d.uses,
                    updated_by: d.updated_by.clone(),
                    tokens: count_tokens(&injection(d)),
                    needs_user_review: d.needs_user_review,
                })
                .collect(),
            invalid,
        }
    }

    pub fn get(&self, id: &str) -> Result<KnowledgeDoc, KnowledgeError> {
        let (c, name) = parse_id(id)?;
        let p = self.path(c, &name);
        let text = match std::fs::read_to_string(&p) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(KnowledgeError::NotFound(id.to_string()));
            }
            Err(e) => return Err(io(&p, e)),
        };
        Ok(doc::parse(&text, c, &name, &format!("{id}.md"))?)
    }

    fn write(&self, d: &KnowledgeDoc) -> Result<(), KnowledgeError> {
        let p = self.path(d.category, &d.name);
        replace(&p, doc::render(d).as_bytes(), Mode::Shared).map_err(|e| io(&p, e))?;
        self.write_index()
    }

    /// Writes a document. Ownership is enforced; a new document is
    /// provisional unless the operator seeds it with another status; an
    /// update keeps the lifecycle (status, uses) and extends the changelog.
    pub fn put(
        &self,
        mut d: KnowledgeDoc,
        author: Author,
        task: Option<&str>,
    ) -> Result<KnowledgeDoc, KnowledgeError> {
        if !author.may_write(d.category) {
            return Err(KnowledgeError::Refused(format!(
                "{} may not write {}/ (code_style owns conventions/, design owns design/, internaliser owns lessons/ and domain/)",
                author.as_str(),
                d.category.as_str()
            )));
        }
        doc::check(&d)?;
        let id = d.id();
        let existing = match self.get(&id) {
            Ok(e) => Some(e),
            Err(KnowledgeError::NotFound(_)) => None,
            // A broken file on disk is replaced by a valid document.
            Err(KnowledgeError::Invalid(_)) => None,
            Err(e) => return Err(e),
        };
        // The operator's own writes need no review; a reviewer's update of
        // a document still awaiting review keeps it waiting.
        d.needs_user_review = author != Author::Operator
            && (d.needs_user_review || existing.as_ref().is_some_and(|e| e.needs_user_review));
        let what = match &existing {
            Some(e) => {
                if author != Author::Operator {
                    d.status = if e.status == DocStatus::Deprecated {
                        DocStatus::Provisional
                    } else {
                        e.status
                    };
                    d.uses = e.uses;
                }
                d.changelog = e.changelog.clone();
                "updated"
            }
            None => {
                if author != Author::Operator {
                    d.status = DocStatus::Provisional;
                    d.uses = 0;
                }
                d.changelog.clear();
                "created"
            }
        };
        d.updated_by = author.as_str().to_string();
        d.after_task = task.map(String::from);
        d.changelog.push(ChangeEntry {
            at: self.now_rfc3339(),
            by: author.as_str().to_string(),
            task: task.map(String::from),
            what: what.to_string(),
        });
        self.write(&d)?;
        Ok(d)
    }

    pub fn deprecate(
        &self,
        id: &str,
        author: Author,
        reason: &str,
    ) -> Result<KnowledgeDoc, KnowledgeError> {
        let mut d = self.get(id)?;
        if !author.may_write(d.category) {
            return Err(KnowledgeError::Refused(format!(
                "{} may not deprecate {id}",
                author.as_str()
            )));
        }
        d.status = DocStatus::Deprecated;
        d.changelog.push(ChangeEntry {
            at: self.now_rfc3339(),
            by: author.as_str().to_string(),
            task: None,
            what: format!("deprecated: {reason}"),
        });
        self.write(&d)?;
        Ok(d)
    }

    /// The operator's decision on a document awaiting review: accepted, it
    /// is established; rejected, deprecated. Either way it no longer waits.
    /// Returns the document after and its status before.
    pub fn review(
        &self,
        id: &str,
        accept: bool,
        by: &str,
        note: &str,
    ) -> Result<(KnowledgeDoc, DocStatus), KnowledgeError> {
        let mut d = self.get(id)?;
        if !d.needs_user_review {
            return Err(KnowledgeError::Refused(format!(
                "{id} is not awaiting review (status {}); deprecate it instead to take it out of prompts",
                d.status.as_str()
            )));
        }
        if !accept && note.trim().is_empty() {
            return Err(KnowledgeError::Refused(format!(
                "rejecting {id} needs a note: say why, so whoever wrote it (a reviewer, an agent) learns what was wrong"
            )));
        }
        let before = d.status;
        d.needs_user_review = false;
        d.status = if accept {
            DocStatus::Established
        } else {
            DocStatus::Deprecated
        };
        let by = if by.trim().is_empty() {
            "operator"
        } else {
            by.trim()
        };
        let mut what = if accept {
            "accepted in review"
        } else {
            "rejected in review"
        }
        .to_string();
        let note = note.replace('\n', " ");
        if !note.trim().is_empty() {
            what.push_str(&format!(": {}", note.trim()));
        }
        d.changelog.push(ChangeEntry {
            at: self.now_rfc3339(),
            by: by.to_string(),
            task: None,
            what,
        });
        self.write(&d)?;
        Ok((d, before))
    }

    /// Counts an injection into a task; after `threshold` clean tasks a
    /// provisional document becomes established. Returns the promoted ids.
    pub fn record_uses(
        &self,
        ids: &[String],
        clean: bool,
        threshold: u32,
    ) -> Result<Vec<String>, KnowledgeError> {
        let mut promoted = Vec::new();
        if !clean {
            return Ok(promoted);
        }
        for id in ids {
            let mut d = match self.get(id) {
                Ok(d) => d,
                Err(KnowledgeError::NotFound(_)) => continue,
                Err(e) => return Err(e),
            };
            d.uses += 1;
            if d.status == DocStatus::Provisional && d.uses >= threshold {
                d.status = DocStatus::Established;
                d.changelog.push(ChangeEntry {
                    at: self.now_rfc3339(),
                    by: "xo".into(),
                    task: None,
                    what: format!("established after {} clean tasks", d.uses),
                });
                promoted.push(id.clone());
            }
            self.write(&d)?;
        }
        Ok(promoted)
    }

    /// The `## PROJECT KNOWLEDGE` section under a token budget: established
    /// conventions always, design documents of the milestone, lessons of the
    /// milestone, then provisional conventions, marked as such. Deprecated
    /// documents never.
    pub fn select(&self, milestone: Option<&str>, budget: usize) -> Selection {
        self.select_for(milestone, &About::default(), budget)
    }

    /// The knowledge for one task, under `budget` tokens: established
    /// conventions; design documents and lessons of its milestone; then
    /// lessons and design documents of no milestone and domain documents
    /// that match what the task is about (role, type, words, paths), most
    /// relevant first; provisional conventions last.
    pub fn select_for(&self, milestone: Option<&str>, about: &About, budget: usize) -> Selection {
        let (docs, _) = self.load_all();
        // Deprecated documents never; those awaiting the operator's review
        // not until accepted.
        let live = |d: &&KnowledgeDoc| d.status != DocStatus::Deprecated && !d.needs_user_review;
        let of_milestone =
            |d: &&KnowledgeDoc| milestone.is_some() && d.milestone.as_deref() == milestone;
        let mut order: Vec<&KnowledgeDoc> = Vec::new();
        order.extend(
            docs.iter().filter(live).filter(|d| {
                d.category == Category::Conventions && d.status == DocStatus::Established
            }),
        );
        order.extend(
            docs.iter()
                .filter(live)
                .filter(|d| d.category == Category::Design)
                .filter(of_milestone),
        );
        order.extend(
            docs.iter()
                .filter(live)
                .filter(|d| d.category == Category::Lessons)
                .filter(of_milestone),
        );
        let terms = crate::relevance::Terms::of(about);
        let mut relevant: Vec<(u32, &KnowledgeDoc)> = docs
            .iter()
            .filter(live)
            .filter(|d| match d.category {
                Category::Domain => true,
                Category::Design | Category::Lessons => d.milestone.is_none(),
                Category::Conventions => false,
            })
            .map(|d| (terms.score(d), d))
            .filter(|(score, _)| *score > 0)
            .collect();
        relevant.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.id().cmp(&b.1.id())));
        order.extend(relevant.into_iter().map(|(_, d)| d));
        order.extend(
            docs.iter().filter(live).filter(|d| {
                d.category == Category::Conventions && d.status == DocStatus::Provisional
            }),
        );
        let header = "## PROJECT KNOWLEDGE\nFollow these project rules.\n";
        let mut section = String::new();
        let mut ids = Vec::new();
        let mut tokens = count_tokens(header);
        for d in order {
            let block = injection(d);
            let t = count_tokens(&block);
            if tokens + t > budget {
                continue;
            }
            tokens += t;
            section.push_str(&block);
            ids.push(d.id());
        }
        if ids.is_empty() {
            return Selection::default();
        }
        Selection {
            section: format!("{header}{section}"),
            docs: ids,
            tokens,
        }
    }

    /// Rewrites `_index.md`.
    pub fn write_index(&self) -> Result<(), KnowledgeError> {
        let (docs, invalid) = self.load_all();
        let mut by: BTreeMap<Category, Vec<&KnowledgeDoc>> = BTreeMap::new();
        for d in &docs {
            by.entry(d.category).or_default().push(d);
        }
        let mut s = String::from(
            "# Knowledge index\n\n_Maintained by XO; edit the documents, not this file._\n",
        );
        for c in Category::ALL {
            s.push_str(&format!("\n## {}\n\n", c.as_str()));
            match by.get(&c) {
                None => s.push_str("(none)\n"),
                Some(ds) => {
                    for d in ds {
                        s.push_str(&format!(
                            "- [{}]({}/{}.md): {}, {} use(s), by {}\n",
                            d.title,
                            c.as_str(),
                            d.name,
                            d.status.as_str(),
                            d.uses,
                            d.updated_by
                        ));
                    }
                }
            }
        }
        if !invalid.is_empty() {
            s.push_str("\n## invalid (not used until fixed)\n\n");
            for i in &invalid {
                s.push_str(&format!("- {}\n", i.error));
            }
        }
        let p = self.root.join("_index.md");
        replace(&p, s.as_bytes(), Mode::Shared).map_err(|e| io(&p, e))
    }

    /// A fingerprint of every document file (for noticing edits by hand).
    pub fn fingerprint(&self) -> BTreeMap<String, (u64, u128)> {
        let mut m = BTreeMap::new();
        for (c, name, p) in md_files(&self.root) {
            if let Ok(md) = p.metadata() {
                let mtime = md
                    .modified()
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map(|d| d.as_nanos())
                    .unwrap_or(0);
                m.insert(format!("{}/{name}", c.as_str()), (md.len(), mtime));
            }
        }
        m
    }
}

/// How one document appears in a prompt.
pub fn injection(d: &KnowledgeDoc) -> String {
    let mark = if d.status == DocStatus::Provisional {
        " (provisional)"
    } else {
        ""
    };
    let mut s = format!("### {}{mark}\n", d.title);
    for r in &d.rules {
        s.push_str("- ");
        s.push_str(r);
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests;
