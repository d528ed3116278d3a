//! Group commit: callers whose writes a running sync does not cover wait
//! for the next one, which covers them all, so concurrent writers share
//! each fdatasync instead of queueing one each.

use std::fs::File;
use std::path::PathBuf;

use super::{FileStore, StoreError, StoreResult, io_err};

/// Writes made and not yet known to be on disk: [`FileStore::put_many_staged`].
#[derive(Debug, Clone)]
pub enum Staged {
    /// On disk once a sync covers write number `upto`.
    Written { store: FileStore, upto: u64 },
    /// Nothing to wait for (nothing written, or the store does not sync
    /// before answering).
    Durable,
}

impl Staged {
    /// Returns once the writes are on disk. A failed sync is an error and
    /// leaves them to be synced again: call it again to retry.
    pub async fn durable(&self) -> StoreResult<()> {
        match self {
            Staged::Written { store, upto } => store.durable(*upto).await,
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
    /// Returns once every write up to number `upto` is on disk: group
    /// commit. One caller at a time syncs the files written so far (off the
    /// async threads); callers whose writes it covers return with it, and
    /// the writes made while it ran wait for the next one, which covers
    /// them all. So concurrent writers share each fdatasync instead of
    /// queueing one each.
    pub(super) async fn durable(&self, upto: u64) -> StoreResult<()> {
        loop {
            // Registered before the state is read, so the end of a sync
            // that begins after the read is not missed.
            let ended = self.synced.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            let leader = {
                let mut g = self.state.lock().map_err(|_| StoreError::Poisoned)?;
                if g.synced >= upto {
                    return Ok(());
                }
                if g.syncing {
                    None
                } else {
                    g.syncing = true;
                    g.syncs += 1;
                    Some((std::mem::take(&mut g.dirty), g.written))
                }
            };
            let Some((files, target)) = leader else {
                ended.await;
                continue;
            };
            // The sync and what it records run to the end on the blocking
            // pool even if this caller goes away, so `syncing` is always
            // cleared and the waiting callers always told.
            let state = self.state.clone();
            let told = self.synced.clone();
            let syncer = self.syncer.clone();
            tokio::task::spawn_blocking(move || {
                let res = syncer(&files);
                if let Ok(mut g) = state.lock() {
                    g.syncing = false;
                    if res.is_ok() {
                        g.synced = g.synced.max(target);
                    } else {
                        // Not on disk: the next sync tries these files again.
                        for (p, f) in files {
                            if !g.dirty.iter().any(|(q, _)| *q == p) {
                                g.dirty.push((p, f));
                            }
                        }
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
