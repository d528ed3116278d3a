//! Group commit: callers whose writes a running sync does not cover wait
//! for the next one, which covers them all, so concurrent writers share
//! each fdatasync instead of queueing one each.

use std::fs::File;
use std::path::{Path, PathBuf};

use super::{FileStore, StoreError, StoreResult, io_err};

/// Writes made and not yet known to be on disk: [`FileStore::put_many_staged`].
#[derive(Debug, Clone)]
pub(crate) enum Staged {
    /// On disk once each file's syncs cover its write number.
    Written {
        store: FileStore,
        files: Vec<(PathBuf, u64)>,
    },
    /// Nothing to wait for (nothing written, or the store does not sync
    /// before answering).
    Durable,
}

impl Staged {
    /// Returns once the writes are on disk. A failed sync is an error and
    /// leaves them to be synced again: call it again to retry.
    pub(crate) async fn durable(&self) -> StoreResult<()> {
        match self {
            Staged::Written { store, files } => {
                futures::future::try_join_all(files.iter().map(|(p, n)| store.durable(p, *n)))
                    .await?;
                Ok(())
            }
            Staged::Durable => Ok(()),
        }
    }
}

pub(super) fn sync_files(files: &[(PathBuf, File)]) -> StoreResult<()> {
    for (p, f) in files {
        f.sync_data().map_err(|e| io_err(p, e))?;
    }
    Ok(())
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
            let leader = {
                let mut g = self.state.lock().map_err(|_| StoreError::Poisoned)?;
                let Some(f) = g.files.get_mut(path) else {
                    return Err(StoreError::Broken("a file written to is not tracked"));
                };
                if f.synced >= upto {
                    return Ok(());
                }
                if f.syncing {
                    None
                } else {
                    f.syncing = true;
                    let lead = (f.dirty.take(), f.written);
                    g.syncs += 1;
                    Some(lead)
                }
            };
            let Some((handle, target)) = leader else {
                ended.await;
                continue;
            };
            // The sync and what it records run to the end on the blocking
            // pool even if this caller goes away, so `syncing` is always
            // cleared and the waiting callers always told.
            let state = self.state.clone();
            let told = self.synced.clone();
            let syncer = self.syncer.clone();
            let path = path.to_path_buf();
            tokio::task::spawn_blocking(move || {
                let files: Vec<(PathBuf, File)> =
                    handle.into_iter().map(|h| (path.clone(), h)).collect();
                let res = syncer(&files);
                if let Ok(mut g) = state.lock()
                    && let Some(f) = g.files.get_mut(&path)
                {
                    f.syncing = false;
                    if res.is_ok() {
                        f.synced = f.synced.max(target);
                    } else if f.dirty.is_none() {
                        // Not on disk: the next sync tries again.
                        f.dirty = files.into_iter().next().map(|(_, h)| h);
                    }
                }
                told.notify_waiters();
                res
            })
            .await
            .map_err(|e| StoreError::Backend(e.into()))??;
        }
    }
}
