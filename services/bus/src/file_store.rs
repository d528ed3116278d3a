//! The embedded store: key-value buckets and logs in files under a state
//! directory (`./.xo/state`), surviving a restart.
//!
//! Each bucket and each log is one append-only file of framed records:
//! `[len: u32 LE][crc32: u32 LE][msgpack record]`. Opening replays the file.
//! A torn last record (a crash mid-write) is cut off with a warning; a bad
//! record anywhere else is an error naming the file and byte offset, and the
//! file is left untouched for the operator. Buckets are compacted when dead
//! records outnumber live ones.

use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::{Cas, Entry, StoreError, StoreResult, validate_key};

#[derive(Serialize, Deserialize)]
struct KvRecord {
    key: String,
    rev: u64,
    /// `None` is a delete.
    value: Option<serde_bytes::ByteBuf>,
}

struct Bucket {
    path: PathBuf,
    file: File,
    rev: u64,
    live: BTreeMap<String, (u64, Bytes)>,
    records: u64,
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
}

/// The file store. Clones share state; file I/O runs on the blocking pool.
#[derive(Clone)]
pub struct FileStore {
    dir: PathBuf,
    state: Arc<Mutex<State>>,
}

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

/// Reads every framed record of a file: (offset, body). Cuts a torn tail.
fn read_frames(path: &Path) -> StoreResult<Vec<(u64, Vec<u8>)>> {
    let mut data = Vec::new();
    match File::open(path) {
        Ok(mut f) => {
            f.read_to_end(&mut data).map_err(|e| io_err(path, e))?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
        Err(e) => return Err(io_err(path, e)),
    }
    let mut out = Vec::new();
    let mut pos = 0usize;
    while pos < data.len() {
        let corrupt = |reason: String| StoreError::Corrupt {
            path: path.display().to_string(),
            offset: pos as u64,
            reason,
        };
        if data.len() - pos < 8 {
            truncate_tail(path, pos)?;
            break;
        }
        let len =
            u32::from_le_bytes([data[pos], data[pos + 1], data[pos + 2], data[pos + 3]]) as usize;
        let crc = u32::from_le_bytes([data[pos + 4], data[pos + 5], data[pos + 6], data[pos + 7]]);
        let end = pos + 8 + len;
        if end > data.len() {
            if len > 64 * 1024 * 1024 {
                return Err(corrupt(format!("record length {len} is implausible")));
            }
            truncate_tail(path, pos)?;
            break;
        }
        let body = &data[pos + 8..end];
        if crc32fast::hash(body) != crc {
            return Err(corrupt("checksum mismatch".into()));
        }
        out.push((pos as u64, body.to_vec()));
        pos = end;
    }
    Ok(out)
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
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| io_err(path, e))
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
        })
    }

    fn write(&mut self, key: &str, value: Option<Bytes>) -> StoreResult<u64> {
        let mut revs = self.write_many(vec![(key.to_string(), value)])?;
        revs.pop()
            .ok_or_else(|| StoreError::Backend("no revision".into()))
    }

    /// Appends every record with one write call. Compaction, when due, is
    /// left to the caller (it may take long; it runs on the blocking pool).
    fn write_many(&mut self, items: Vec<(String, Option<Bytes>)>) -> StoreResult<Vec<u64>> {
        let mut buf = Vec::new();
        let mut revs = Vec::with_capacity(items.len());
        let mut rev = self.rev;
        for (key, value) in &items {
            rev += 1;
            let rec = KvRecord {
                key: key.clone(),
                rev,
                value: value
                    .as_ref()
                    .map(|v| serde_bytes::ByteBuf::from(v.to_vec())),
            };
            let body = rmp_serde::to_vec(&rec).map_err(|e| StoreError::Backend(e.to_string()))?;
            buf.extend_from_slice(&frame(&body));
            revs.push(rev);
        }
        self.file
            .write_all(&buf)
            .map_err(|e| io_err(&self.path, e))?;
        self.rev = rev;
        self.records += items.len() as u64;
        for ((key, value), r) in items.into_iter().zip(&revs) {
            match value {
                Some(v) => self.live.insert(key, (*r, v)),
                None => self.live.remove(&key),
            };
        }
        Ok(revs)
    }

    fn needs_compaction(&self) -> bool {
        self.records > 1024 && self.records > 2 * self.live.len() as u64
    }

    fn compact(&mut self) -> StoreResult<()> {
        let tmp = self.path.with_extension("compact");
        let mut out = Vec::new();
        for (key, (rev, v)) in &self.live {
            let rec = KvRecord {
                key: key.clone(),
                rev: *rev,
                value: Some(serde_bytes::ByteBuf::from(v.to_vec())),
            };
            let body = rmp_serde::to_vec(&rec).map_err(|e| StoreError::Backend(e.to_string()))?;
            out.extend_from_slice(&frame(&body));
        }
        std::fs::write(&tmp, &out).map_err(|e| io_err(&tmp, e))?;
        std::fs::rename(&tmp, &self.path).map_err(|e| io_err(&self.path, e))?;
        self.file = open_append(&self.path)?;
        self.records = self.live.len() as u64;
        Ok(())
    }
}

impl FileStore {
    /// Opens (creating) a store in `dir`. Files are opened on first use.
    pub fn open(dir: impl Into<PathBuf>) -> StoreResult<Self> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir).map_err(|e| io_err(&dir, e))?;
        Ok(Self {
            dir,
            state: Arc::new(Mutex::new(State::default())),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Runs `f` on the store's state. Appends to the page cache take
    /// microseconds, so they run inline (a blocking-pool hop costs more than
    /// the write); a bucket due for compaction is compacted on the blocking
    /// pool afterwards.
    async fn with<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Path, &mut State) -> StoreResult<T> + Send + 'static,
    ) -> StoreResult<T> {
        let (res, due) = {
            let mut guard = self
                .state
                .lock()
                .map_err(|_| StoreError::Backend("store lock poisoned".into()))?;
            let res = f(&self.dir, &mut guard);
            let due: Vec<String> = guard
                .buckets
                .iter()
                .filter(|(_, b)| b.needs_compaction())
                .map(|(n, _)| n.clone())
                .collect();
            (res, due)
        };
        if !due.is_empty() {
            let state = self.state.clone();
            let compacted = tokio::task::spawn_blocking(move || -> StoreResult<()> {
                let mut guard = state
                    .lock()
                    .map_err(|_| StoreError::Backend("store lock poisoned".into()))?;
                for name in due {
                    if let Some(b) = guard.buckets.get_mut(&name)
                        && b.needs_compaction()
                    {
                        b.compact()?;
                    }
                }
                Ok(())
            })
            .await
            .map_err(|e| StoreError::Backend(e.to_string()))?;
            if let Err(e) = compacted {
                tracing::warn!(error = %e, "store compaction failed; will retry");
            }
        }
        res
    }

    /// Like `with`, on the blocking pool, for work that reads whole files.
    async fn with_blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Path, &mut State) -> StoreResult<T> + Send + 'static,
    ) -> StoreResult<T> {
        let state = self.state.clone();
        let dir = self.dir.clone();
        tokio::task::spawn_blocking(move || {
            let mut guard = state
                .lock()
                .map_err(|_| StoreError::Backend("store lock poisoned".into()))?;
            f(&dir, &mut guard)
        })
        .await
        .map_err(|e| StoreError::Backend(e.to_string()))?
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
            .ok_or_else(|| StoreError::Backend("bucket vanished".into()))
    }

    fn log<'a>(dir: &Path, state: &'a mut State, name: &str) -> StoreResult<&'a mut Log> {
        check_name(name)?;
        if !state.logs.contains_key(name) {
            let path = dir.join("log").join(format!("{name}.log"));
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
            .ok_or_else(|| StoreError::Backend("log vanished".into()))
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
            b.write(&key, Some(value))
        })
        .await
    }

    pub async fn put_many(
        &self,
        bucket: &str,
        items: Vec<(String, Bytes)>,
    ) -> StoreResult<Vec<u64>> {
        for (k, _) in &items {
            validate_key(k)?;
        }
        let bucket = bucket.to_string();
        self.with(move |dir, st| {
            let b = Self::bucket(dir, st, &bucket)?;
            b.write_many(items.into_iter().map(|(k, v)| (k, Some(v))).collect())
        })
        .await
    }

    pub async fn append_many(&self, log: &str, records: Vec<Bytes>) -> StoreResult<u64> {
        let log = log.to_string();
        self.with(move |dir, st| {
            let l = Self::log(dir, st, &log)?;
            let end = l
                .file
                .metadata()
                .map(|m| m.len())
                .map_err(|e| io_err(&l.path, e))?;
            let mut buf = Vec::new();
            for r in &records {
                l.offsets.push(end + buf.len() as u64);
                buf.extend_from_slice(&frame(r));
            }
            l.file.write_all(&buf).map_err(|e| io_err(&l.path, e))?;
            Ok(l.offsets.len() as u64)
        })
        .await
    }

    pub async fn delete(&self, bucket: &str, key: &str) -> StoreResult<()> {
        validate_key(key)?;
        let (bucket, key) = (bucket.to_string(), key.to_string());
        self.with(move |dir, st| {
            let b = Self::bucket(dir, st, &bucket)?;
            if b.live.contains_key(&key) {
                b.write(&key, None)?;
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
