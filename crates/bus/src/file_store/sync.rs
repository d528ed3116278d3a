//! Group commit: callers whose writes a running sync does not cover wait
//! for the next one, which covers them all, so concurrent writers share
//! each fdatasync instead of queueing one each.
//!
//! A failed fdatasync may have lost what it was to write: Linux marks the
//! pages clean and a second fdatasync then succeeds without them. So the
//! bytes appended since a file's last good sync are kept until a sync
//! covers them, and after a failed one the file is cut back to where that
//! sync left it and they are written again, in order, before the next.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::{FileStore, State, StoreError, StoreResult, io_err};

/// One file's writes and syncs. A write is durable once `synced` reaches
/// its number; a sync covers the writes made before it began.
#[derive(Default)]
pub(super) struct FileSync {
    pub(super) written: u64,
    pub(super) synced: u64,
    syncing: bool,
    /// Syncs writers' calls ran on it (`SyncMode::Always`).
    pub(super) syncs: u64,
    /// A handle to sync with, while writes are not synced.
    pub(super) dirty: Option<File>,
    /// The file's length when its last sync succeeded (or when this store
    /// first wrote to it).
    synced_len: u64,
    /// What was appended since, one entry per write, kept while the store
    /// syncs (not with `store.sync = "never"`).
    unsynced: Vec<Vec<u8>>,
    /// A sync failed: `unsynced` is written again (the file cut back to
    /// `synced_len` first) before the next sync.
    rewrite: bool,
    /// Bumped when the file is replaced whole (compaction): a sync begun
    /// before counts for none of the new file's bytes.
    generation: u64,
}

/// Bytes a call appended to a file at offset `at`.
pub(super) struct Appended {
    pub(super) at: u64,
    pub(super) bytes: Vec<u8>,
}

/// Counts a write to the file at `path`; `file` (a handle of it) is kept
/// to sync with if none is, and what was appended is kept until a sync
/// covers it (when the store syncs).
pub(super) fn mark_dirty(state: &mut State, path: &Path, file: File, appended: Appended) {
    state.written += 1;
    let keep = state.keeps_unsynced;
    let f = match state.files.get_mut(path) {
        Some(f) => f,
        None => state
            .files
            .entry(path.to_path_buf())
            .or_insert_with(|| FileSync {
                synced_len: appended.at,
                ..FileSync::default()
            }),
    };
    f.written += 1;
    if keep {
        f.unsynced.push(appended.bytes);
    }
    if f.dirty.is_none() {
        f.dirty = Some(file);
    }
    let n = f.written;
    state.touched.push((path.to_path_buf(), n));
}

/// The file was replaced whole and is on disk with every write made so
/// far (a compacted bucket): nothing of it waits for a sync.
pub(super) fn replaced(state: &mut State, path: &Path, len: u64) {
    if let Some(f) = state.files.get_mut(path) {
        f.dirty = None;
        f.synced = f.written;
        f.synced_len = len;
        f.unsynced.clear();
        f.rewrite = false;
        f.generation += 1;
    }
}

/// Every file with writes not synced: its handle, taken (`store.sync =
/// "never"` keeps none).
pub(super) fn take_dirty(state: &mut State) -> Vec<(PathBuf, File)> {
    let mut out = Vec::new();
    for (p, f) in &mut state.files {
        if let Some(h) = f.dirty.take() {
            out.push((p.clone(), h));
        }
    }
    out
}

/// The files with writes not synced (the batch syncer's round).
pub(super) fn dirty_paths(state: &State) -> Vec<PathBuf> {
    state
        .files
        .iter()
        // A failed sync keeps its handle: a file to write again is dirty.
        .filter(|(_, f)| f.dirty.is_some())
        .map(|(p, _)| p.clone())
        .collect()
}

pub(super) fn sync_files(files: &[(PathBuf, File)]) -> StoreResult<()> {
    for (p, f) in files {
        f.sync_data().map_err(|e| io_err(p, e))?;
    }
    Ok(())
}

/// Cuts the file back to where its last good sync left it and appends
/// what was written since, in order.
fn write_again(handle: &File, path: &Path, f: &FileSync) -> StoreResult<()> {
    handle.set_len(f.synced_len).map_err(|e| io_err(path, e))?;
    // The handle appends: each write lands at the file's end.
    let mut h = handle;
    for bytes in &f.unsynced {
        h.write_all(bytes).map_err(|e| io_err(path, e))?;
    }
    Ok(())
}

/// Syncs the file at `path` (blocking): writes again first what a failed
/// sync may have lost, then syncs every write made so far, and records
/// how far the file is on disk. A failure leaves the file to be written
/// again and synced by the next call.
pub(super) fn sync_file(
    state: &Mutex<State>,
    path: &Path,
    syncer: &super::Syncer,
) -> StoreResult<()> {
    let taken = {
        let mut g = state.lock().map_err(|_| StoreError::Poisoned)?;
        let Some(f) = g.files.get_mut(path) else {
            return Ok(());
        };
        let again = match (f.rewrite, &f.dirty) {
            (false, _) => Ok(()),
            (true, Some(h)) => write_again(h, path, f),
            (true, None) => Err(StoreError::Broken(
                "a file to write again has no handle to write with",
            )),
        };
        match again {
            Ok(()) => {
                f.rewrite = false;
                Ok((f.dirty.take(), f.written, f.unsynced.len(), f.generation))
            }
            Err(e) => {
                f.syncing = false;
                Err(e)
            }
        }
    };
    let (handle, target, covers, generation) = taken?;
    let files: Vec<(PathBuf, File)> = handle
        .into_iter()
        .map(|h| (path.to_path_buf(), h))
        .collect();
    let res = syncer(&files);
    let mut g = state.lock().map_err(|_| StoreError::Poisoned)?;
    if let Some(f) = g.files.get_mut(path) {
        f.syncing = false;
        // A file replaced meanwhile is on disk whole already.
        if f.generation == generation {
            match &res {
                Ok(()) => {
                    f.synced = f.synced.max(target);
                    let on_disk: u64 = f.unsynced.drain(..covers).map(|b| b.len() as u64).sum();
                    f.synced_len += on_disk;
                }
                Err(_) => {
                    f.rewrite = true;
                    if f.dirty.is_none() {
                        f.dirty = files.into_iter().next().map(|(_, h)| h);
                    }
                }
            }
        }
    }
    res
}

/// Writes made and not yet known to be on disk: [`crate::Store::put_many_staged`].
#[derive(Debug, Clone)]
pub struct Staged {
    /// Each file written and its write number; empty when there is nothing
    /// to wait for (nothing written, or a store that does not sync before
    /// answering).
    written: Option<(FileStore, Vec<(PathBuf, u64)>)>,
}

impl Staged {
    pub(super) fn written(store: FileStore, files: Vec<(PathBuf, u64)>) -> Self {
        Self {
            written: Some((store, files)),
        }
    }

    /// Writes that were on disk before the call returned.
    pub fn durable_already() -> Self {
        Self { written: None }
    }

    /// Returns once the writes are on disk. A failed sync is an error; the
    /// store writes them again before its next sync: call it again to retry.
    pub async fn durable(&self) -> StoreResult<()> {
        if let Some((store, files)) = &self.written {
            futures::future::try_join_all(files.iter().map(|(p, n)| store.durable(p, *n))).await?;
        }
        Ok(())
    }
}

impl FileStore {
    /// Returns once write number `upto` of the file at `path` is on disk:
    /// group commit, per file. One caller at a time syncs a file (off the
    /// async threads), covering its writes made so far; callers whose
    /// writes it covers return with it, and the writes made while it ran
    /// wait for the next one, which covers them all. Different files sync
    /// side by side.
    pub(super) async fn durable(&self, path: &Path, upto: u64) -> StoreResult<()> {
        loop {
            // Registered before the state is read, so the end of a sync
            // that begins after the read is not missed.
            let ended = self.synced.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            let lead = {
                let mut g = self.state.lock().map_err(|_| StoreError::Poisoned)?;
                let Some(f) = g.files.get_mut(path) else {
                    return Err(StoreError::Broken("a file written to is not tracked"));
                };
                if f.synced >= upto {
                    return Ok(());
                }
                let lead = !f.syncing;
                if lead {
                    f.syncing = true;
                    f.syncs += 1;
                    g.syncs += 1;
                }
                lead
            };
            if !lead {
                ended.await;
                continue;
            }
            // The sync and what it records run to the end on the blocking
            // pool even if this caller goes away, so `syncing` is always
            // cleared and the waiting callers always told.
            let state = self.state.clone();
            let told = self.synced.clone();
            let syncer = self.syncer.clone();
            let path = path.to_path_buf();
            tokio::task::spawn_blocking(move || {
                let res = sync_file(&state, &path, &syncer);
                told.notify_waiters();
                res
            })
            .await
            .map_err(|e| StoreError::Backend(e.into()))??;
        }
    }
}
