//! The audit log: one JSON line per transition in
//! `<data>/<project>/audit.log.jsonl`, each carrying the SHA-256 of the line
//! before it, so a changed, removed or inserted line breaks the chain.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use xo_proto::queue::AuditEvent;

use crate::machine::AuditDraft;

pub fn hash_line(line: &[u8]) -> String {
    let d = Sha256::digest(line);
    d.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn file_for(data_dir: &Path, project: &str) -> PathBuf {
    data_dir.join(project).join("audit.log.jsonl")
}

/// The chain head of each project's file.
#[derive(Debug)]
pub struct Chains {
    data_dir: PathBuf,
    heads: HashMap<String, (u64, String)>,
}

/// The last line of a file (its count of lines, and that line).
fn last_line(path: &Path) -> (u64, Option<Vec<u8>>) {
    match std::fs::read(path) {
        Ok(data) => {
            let lines: Vec<&[u8]> = data
                .split(|b| *b == b'\n')
                .filter(|l| !l.is_empty())
                .collect();
            (lines.len() as u64, lines.last().map(|l| l.to_vec()))
        }
        Err(_) => (0, None),
    }
}

impl Chains {
    pub fn new(data_dir: PathBuf) -> Self {
        Self {
            data_dir,
            heads: HashMap::new(),
        }
    }

    /// The next line of `project`'s chain for a draft.
    pub fn next(&mut self, project: &str, d: &AuditDraft, now: u64) -> Vec<u8> {
        let data_dir = self.data_dir.clone();
        let head = self.heads.entry(project.to_string()).or_insert_with(|| {
            let (n, last) = last_line(&file_for(&data_dir, project));
            (n, last.map(|l| hash_line(&l)).unwrap_or_default())
        });
        let ev = AuditEvent {
            v: xo_proto::PROTOCOL_VERSION,
            seq: head.0 + 1,
            event: d.event.to_string(),
            task_id: d.task_id.clone(),
            at: now,
            state_before: d.before.clone(),
            state_after: d.after.clone(),
            prompt_ref: d.report.as_ref().and_then(|r| r.prompt_ref.clone()),
            response_ref: d.report.as_ref().and_then(|r| r.response_ref.clone()),
            validation_report: d.report.clone(),
            prev: head.1.clone(),
        };
        let line = serde_json::to_vec(&ev).unwrap_or_default();
        *head = (head.0 + 1, hash_line(&line));
        line
    }

    /// Appends lines to their projects' files: one small append per project
    /// to the page cache, done inline (a blocking-pool hop costs more).
    pub async fn write_files(&self, lines: &[(String, Vec<u8>)]) -> std::io::Result<()> {
        let data_dir = self.data_dir.clone();
        let lines = lines.to_vec();
        (move || {
            let mut by_project: HashMap<String, Vec<u8>> = HashMap::new();
            for (p, l) in lines {
                let buf = by_project.entry(p).or_default();
                buf.extend_from_slice(&l);
                buf.push(b'\n');
            }
            for (p, buf) in by_project {
                let path = file_for(&data_dir, &p);
                if let Some(dir) = path.parent() {
                    std::fs::create_dir_all(dir)?;
                }
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&path)?
                    .write_all(&buf)?;
            }
            Ok(())
        })()
    }
}

/// The last `n` records of an audit file (none if it does not exist yet).
/// A line that is not a record is skipped with a warning: `verify` names it.
pub fn tail(path: &Path, n: usize) -> std::io::Result<Vec<AuditEvent>> {
    let data = match std::fs::read(path) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let lines: Vec<&[u8]> = data
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    let from = lines.len().saturating_sub(n);
    Ok(lines[from..]
        .iter()
        .filter_map(|l| match serde_json::from_slice(l) {
            Ok(ev) => Some(ev),
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %e, "audit line is not a record (xo audit verify names it)");
                None
            }
        })
        .collect())
}

/// The result of checking a chain.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    Intact {
        lines: u64,
    },
    /// The first line (1-based) that does not follow from the one before.
    Broken {
        line: u64,
        reason: String,
    },
}

/// Checks every line's `prev` against the hash of the line before it.
pub fn verify(path: &Path) -> std::io::Result<Verdict> {
    let data = std::fs::read(path)?;
    let mut prev = String::new();
    let mut n = 0u64;
    for (i, line) in data.split(|b| *b == b'\n').enumerate() {
        if line.is_empty() {
            continue;
        }
        n = i as u64 + 1;
        let ev: AuditEvent = match serde_json::from_slice(line) {
            Ok(e) => e,
            Err(e) => {
                return Ok(Verdict::Broken {
                    line: n,
                    reason: format!("not an audit record: {e}"),
                });
            }
        };
        if ev.prev != prev {
            return Ok(Verdict::Broken {
                line: n,
                reason: if prev.is_empty() {
                    "the first line must have an empty prev".into()
                } else {
                    "prev does not match the hash of the line before".into()
                },
            });
        }
        prev = hash_line(line);
    }
    Ok(Verdict::Intact { lines: n })
}
