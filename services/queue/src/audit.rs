//! The audit log: one JSON line per transition in
//! `<data>/<project>/audit.log.jsonl`, each carrying the SHA-256 of the line
//! before it, so a changed, removed or inserted line breaks the chain.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use xo_proto::queue::AuditEvent;

use crate::machine::{AuditDraft, AuditState};

/// An [`AuditEvent`] as it is written: the same fields in the same order,
/// its states as the machine built them (encoded here, once, not first
/// built as JSON values). `a_written_line_reads_back_as_itself` holds the
/// two together.
#[derive(serde::Serialize)]
struct Line<'a> {
    v: u16,
    seq: u64,
    event: xo_proto::queue::EventName,
    task_id: &'a Option<String>,
    at: u64,
    state_before: &'a AuditState,
    state_after: &'a AuditState,
    validation_report: &'a Option<xo_proto::queue::ValidationReport>,
    prompt_ref: Option<&'a String>,
    response_ref: Option<&'a String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt: Option<&'a String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response: Option<&'a String>,
    prev: &'a str,
}

pub fn hash_line(line: &[u8]) -> String {
    xo_proto::secret::hex(&Sha256::digest(line))
}

pub fn file_for(data_dir: &Path, project: &str) -> PathBuf {
    xo_proto::names::audit_file(data_dir, project)
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

    /// The next line of `project`'s chain for a draft, encoded from it as
    /// it is. A draft that cannot be encoded is an error and leaves the
    /// chain's head where it was.
    pub fn next(
        &mut self,
        project: &str,
        d: &AuditDraft,
        now: u64,
    ) -> Result<Vec<u8>, serde_json::Error> {
        let data_dir = &self.data_dir;
        let head = self.heads.entry(project.to_string()).or_insert_with(|| {
            let (n, last) = last_line(&file_for(data_dir, project));
            (n, last.map(|l| hash_line(&l)).unwrap_or_default())
        });
        let (report, exchange) = (&d.report, &d.exchange);
        let line = serde_json::to_vec(&Line {
            v: xo_proto::PROTOCOL_VERSION,
            seq: head.0 + 1,
            event: d.event,
            task_id: &d.task_id,
            at: now,
            state_before: &d.before,
            state_after: &d.after,
            validation_report: report,
            prompt_ref: report.as_ref().and_then(|r| r.prompt_ref.as_ref()),
            response_ref: report.as_ref().and_then(|r| r.response_ref.as_ref()),
            prompt: exchange.as_ref().map(|e| &e.prompt),
            response: exchange.as_ref().map(|e| &e.response),
            prev: &head.1,
        })?;
        *head = (head.0 + 1, hash_line(&line));
        Ok(line)
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
                // The operator's record: this user's alone, whatever the umask.
                use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
                if let Some(dir) = path.parent() {
                    std::fs::DirBuilder::new()
                        .recursive(true)
                        .mode(0o700)
                        .create(dir)?;
                }
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .mode(0o600)
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

/// A record of the store's copy: the project, a tab, then the line exactly as
/// in the project's file (a JSON line has no raw tab, so the first tab ends
/// the project).
pub fn store_record(project: &str, line: &[u8]) -> Vec<u8> {
    let mut r = Vec::with_capacity(project.len() + 1 + line.len());
    r.extend_from_slice(project.as_bytes());
    r.push(b'\t');
    r.extend_from_slice(line);
    r
}

/// A store record's project (none for a record written before copies named
/// their project) and line.
pub fn split_store_record(record: &[u8]) -> (Option<&str>, &[u8]) {
    match record.iter().position(|b| *b == b'\t') {
        Some(i) if !record[..i].contains(&b'{') => {
            (std::str::from_utf8(&record[..i]).ok(), &record[i + 1..])
        }
        _ => (None, record),
    }
}

/// How a project's file compares with the store's copy.
#[derive(Debug, PartialEq, Eq)]
pub struct Comparison {
    /// Lines in the file.
    pub file_lines: u64,
    /// The project's records in the store's copy.
    pub store_lines: u64,
    /// The file's last lines not yet in the store's copy (the copy is
    /// shipped just after the file is written, and waits for a store that
    /// is down).
    pub unshipped: u64,
    /// The first line (1-based) where the two part, and why.
    pub mismatch: Option<(u64, String)>,
}

/// Compares `project`'s file with the store's copy of the audit log: the
/// copy must hold the file's lines in the same order, and no more (a copy
/// longer than the file means lines were cut from the file's end).
pub fn compare<'a>(
    path: &Path,
    project: &str,
    store: impl IntoIterator<Item = &'a [u8]>,
) -> std::io::Result<Comparison> {
    let data = match std::fs::read(path) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e),
    };
    Ok(compare_data(&data, project, store))
}

/// [`compare`] on a file's content already read.
pub fn compare_data<'a>(
    data: &[u8],
    project: &str,
    store: impl IntoIterator<Item = &'a [u8]>,
) -> Comparison {
    let file: Vec<&[u8]> = data
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    let in_file: std::collections::HashSet<&[u8]> = file.iter().copied().collect();
    let copy: Vec<&[u8]> = store
        .into_iter()
        .filter_map(|r| match split_store_record(r) {
            (Some(p), line) if p == project => Some(line),
            // A copy from before records named their project: its line
            // is this project's if the file has it.
            (None, line) if in_file.contains(line) => Some(line),
            _ => None,
        })
        .collect();
    let mut c = Comparison {
        file_lines: file.len() as u64,
        store_lines: copy.len() as u64,
        unshipped: 0,
        mismatch: None,
    };
    for (i, (f, s)) in file.iter().zip(copy.iter()).enumerate() {
        if f != s {
            c.mismatch = Some((
                i as u64 + 1,
                "the line differs from the store's copy of it".into(),
            ));
            return c;
        }
    }
    if copy.len() > file.len() {
        c.mismatch = Some((
            file.len() as u64 + 1,
            format!(
                "the store's copy has {} more line(s) after the file's last: lines were removed from the file",
                copy.len() - file.len()
            ),
        ));
    } else {
        c.unshipped = (file.len() - copy.len()) as u64;
    }
    c
}

/// Per project, the store records to ship; and the projects left as they are.
pub type Unshipped = (Vec<(String, Vec<bytes::Bytes>)>, Vec<String>);

/// What each project's file holds that the store's copy lacks at its end
/// (an instance stopped between its file's append and the copy's ship): a
/// project and its store records, in the file's order. A project whose
/// copy differs from its file is left as it is and named in the second
/// list (`xo audit verify` says where they part).
pub fn unshipped(data_dir: &Path, store: &[bytes::Bytes]) -> std::io::Result<Unshipped> {
    let (mut ship, mut differ) = (Vec::new(), Vec::new());
    let entries = match std::fs::read_dir(data_dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((ship, differ)),
        Err(e) => return Err(e),
    };
    let mut projects: Vec<String> = entries
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|p| file_for(data_dir, p).is_file())
        .collect();
    projects.sort();
    for project in projects {
        let data = std::fs::read(file_for(data_dir, &project))?;
        let c = compare_data(&data, &project, store.iter().map(|r| r.as_ref()));
        if c.mismatch.is_some() {
            differ.push(project);
            continue;
        }
        if c.unshipped == 0 {
            continue;
        }
        let lines: Vec<bytes::Bytes> = data
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .skip(c.store_lines as usize)
            .map(|l| bytes::Bytes::from(store_record(&project, l)))
            .collect();
        ship.push((project, lines));
    }
    Ok((ship, differ))
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

/// Checks `project`'s audit file: its chain, then against the store's copy.
/// A store that cannot be read leaves the chain's verdict and says so.
pub async fn check(
    store: &xo_bus::Store,
    data_dir: &Path,
    project: &str,
) -> std::io::Result<xo_proto::queue::AuditCheck> {
    let path = file_for(data_dir, project);
    let verdict = {
        let path = path.clone();
        tokio::task::spawn_blocking(move || match verify(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Verdict::Intact { lines: 0 }),
            r => r,
        })
        .await
        .map_err(std::io::Error::other)??
    };
    let mut out = xo_proto::queue::AuditCheck {
        project: project.to_string(),
        intact: true,
        lines: 0,
        broken_at: None,
        reason: None,
        store_lines: None,
        unshipped: 0,
    };
    match verdict {
        Verdict::Intact { lines } => out.lines = lines,
        Verdict::Broken { line, reason } => {
            out.intact = false;
            out.lines = line;
            out.broken_at = Some(line);
            out.reason = Some(reason);
            return Ok(out);
        }
    }
    // One read of the whole copy (the file store reads its file once per call).
    let records: Vec<bytes::Bytes> = match store.read(crate::AUDIT_LOG, 1, usize::MAX).await {
        Ok(batch) => batch.into_iter().map(|(_, r)| r).collect(),
        Err(e) => {
            out.reason = Some(format!(
                "the chain is intact but the store's copy could not be read to compare: {e}"
            ));
            return Ok(out);
        }
    };
    let c = tokio::task::spawn_blocking({
        let (path, project) = (path.clone(), project.to_string());
        move || compare(&path, &project, records.iter().map(|r| r.as_ref()))
    })
    .await
    .map_err(std::io::Error::other)??;
    out.store_lines = Some(c.store_lines);
    out.unshipped = c.unshipped;
    if let Some((line, reason)) = c.mismatch {
        out.intact = false;
        out.broken_at = Some(line);
        out.reason = Some(reason);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::{GoalState, QueueState, SeedState, SupervisorState, TaskSnapshot};
    use xo_proto::queue::{
        EventName, Exchange, ExecutionMode, RunStatus, TaskState, ValidationReport,
    };

    fn seed() -> SeedState {
        SeedState {
            by: None,
            completed_tasks: 7,
            execution_mode: ExecutionMode::Auto,
            goal: GoalState {
                completed: false,
                description: "ship \"it\"\nnow".into(),
                project_id: Some("p".into()),
            },
            interrupt: None,
            last_updated: "2026-12-06T07:00:00Z".into(),
            note: None,
            queue: QueueState { exhausted: false },
            supervisor: SupervisorState {
                halt_details: None,
                halt_reason: None,
                iteration: 3,
                last_task_id: Some("t0".into()),
                retry_count: None,
                status: RunStatus::Running,
            },
            task: None,
            yielded_to: None,
        }
    }

    /// Every line the machine writes decodes as an `AuditEvent`, and that
    /// encoded again is the line itself, byte for byte: the typed states
    /// keep the fields, their names and the order of their keys.
    #[test]
    fn a_written_line_reads_back_as_itself() {
        let tmp = tempfile::tempdir().unwrap();
        let mut chains = Chains::new(tmp.path().to_path_buf());
        let mut task = seed();
        task.by = Some("ana (cli)".into());
        task.interrupt = Some("crit".into());
        task.yielded_to = Some("crit".into());
        task.note = Some("saved".into());
        // A task id that sorts before and after the other keys' names.
        task.supervisor.retry_count = Some(("zz-1".into(), 2));
        task.supervisor.halt_reason = Some("TASK_BLOCKED: t1 blocked".into());
        task.supervisor.halt_details = Some("t1 blocked".into());
        task.task = Some(Some(TaskSnapshot {
            attempt: 2,
            claimant: Some("r1".into()),
            reason: None,
            retries: 2,
            state: TaskState::Running,
            task_id: "zz-1".into(),
        }));
        let mut gone = seed();
        gone.supervisor.retry_count = Some(("a".into(), 0));
        gone.task = Some(None);
        let drafts = vec![
            AuditDraft {
                event: EventName::TaskComplete,
                task_id: Some("zz-1".into()),
                before: AuditState::Seed(Box::new(seed())),
                after: AuditState::Seed(Box::new(task)),
                report: Some(ValidationReport {
                    passed: true,
                    prompt_ref: Some("prompts/1".into()),
                    ..Default::default()
                }),
                exchange: Some(Exchange {
                    prompt: "do it".into(),
                    response: "done".into(),
                }),
            },
            AuditDraft {
                event: EventName::TaskCancelled,
                task_id: Some("a".into()),
                before: AuditState::default(),
                after: AuditState::Seed(Box::new(gone)),
                report: None,
                exchange: None,
            },
            AuditDraft {
                event: EventName::SettingsChanged,
                task_id: None,
                before: serde_json::json!({"version": 1, "values": {"b": 1, "a": null}}).into(),
                after: serde_json::json!({"version": 2, "by": "ana"}).into(),
                report: None,
                exchange: None,
            },
        ];
        for d in drafts {
            let (before, after) = (d.before.to_value(), d.after.to_value());
            let line = chains.next("p", &d, 1_000).unwrap();
            let ev: AuditEvent = serde_json::from_slice(&line).unwrap();
            assert_eq!(
                serde_json::to_vec(&ev).unwrap(),
                line,
                "{}",
                String::from_utf8_lossy(&line)
            );
            assert_eq!((ev.state_before, ev.state_after), (before, after));
            assert_eq!(ev.event, d.event);
        }
    }

    #[test]
    fn a_line_is_chained_by_the_lowercase_hex_of_its_sha256() {
        // FIPS 180-2's example: the chain of files written before stays valid.
        assert_eq!(
            super::hash_line(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
