//! Compaction of a bucket's file, off the store's lock: the live records
//! are taken as they are (a snapshot, under the lock), written to a new
//! file beside the old one and flushed with no lock held; the records
//! appended meanwhile are kept as they are written ([`Since`]); then,
//! under the lock again, they follow the snapshot into the new file, which
//! is flushed and renamed over the old one. Writers wait for none of it
//! but that last step (a short append, a flush and a rename): before, the
//! whole bucket was encoded, written and flushed with the lock held, and
//! the write that found it due waited for all of it.
//!
//! A crash at any point leaves the old file, whole (it holds every record,
//! those appended during the compaction too), or the new one, whole.

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use super::{Bucket, KvRecordRef, State, StoreError, StoreResult, io_err, open_append, replaced};
use crate::files::{Mode, Replacement};

/// The records appended to a bucket while its compaction runs.
#[derive(Default)]
pub(super) struct Since {
    frames: Vec<u8>,
    records: u64,
}

impl Since {
    /// `frames` (holding `records` records) were appended to the old file.
    pub(super) fn appended(&mut self, frames: &[u8], records: u64) {
        self.frames.extend_from_slice(frames);
        self.records += records;
    }
}

/// A bucket's live records as a compaction found them.
pub(super) struct Snapshot {
    bucket: String,
    path: PathBuf,
    live: Vec<(String, u64, Bytes)>,
}

impl Bucket {
    /// Begins a compaction of this bucket (named `name`): its live records
    /// now, and from now on what is appended is kept to follow them.
    pub(super) fn begin_compaction(&mut self, name: &str) -> Snapshot {
        self.compacting = Some(Since::default());
        Snapshot {
            bucket: name.to_string(),
            path: self.path.clone(),
            live: self
                .live
                .iter()
                .map(|(k, (rev, v))| (k.clone(), *rev, v.clone()))
                .collect(),
        }
    }
}

/// A snapshot written to the new file: the file, its length and its
/// number of records.
pub(super) struct Written {
    file: Replacement,
    len: u64,
    records: u64,
}

/// Compacts the buckets of `due` on the blocking pool; nobody waits for
/// it. A failure is logged, and the bucket is compacted again when next
/// due.
pub(super) fn start(state: &Arc<Mutex<State>>, due: Vec<Snapshot>) {
    let state = state.clone();
    tokio::task::spawn_blocking(move || {
        for snap in due {
            let written = write(&snap);
            if let Err(e) = finish(&state, &snap.bucket, written) {
                tracing::warn!(bucket = %snap.bucket, error = %e, "store compaction failed; the old file is kept whole, and the bucket is compacted again when next due");
            }
        }
    });
}

/// Writes the snapshot's records to a new file beside the bucket's and
/// flushes it (no lock held).
pub(super) fn write(snap: &Snapshot) -> StoreResult<Written> {
    let mut out = Vec::new();
    for (key, rev, v) in &snap.live {
        let rec = KvRecordRef {
            key,
            rev: *rev,
            value: Some(serde_bytes::Bytes::new(v)),
        };
        out.extend_from_slice(&rec.framed()?);
    }
    let io = |e| io_err(&snap.path, e);
    let mut file = Replacement::begin(&snap.path, Mode::Private).map_err(io)?;
    file.write(&out).map_err(io)?;
    file.flush().map_err(io)?;
    Ok(Written {
        file,
        len: out.len() as u64,
        records: snap.live.len() as u64,
    })
}

/// Ends the compaction of `bucket` (under the lock): the records appended
/// since the snapshot follow it into the new file, which replaces the old
/// one. With `written` an error (or a failure here), the old file stays
/// as it is, whole, and the bucket may be compacted again.
pub(super) fn finish(
    state: &Mutex<State>,
    bucket: &str,
    written: StoreResult<Written>,
) -> StoreResult<()> {
    let mut g = state.lock().map_err(|_| StoreError::Poisoned)?;
    let Some(b) = g.buckets.get_mut(bucket) else {
        return Ok(());
    };
    let since = b.compacting.take().unwrap_or_default();
    let Written {
        mut file,
        len,
        records,
    } = written?;
    let path = b.path.clone();
    let io = |e| io_err(&path, e);
    file.write(&since.frames).map_err(io)?;
    let done = file.finish().map_err(io);
    // Renamed or not (a failure after the rename, flushing the folder,
    // still leaves the new file in place), the bucket appends to the file
    // now under its name: both hold every record.
    let current = open_append(&path)?;
    let renamed = ino(&current, &path)? != ino(&b.file, &path)?;
    b.file = current;
    if renamed {
        b.records = records + since.records;
        let len = len + since.frames.len() as u64;
        // The new file was flushed whole: nothing of it waits for a sync.
        replaced(&mut g, &path, len);
    }
    done
}

fn ino(f: &std::fs::File, path: &std::path::Path) -> StoreResult<u64> {
    f.metadata().map(|m| m.ino()).map_err(|e| io_err(path, e))
}
