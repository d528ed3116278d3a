//! The embedded store: key-value buckets and logs in files under a state
//! directory (`./.xo/state`), surviving a restart.
//!
//! Each bucket and each log is one append-only file of framed records:
//! `[len: u32 LE][crc32: u32 LE][msgpack record]`. Opening replays the file.
//! A torn last record (a crash mid-write) is cut off with a warning; a bad
//! record anywhere else is an error naming the file and byte offset, and the
//! file is left untouched for the operator. Buckets are compacted when dead
//! records outnumber live ones, with no lock held and nobody waiting
//! (`file_store/compact.rs`).

use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::files::{Mode, replace};
use crate::{Cas, Entry, StoreError, StoreResult, validate_key};

mod compact;
mod repair;
mod sync;
pub use repair::{Repair, Scan, repair_file, scan_file};
pub use sync::Staged;
use sync::{
    Appended, FileSync, dirty_paths, mark_dirty, replaced, sync_file, sync_files, take_dirty,
};

/// A record as read (it is written as a [`KvRecordRef`]).
#[derive(Deserialize)]
struct KvRecord {
    key: String,
    rev: u64,
    /// `None` is a delete.
    value: Option<serde_bytes::ByteBuf>,
}

/// A [`KvRecord`] as written, borrowing its parts (the same bytes: the
/// fields in the same order, the value as bytes).
#[derive(Serialize)]
struct KvRecordRef<'a> {
    key: &'a str,
    rev: u64,
    value: Option<&'a serde_bytes::Bytes>,
}

impl KvRecordRef<'_> {
    /// The record, framed.
    fn framed(&self) -> StoreResult<Vec<u8>> {
        let body = rmp_serde::to_vec(self).map_err(|e| StoreError::Backend(e.into()))?;
        Ok(frame(&body))
    }
}

struct Bucket {
    path: PathBuf,
    file: File,
    rev: u64,
    live: BTreeMap<String, (u64, Bytes)>,
    records: u64,
    /// While a compaction writes the new file off the lock: what was
    /// appended since its snapshot, to follow it ([`compact`]).
    compacting: Option<compact::Since>,
}

struct Log {
    path: PathBuf,
    file: File,
    /// Byte offset of each record, index = seq - 1.
    offsets: Vec<u64>,
}

#[derive(Default)]
struct State {
    buckets: HashMap<String, Bucket>,
    logs: HashMap<String, Log>,
    /// Each file written to, and how far its writes are synced.
    files: HashMap<PathBuf, FileSync>,
    /// Writes made so far (one per file a call wrote).
    written: u64,
    /// The files a call being run has written, and each one's write
    /// number: what it waits for ([`Staged`]).
    touched: Vec<(PathBuf, u64)>,
    /// Syncs run by writers' calls (`SyncMode::Always`).
    syncs: u64,
    /// Whether what is appended is kept until a sync covers it (the store
    /// syncs: not `SyncMode::Never`).
    keeps_unsynced: bool,
}

/// When the file store makes its writes durable (`store.sync`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SyncMode {
    /// fsync before a write returns: an acknowledged write survives a power
    /// cut. One fsync per call, so the queue's group commit pays one per
    /// batch.
    #[default]
    Always,
    /// fsync every 100 ms in the background: a power cut loses at most the
    /// writes of the last 100 ms (a process crash loses nothing).
    Batch,
    /// Never fsync: the OS writes when it likes; a power cut can lose
    /// seconds of acknowledged writes (a process crash loses nothing).
    Never,
}

/// The file of the log `name`.
fn log_path(dir: &Path, name: &str) -> PathBuf {
    dir.join("log").join(format!("{name}.log"))
}

/// How often `SyncMode::Batch` syncs.
const BATCH_SYNC: std::time::Duration = std::time::Duration::from_millis(100);

/// Makes a directory entry (a file created or renamed in it) durable.
fn sync_dir(path: &Path) -> StoreResult<()> {
    if let Some(dir) = path.parent() {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| io_err(dir, e))?;
    }
    Ok(())
}

/// The file store. Clones share state; file I/O runs on the blocking pool.
#[derive(Clone)]
pub struct FileStore {
    dir: PathBuf,
    state: Arc<Mutex<State>>,
    sync: SyncMode,
    /// Told when a sync ends (`SyncMode::Always`).
    synced: Arc<tokio::sync::Notify>,
    /// What makes files durable: [`sync_files`] (a test holds it shut).
    syncer: Syncer,
}

type Syncer = Arc<dyn Fn(&[(PathBuf, File)]) -> StoreResult<()> + Send + Sync>;

impl std::fmt::Debug for FileStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileStore").field("dir", &self.dir).finish()
    }
}

fn io_err(path: &Path, source: std::io::Error) -> StoreError {
    StoreError::Io {
        path: path.display().to_string(),
        source,
    }
}

fn check_name(name: &str) -> StoreResult<()> {
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err(StoreError::InvalidKey {
            key: name.to_string(),
            reason: "bucket and log names use letters, digits, '-' and '_'".into(),
        });
    }
    Ok(())
}

fn frame(record: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(record.len() + 8);
    out.extend_from_slice(&(record.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(record).to_le_bytes());
    out.extend_from_slice(record);
    out
}

/// Whether a valid frame (length within the data, checksum matching)
/// starts anywhere in `data[from..]`.
fn valid_frame_after(data: &[u8], from: usize) -> Option<usize> {
    let mut p = from;
    while p + 8 <= data.len() {
        let len = u32::from_le_bytes([data[p], data[p + 1], data[p + 2], data[p + 3]]) as usize;
        if len > 0 && p + 8 + len <= data.len() {
            let crc = u32::from_le_bytes([data[p + 4], data[p + 5], data[p + 6], data[p + 7]]);
            if crc32fast::hash(&data[p + 8..p + 8 + len]) == crc {
                return Some(p);
            }
        }
        p += 1;
    }
    None
}

enum FrameFault {
    /// The file ends inside this record and no valid record follows: a
    /// write cut short by a crash.
    Torn,
    Bad(String),
}

/// The end of the record at `pos`, or why it does not read.
fn frame_at(data: &[u8], pos: usize) -> Result<usize, FrameFault> {
    if data.len() - pos < 8 {
        return Err(FrameFault::Torn);
    }
    let len = u32::from_le_bytes([data[pos], data[pos + 1], data[pos + 2], data[pos + 3]]) as usize;
    let crc = u32::from_le_bytes([data[pos + 4], data[pos + 5], data[pos + 6], data[pos + 7]]);
    let end = pos + 8 + len;
    if end > data.len() {
        // Only the last record can be torn: its length reaches past the end
        // and nothing valid comes after it. Anything else is damage.
        if len <= 64 * 1024 * 1024 && valid_frame_after(data, pos + 1).is_none() {
            return Err(FrameFault::Torn);
        }
        return Err(FrameFault::Bad(format!(
            "record length {len} reaches past the end of the file ({} bytes) but valid records follow it",
            data.len()
        )));
    }
    if crc32fast::hash(&data[pos + 8..end]) != crc {
        return Err(FrameFault::Bad("checksum mismatch".into()));
    }
    Ok(end)
}

/// Reads every framed record of a file: (offset, body). Cuts a torn tail
/// (the last record, cut short by a crash); any other damage is an error
/// naming the file and the offset, and the file is left as it is.
fn read_frames(path: &Path) -> StoreResult<Vec<(u64, Vec<u8>)>> {
    let scan = scan_file(path)?;
    if let Some((offset, len, reason)) = scan.damaged.first() {
        return Err(StoreError::Corrupt {
            path: path.display().to_string(),
            offset: *offset,
            reason: format!(
                "{reason} ({len} bytes damaged); XO does not start on a damaged store: `xo store repair {}` keeps a backup, drops only the damaged bytes and lists what it dropped",
                path.display()
            ),
        });
    }
    if let Some((offset, _)) = scan.torn {
        truncate_tail(path, offset as usize)?;
    }
    Ok(scan.records)
}

/// Appends `buf` whole or not at all, and returns where it begins. A write that fails part-way (a full
/// disk) is cut back off at once: left there, the partial frame would be
/// buried in the middle by the next append that fits, and the next start
/// would refuse the file as damaged until `xo store repair`.
fn append_whole(file: &mut File, path: &Path, buf: &[u8]) -> StoreResult<u64> {
    let before = file
        .metadata()
        .map(|m| m.len())
        .map_err(|e| io_err(path, e))?;
    if let Err(e) = file.write_all(buf) {
        match file.set_len(before) {
            Ok(()) => {
                tracing::warn!(path = %path.display(), error = %e, "store write failed part-way; the partial record was cut off");
            }
            Err(t) => {
                tracing::error!(path = %path.display(), error = %e, truncate_error = %t, "store write failed part-way and the partial record could not be cut off; the next start asks for `xo store repair`");
            }
        }
        return Err(io_err(path, e));
    }
    Ok(before)
}

fn truncate_tail(path: &Path, at: usize) -> StoreResult<()> {
    tracing::warn!(path = %path.display(), offset = at, "store file ends in a torn record; cutting it off");
    let f = OpenOptions::new()
        .write(true)
        .open(path)
        .map_err(|e| io_err(path, e))?;
    f.set_len(at as u64).map_err(|e| io_err(path, e))
}

fn open_append(path: &Path) -> StoreResult<File> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| io_err(dir, e))?;
    }
    let existed = path.exists();
    let f = {
        use std::os::unix::fs::OpenOptionsExt;
        OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| io_err(path, e))?
    };
    if !existed {
        // The new file's name must survive a power cut too.
        sync_dir(path)?;
    }
    Ok(f)
}

impl Bucket {
    fn open(path: PathBuf) -> StoreResult<Self> {
        let mut live = BTreeMap::new();
        let mut rev = 0;
        let frames = read_frames(&path)?;
        let records = frames.len() as u64;
        for (offset, body) in frames {
            let r: KvRecord = rmp_serde::from_slice(&body).map_err(|e| StoreError::Corrupt {
                path: path.display().to_string(),
                offset,
                reason: e.to_string(),
            })?;
            rev = rev.max(r.rev);
            match r.value {
                Some(v) => live.insert(r.key, (r.rev, Bytes::from(v.into_vec()))),
                None => live.remove(&r.key),
            };
        }
        let file = open_append(&path)?;
        Ok(Self {
            path,
            file,
            rev,
            live,
            records,
            compacting: None,
        })
    }

    fn write(&mut self, key: &str, value: Option<Bytes>) -> StoreResult<(u64, Appended)> {
        let (mut revs, appended) = self.write_many(vec![(key.to_string(), value)])?;
        let rev = revs
            .pop()
            .ok_or(StoreError::Broken("a write gave no revision"))?;
        Ok((rev, appended))
    }

    /// Appends every record with one write call. Compaction, when due, is
    /// left to the caller (it may take long; it runs on the blocking pool).
    fn write_many(
        &mut self,
        items: Vec<(String, Option<Bytes>)>,
    ) -> StoreResult<(Vec<u64>, Appended)> {
        let mut buf = Vec::new();
        let mut revs = Vec::with_capacity(items.len());
        let mut rev = self.rev;
        for (key, value) in &items {
            rev += 1;
            let rec = KvRecordRef {
                key,
                rev,
                value: value.as_deref().map(serde_bytes::Bytes::new),
            };
            buf.extend_from_slice(&rec.framed()?);
            revs.push(rev);
        }
        let at = append_whole(&mut self.file, &self.path, &buf)?;
        self.rev = rev;
        self.records += items.len() as u64;
        if let Some(since) = &mut self.compacting {
            since.appended(&buf, items.len() as u64);
        }
        for ((key, value), r) in items.into_iter().zip(&revs) {
            match value {
                Some(v) => self.live.insert(key, (*r, v)),
                None => self.live.remove(&key),
            };
        }
        Ok((revs, Appended { at, bytes: buf }))
    }

    /// Dead records outnumber live ones, and no compaction runs.
    fn needs_compaction(&self) -> bool {
        self.compacting.is_none()
            && self.records > 1024
            && self.records > 2 * self.live.len() as u64
    }
}

impl FileStore {
    /// Opens (creating) a store in `dir` that syncs every write
    /// ([`SyncMode::Always`]). Files are opened on first use.
    pub fn open(dir: impl Into<PathBuf>) -> StoreResult<Self> {
        Self::open_with(dir, SyncMode::Always)
    }

    /// Opens (creating) a store in `dir` with the given durability.
    pub fn open_with(dir: impl Into<PathBuf>, sync: SyncMode) -> StoreResult<Self> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir).map_err(|e| io_err(&dir, e))?;
        // The state is this user's alone, whatever the umask.
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
                .map_err(|e| io_err(&dir, e))?;
        }
        let state = Arc::new(Mutex::new(State {
            keeps_unsynced: sync != SyncMode::Never,
            ..State::default()
        }));
        if sync == SyncMode::Batch {
            // The batch syncer ends when the last clone of the store goes.
            let weak = Arc::downgrade(&state);
            std::thread::Builder::new()
                .name("xo-store-sync".into())
                .spawn(move || {
                    let syncer: Syncer = Arc::new(sync_files);
                    loop {
                        std::thread::sleep(BATCH_SYNC);
                        let Some(state) = weak.upgrade() else { return };
                        let paths = match state.lock() {
                            Ok(g) => dirty_paths(&g),
                            Err(_) => return,
                        };
                        for path in paths {
                            if let Err(e) = sync_file(&state, &path, &syncer) {
                                tracing::error!(error = %e, "store sync failed; what it covered is written again and synced in the next round, and a power cut before then may lose it");
                            }
                        }
                    }
                })
                .map_err(|e| io_err(&dir, e))?;
        }
        Ok(Self {
            dir,
            state,
            sync,
            synced: Arc::new(tokio::sync::Notify::new()),
            syncer: Arc::new(sync_files),
        })
    }

    /// How many syncs writers' calls have run (`SyncMode::Always`): with
    /// [`Self::writes`], how many writes share one fdatasync.
    pub fn syncs(&self) -> u64 {
        self.state.lock().map(|g| g.syncs).unwrap_or(0)
    }

    /// How many writes (one per file a call wrote) were made.
    pub fn writes(&self) -> u64 {
        self.state.lock().map(|g| g.written).unwrap_or(0)
    }

    /// A log's writes and the syncs writers' calls ran on its file
    /// (`SyncMode::Always`), as [`Self::writes`] and [`Self::syncs`] count
    /// them for the whole store: (0, 0) for a log not written yet.
    pub fn log_writes_and_syncs(&self, log: &str) -> (u64, u64) {
        let path = log_path(&self.dir, log);
        self.state
            .lock()
            .ok()
            .and_then(|g| g.files.get(&path).map(|f| (f.written, f.syncs)))
            .unwrap_or((0, 0))
    }

    /// The durability this store was opened with.
    pub fn sync_mode(&self) -> SyncMode {
        self.sync
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Runs `f` on the store's state. Appends to the page cache take
    /// microseconds, so they run inline (a blocking-pool hop costs more than
    /// the write); a bucket due for compaction is compacted on the blocking
    /// pool afterwards. With `SyncMode::Always`, a call that wrote returns
    /// once its writes are on disk ([`Self::durable`]).
    async fn with<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Path, &mut State) -> StoreResult<T> + Send + 'static,
    ) -> StoreResult<T> {
        let (res, staged) = self.write(f).await?;
        staged.durable().await?;
        Ok(res)
    }

    /// Runs `f` as [`Self::with`] does, without waiting for its writes to be
    /// on disk: they are written (in call order), and the [`Staged`] says
    /// when they are durable.
    async fn write<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Path, &mut State) -> StoreResult<T> + Send + 'static,
    ) -> StoreResult<(T, Staged)> {
        let (res, due, touched) = {
            let mut guard = self.state.lock().map_err(|_| StoreError::Poisoned)?;
            guard.touched.clear();
            let res = f(&self.dir, &mut guard);
            // A compaction's snapshot is taken here, under the lock its
            // writes are counted under (the records appended after it follow
            // it into the new file).
            let due: Vec<compact::Snapshot> = guard
                .buckets
                .iter_mut()
                .filter(|(_, b)| b.needs_compaction())
                .map(|(n, b)| b.begin_compaction(n))
                .collect();
            let touched = std::mem::take(&mut guard.touched);
            if self.sync == SyncMode::Never {
                take_dirty(&mut guard);
            }
            (res, due, touched)
        };
        if !due.is_empty() {
            compact::start(&self.state, due);
        }
        let staged = if self.sync == SyncMode::Always && !touched.is_empty() {
            Staged::written(self.clone(), touched)
        } else {
            Staged::durable_already()
        };
        Ok((res?, staged))
    }

    /// Like `with`, on the blocking pool, for work that reads whole files.
    async fn with_blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Path, &mut State) -> StoreResult<T> + Send + 'static,
    ) -> StoreResult<T> {
        let state = self.state.clone();
        let dir = self.dir.clone();
        tokio::task::spawn_blocking(move || {
            let mut guard = state.lock().map_err(|_| StoreError::Poisoned)?;
            f(&dir, &mut guard)
        })
        .await
        .map_err(|e| StoreError::Backend(e.into()))?
    }

    fn bucket<'a>(dir: &Path, state: &'a mut State, name: &str) -> StoreResult<&'a mut Bucket> {
        check_name(name)?;
        if !state.buckets.contains_key(name) {
            let b = Bucket::open(dir.join("kv").join(format!("{name}.kv")))?;
            state.buckets.insert(name.to_string(), b);
        }
        state
            .buckets
            .get_mut(name)
            .ok_or_else(|| StoreError::Broken("a bucket it holds vanished"))
    }

    fn log<'a>(dir: &Path, state: &'a mut State, name: &str) -> StoreResult<&'a mut Log> {
        check_name(name)?;
        if !state.logs.contains_key(name) {
            let path = log_path(dir, name);
            let offsets = read_frames(&path)?.into_iter().map(|(o, _)| o).collect();
            let file = open_append(&path)?;
            state.logs.insert(
                name.to_string(),
                Log {
                    path,
                    file,
                    offsets,
                },
            );
        }
        state
            .logs
            .get_mut(name)
            .ok_or_else(|| StoreError::Broken("a log it holds vanished"))
    }

    pub async fn get(&self, bucket: &str, key: &str) -> StoreResult<Option<Entry>> {
        let (bucket, key) = (bucket.to_string(), key.to_string());
        self.with(move |dir, st| {
            let b = Self::bucket(dir, st, &bucket)?;
            Ok(b.live.get(&key).map(|(rev, v)| Entry {
                value: v.clone(),
                revision: *rev,
            }))
        })
        .await
    }

    pub async fn put(&self, bucket: &str, key: &str, value: Bytes, cas: Cas) -> StoreResult<u64> {
        validate_key(key)?;
        let (bucket, key) = (bucket.to_string(), key.to_string());
        self.with(move |dir, st| {
            let b = Self::bucket(dir, st, &bucket)?;
            let current = b.live.get(&key).map(|(r, _)| *r);
            match (cas, current) {
                (Cas::Absent, Some(_)) => return Err(StoreError::Exists { bucket, key }),
                (Cas::Revision(expected), found) if found != Some(expected) => {
                    return Err(StoreError::Conflict {
                        bucket,
                        key,
                        expected,
                        found: found.unwrap_or(0),
                    });
                }
                _ => {}
            }
            let (rev, appended) = b.write(&key, Some(value))?;
            let (path, file) = (
                b.path.clone(),
                b.file.try_clone().map_err(|e| io_err(&b.path, e))?,
            );
            mark_dirty(st, &path, file, appended);
            Ok(rev)
        })
        .await
    }

    pub async fn put_many(
        &self,
        bucket: &str,
        items: Vec<(String, Bytes)>,
    ) -> StoreResult<Vec<u64>> {
        let (revs, staged) = self.put_many_staged(bucket, items).await?;
        staged.durable().await?;
        Ok(revs)
    }

    /// Writes several keys now, in call order, and returns before they
    /// are on disk: [`Staged::durable`] says when they are.
    pub async fn put_many_staged(
        &self,
        bucket: &str,
        items: Vec<(String, Bytes)>,
    ) -> StoreResult<(Vec<u64>, Staged)> {
        for (k, _) in &items {
            validate_key(k)?;
        }
        let bucket = bucket.to_string();
        self.write(move |dir, st| {
            let b = Self::bucket(dir, st, &bucket)?;
            let (revs, appended) =
                b.write_many(items.into_iter().map(|(k, v)| (k, Some(v))).collect())?;
            let (path, file) = (
                b.path.clone(),
                b.file.try_clone().map_err(|e| io_err(&b.path, e))?,
            );
            mark_dirty(st, &path, file, appended);
            Ok(revs)
        })
        .await
    }

    pub async fn append_many(&self, log: &str, records: Vec<Bytes>) -> StoreResult<u64> {
        let (n, staged) = self.append_many_staged(log, records).await?;
        staged.durable().await?;
        Ok(n)
    }

    /// Appends records now, in call order, and returns before they are on
    /// disk: [`Staged::durable`] says when they are.
    pub async fn append_many_staged(
        &self,
        log: &str,
        records: Vec<Bytes>,
    ) -> StoreResult<(u64, Staged)> {
        let log = log.to_string();
        self.write(move |dir, st| {
            let l = Self::log(dir, st, &log)?;
            let mut buf = Vec::new();
            let mut offsets = Vec::with_capacity(records.len());
            for r in &records {
                offsets.push(buf.len() as u64);
                buf.extend_from_slice(&frame(r));
            }
            let at = append_whole(&mut l.file, &l.path, &buf)?;
            l.offsets.extend(offsets.into_iter().map(|o| at + o));
            let n = l.offsets.len() as u64;
            let (path, file) = (
                l.path.clone(),
                l.file.try_clone().map_err(|e| io_err(&l.path, e))?,
            );
            mark_dirty(st, &path, file, Appended { at, bytes: buf });
            Ok(n)
        })
        .await
    }

    pub async fn delete(&self, bucket: &str, key: &str) -> StoreResult<()> {
        validate_key(key)?;
        let (bucket, key) = (bucket.to_string(), key.to_string());
        self.with(move |dir, st| {
            let b = Self::bucket(dir, st, &bucket)?;
            if b.live.contains_key(&key) {
                let (_, appended) = b.write(&key, None)?;
                let (path, file) = (
                    b.path.clone(),
                    b.file.try_clone().map_err(|e| io_err(&b.path, e))?,
                );
                mark_dirty(st, &path, file, appended);
            }
            Ok(())
        })
        .await
    }

    pub async fn keys(&self, bucket: &str) -> StoreResult<Vec<String>> {
        let bucket = bucket.to_string();
        self.with(move |dir, st| {
            Ok(Self::bucket(dir, st, &bucket)?
                .live
                .keys()
                .cloned()
                .collect())
        })
        .await
    }

    pub async fn append(&self, log: &str, record: Bytes) -> StoreResult<u64> {
        self.append_many(log, vec![record]).await
    }

    pub async fn read(&self, log: &str, from: u64, max: usize) -> StoreResult<Vec<(u64, Bytes)>> {
        let log = log.to_string();
        self.with_blocking(move |dir, st| {
            let l = Self::log(dir, st, &log)?;
            let from = from.max(1);
            if from > l.offsets.len() as u64 {
                return Ok(vec![]);
            }
            let frames = read_frames(&l.path)?;
            Ok(frames
                .into_iter()
                .enumerate()
                .map(|(i, (_, body))| (i as u64 + 1, Bytes::from(body)))
                .filter(|(seq, _)| *seq >= from)
                .take(max)
                .collect())
        })
        .await
    }
}

#[cfg(test)]
mod tests;
