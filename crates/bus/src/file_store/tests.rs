//! Group commit of the file store: writers of a file share a sync, none
//! returns before a sync that began after its write has ended, files sync
//! side by side, a failed sync is tried again.

use super::*;
use std::sync::Condvar;

/// A syncer held shut until opened (for every file, or those whose path
/// holds `only`), counting the files it was given, and failing the first
/// `fail` calls; with `lose`, a failed sync loses what it was to write, as
/// Linux may (each file cut back to its length at its last good sync).
#[derive(Default)]
struct Gate {
    only: Option<&'static str>,
    open: Mutex<bool>,
    opened: Condvar,
    calls: Mutex<Vec<usize>>,
    fail: Mutex<usize>,
    lose: bool,
    synced_len: Mutex<HashMap<PathBuf, u64>>,
    /// Syncs that have taken their files (and are held, if shut).
    entered: std::sync::atomic::AtomicUsize,
}

impl Gate {
    fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.opened.notify_all();
    }
}

fn gated(dir: &Path, gate: &Arc<Gate>) -> FileStore {
    let mut store = FileStore::open_with(dir, SyncMode::Always).unwrap();
    let g = gate.clone();
    store.syncer = Arc::new(move |files: &[(PathBuf, File)]| {
        let held = match g.only {
            Some(only) => files
                .iter()
                .any(|(p, _)| p.to_string_lossy().contains(only)),
            None => true,
        };
        g.entered.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let mut open = g.open.lock().unwrap();
        while held && !*open {
            open = g.opened.wait(open).unwrap();
        }
        drop(open);
        g.calls.lock().unwrap().push(files.len());
        let mut fail = g.fail.lock().unwrap();
        let mut synced_len = g.synced_len.lock().unwrap();
        if *fail > 0 {
            *fail -= 1;
            for (p, f) in files.iter().filter(|_| g.lose) {
                f.set_len(synced_len.get(p).copied().unwrap_or(0)).unwrap();
            }
            return Err(StoreError::Broken("the test's disk refused the sync"));
        }
        sync_files(files)?;
        for (p, f) in files {
            synced_len.insert(p.clone(), f.metadata().unwrap().len());
        }
        Ok(())
    });
    store
}

/// Waits until the store has taken `n` writes (each task writes at its
/// first poll; this yields until they all have).
async fn written(store: &FileStore, n: u64) {
    while store.writes() < n {
        tokio::task::yield_now().await;
    }
}

/// Puts `key` in bucket `b` on a task of its own, the store's first write,
/// and returns once its sync has begun (and is held by the shut gate): the
/// writes made after are not covered by it.
async fn first_put(
    store: &FileStore,
    gate: &Gate,
    key: &'static str,
) -> tokio::task::JoinHandle<StoreResult<u64>> {
    let s = store.clone();
    let put =
        tokio::spawn(async move { s.put("b", key, Bytes::from_static(b"v"), Cas::Any).await });
    while gate.entered.load(std::sync::atomic::Ordering::SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    put
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_waiting_on_a_sync_share_the_next_one() {
    let dir = tempfile::tempdir().unwrap();
    let gate = Arc::new(Gate::default());
    let store = gated(dir.path(), &gate);
    // The first writer's sync is held shut: it cannot end.
    let first = first_put(&store, &gate, "k0").await;
    // Ten more writers of the same file while it is held.
    let mut rest = Vec::new();
    for i in 1..=10 {
        let s = store.clone();
        rest.push(tokio::spawn(async move {
            s.put("b", &format!("k{i}"), Bytes::from_static(b"v"), Cas::Any)
                .await
        }));
    }
    written(&store, 11).await;
    // None has returned: each waits for a sync that covers its write.
    assert!(!first.is_finished());
    assert!(rest.iter().all(|t| !t.is_finished()));
    assert_eq!(store.syncs(), 1, "one sync running, the others waiting");
    gate.open();
    first.await.unwrap().unwrap();
    for t in rest {
        t.await.unwrap().unwrap();
    }
    // The held sync, then one for the ten writes made during it: two,
    // where one a call would be eleven.
    assert_eq!(store.syncs(), 2);
    assert_eq!(*gate.calls.lock().unwrap(), vec![1, 1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_sync_side_by_side() {
    let dir = tempfile::tempdir().unwrap();
    let gate = Arc::new(Gate {
        only: Some("b.kv"),
        ..Gate::default()
    });
    let store = gated(dir.path(), &gate);
    // The bucket's sync is held shut...
    let held = first_put(&store, &gate, "k").await;
    // ...and a log's write is synced and answered meanwhile.
    store.append("l", Bytes::from_static(b"r")).await.unwrap();
    assert!(!held.is_finished());
    gate.open();
    held.await.unwrap().unwrap();
    assert_eq!(store.syncs(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_sync_is_the_callers_error_and_asking_again_syncs_again() {
    let dir = tempfile::tempdir().unwrap();
    let gate = Arc::new(Gate::default());
    *gate.fail.lock().unwrap() = 1;
    gate.open();
    let store = gated(dir.path(), &gate);
    let (_, staged) = store
        .put_many_staged("b", vec![("k".into(), Bytes::from_static(b"v"))])
        .await
        .unwrap();
    let err = staged.durable().await.unwrap_err();
    assert!(err.to_string().contains("refused the sync"), "{err}");
    // Asked again: the file the failed sync could not make durable is
    // synced (its handle was kept for it).
    staged.durable().await.unwrap();
    assert_eq!(*gate.calls.lock().unwrap(), vec![1, 1]);
    assert_eq!(store.syncs(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_failed_sync_lost_is_written_again_in_order_before_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let gate = Arc::new(Gate {
        lose: true,
        ..Gate::default()
    });
    gate.open();
    let store = gated(dir.path(), &gate);
    let v = |s: &'static str| Bytes::from_static(s.as_bytes());
    store.put("b", "before", v("0"), Cas::Any).await.unwrap();
    store.append("l", v("r1")).await.unwrap();
    // Two writes of the bucket made before any sync (the second written
    // while the first waits for its sync)...
    let (_, first) = store
        .put_many_staged("b", vec![("k".into(), v("1")), ("a".into(), v("x"))])
        .await
        .unwrap();
    let (_, second) = store
        .put_many_staged("b", vec![("k".into(), v("2"))])
        .await
        .unwrap();
    // ...and the sync fails, losing both (the file is cut back).
    *gate.fail.lock().unwrap() = 1;
    first.durable().await.unwrap_err();
    // Asked again: both are written again, in order, and synced.
    first.durable().await.unwrap();
    second.durable().await.unwrap();
    // A log's append whose sync fails and loses it, then one that is
    // written at the cut-back end: the next sync writes both in order.
    *gate.fail.lock().unwrap() = 1;
    store.append("l", v("r2")).await.unwrap_err();
    store.append("l", v("r3")).await.unwrap();
    drop(store);
    let again = FileStore::open(dir.path()).unwrap();
    let get = |k: &'static str| {
        let again = again.clone();
        async move { again.get("b", k).await.unwrap().map(|e| e.value) }
    };
    assert_eq!(get("before").await, Some(v("0")));
    assert_eq!(get("k").await, Some(v("2")), "the later write wins");
    assert_eq!(get("a").await, Some(v("x")));
    let records = read_frames(&dir.path().join("kv").join("b.kv")).unwrap();
    assert_eq!(records.len(), 4, "each record once");
    let log: Vec<Bytes> = again
        .read("l", 1, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|(_, r)| r)
        .collect();
    assert_eq!(log, vec![v("r1"), v("r2"), v("r3")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_waits_for_no_sync() {
    use futures::FutureExt;
    let dir = tempfile::tempdir().unwrap();
    let gate = Arc::new(Gate::default());
    let store = gated(dir.path(), &gate);
    // A write whose sync is held shut...
    let held = first_put(&store, &gate, "k").await;
    // ...and reads answer at their first poll meanwhile (a read that
    // waited for a sync would be pending here).
    let got = store.get("b", "k").now_or_never().expect("a read waited");
    assert_eq!(got.unwrap().unwrap().value, Bytes::from_static(b"v"));
    let keys = store.keys("b").now_or_never().expect("a read waited");
    assert_eq!(keys.unwrap(), vec!["k".to_string()]);
    assert!(!held.is_finished());
    gate.open();
    held.await.unwrap().unwrap();
    assert_eq!(store.syncs(), 1);
}

#[test]
fn after_compaction_the_new_file_is_the_one_synced() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let store = FileStore::open_with(dir.path(), SyncMode::Batch).unwrap();
    let put = |i: u32| {
        rt.block_on(store.put("b", "k", Bytes::from(i.to_string()), Cas::Any))
            .unwrap();
    };
    // Rewrites of one key until the bucket is compacted (off the lock,
    // which nobody waits for: the writes go on until it has ended).
    for i in 0..1100 {
        put(i);
    }
    // A write after it: the handle listed to sync is the new file's. (The
    // background sync may take the list between the write and the look:
    // then write again.)
    for i in 0..10_000 {
        put(i);
        let g = store.state.lock().unwrap();
        let b = &g.buckets["b"];
        if b.compacting.is_some() || b.records >= 1100 {
            continue;
        }
        if let Some(f) = g.files.get(&b.path).and_then(|f| f.dirty.as_ref()) {
            let current = b.file.metadata().unwrap().ino();
            assert_eq!(
                f.metadata().unwrap().ino(),
                current,
                "a handle of the replaced file"
            );
            return;
        }
    }
    panic!("the bucket was never compacted, or its new file never listed to sync after a write");
}

/// Rewrites of ten keys straight into the bucket (no compaction started):
/// dead records then far outnumber live ones.
fn churned(store: &FileStore) {
    let mut g = store.state.lock().unwrap();
    let b = FileStore::bucket(&store.dir, &mut g, "b").unwrap();
    for i in 0..1100u32 {
        b.write(&format!("k{}", i % 10), Some(Bytes::from(i.to_string())))
            .unwrap();
    }
    assert!(b.needs_compaction());
}

/// Begins a compaction of bucket `b` by hand, as a write that finds it
/// due does.
fn begun(store: &FileStore) -> compact::Snapshot {
    let mut g = store.state.lock().unwrap();
    g.buckets.get_mut("b").unwrap().begin_compaction("b")
}

fn kv_dir_names(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir.join("kv"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// A compaction writes the new file with no lock held: the writes made
/// meanwhile are not held up, and they follow the snapshot into the new
/// file (a change, a delete, a new key), which a restart reads whole.
#[test]
fn writes_made_while_a_compaction_runs_follow_it_into_the_new_file() {
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let store = FileStore::open_with(dir.path(), SyncMode::Always).unwrap();
    churned(&store);
    let path = dir.path().join("kv").join("b.kv");
    let before = std::fs::metadata(&path).unwrap().len();
    let snap = begun(&store);
    let written = compact::write(&snap);
    // Meanwhile: the store answers writes (none waits for the compaction,
    // and none starts another).
    rt.block_on(async {
        store
            .put("b", "k1", Bytes::from("changed"), Cas::Any)
            .await?;
        store.delete("b", "k2").await?;
        store.put("b", "fresh", Bytes::from("new"), Cas::Any).await
    })
    .unwrap();
    assert!(
        store.state.lock().unwrap().buckets["b"]
            .compacting
            .is_some()
    );
    compact::finish(&store.state, "b", written).unwrap();
    {
        let g = store.state.lock().unwrap();
        let b = &g.buckets["b"];
        assert!(b.compacting.is_none());
        assert_eq!(b.records, 10 + 3, "the snapshot's ten and the three since");
        assert!(!b.needs_compaction());
    }
    let after = std::fs::metadata(&path).unwrap().len();
    assert!(after < before / 50, "{after} bytes, from {before}");
    assert_eq!(
        kv_dir_names(dir.path()),
        vec!["b.kv".to_string()],
        "no temporary file left"
    );
    // A write after it lands in the new file, and a restart reads it all.
    rt.block_on(store.put("b", "k3", Bytes::from("later"), Cas::Any))
        .unwrap();
    let keys = |s: &FileStore| rt.block_on(s.keys("b")).unwrap();
    let value = |s: &FileStore, k: &str| {
        rt.block_on(s.get("b", k))
            .unwrap()
            .map(|e| String::from_utf8(e.value.to_vec()).unwrap())
    };
    let again = FileStore::open_with(dir.path(), SyncMode::Always).unwrap();
    assert_eq!(keys(&again), keys(&store));
    for k in keys(&store) {
        assert_eq!(value(&again, &k), value(&store, &k), "key {k}");
    }
    assert_eq!(value(&again, "k1").as_deref(), Some("changed"));
    assert_eq!(value(&again, "k2"), None);
    assert_eq!(value(&again, "fresh").as_deref(), Some("new"));
    assert_eq!(value(&again, "k3").as_deref(), Some("later"));
    assert_eq!(value(&again, "k0").as_deref(), Some("1090"));
}

/// A compaction that fails leaves the old file as it was, whole, and the
/// bucket is compacted again when next due.
#[test]
fn a_failed_compaction_keeps_the_old_file_and_is_tried_again() {
    let dir = tempfile::tempdir().unwrap();
    let store = FileStore::open_with(dir.path(), SyncMode::Always).unwrap();
    churned(&store);
    let path = dir.path().join("kv").join("b.kv");
    let before = std::fs::read(&path).unwrap();
    let _snap = begun(&store);
    assert!(!store.state.lock().unwrap().buckets["b"].needs_compaction());
    let err = compact::finish(
        &store.state,
        "b",
        Err(StoreError::Broken("the disk is full")),
    )
    .unwrap_err();
    assert!(err.to_string().contains("the disk is full"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), before);
    let g = store.state.lock().unwrap();
    assert!(g.buckets["b"].compacting.is_none());
    assert!(g.buckets["b"].needs_compaction(), "due again");
}
