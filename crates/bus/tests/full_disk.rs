//! Issue 23, item 7: after a full disk the next start was refused until
//! `xo store repair`. A write that fails part-way left a partial record;
//! the next write that fit buried it in the middle of the file, which the
//! next start reads as damage. Now a failed append is cut back off.
//!
//! A full disk is made with the file-size limit (RLIMIT_FSIZE): a write
//! past it fails with EFBIG part-way, as on ENOSPC. The limit is the
//! process's, and going past it raises SIGXFSZ, which ends a process: the
//! test runs again in a child started with SIGXFSZ ignored (through `sh`'s
//! `trap`), the only test of that child.

use bytes::Bytes;
use nix::sys::resource::{Resource, getrlimit, setrlimit};
use xo_bus::{Cas, FileStore};

const CHILD: &str = "XO_FULL_DISK_CHILD";

#[test]
fn a_write_cut_short_by_a_full_disk_leaves_a_store_that_starts() {
    if std::env::var_os(CHILD).is_some() {
        tokio::runtime::Runtime::new()
            .unwrap()
            .block_on(full_disk());
        return;
    }
    let me = std::env::current_exe().unwrap();
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg("trap '' XFSZ; exec \"$0\" --exact a_write_cut_short_by_a_full_disk_leaves_a_store_that_starts --nocapture")
        .arg(&me)
        .env(CHILD, "1")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(text.contains("1 passed"), "{text}");
}

async fn full_disk() {
    let tmp = tempfile::tempdir().unwrap();
    let store = FileStore::open(tmp.path()).unwrap();
    for i in 0..10 {
        store
            .put(
                "queue",
                &format!("k{i}"),
                Bytes::from(vec![b'a'; 100]),
                Cas::Any,
            )
            .await
            .unwrap();
    }
    let file = tmp.path().join("kv/queue.kv");
    let size = std::fs::metadata(&file).unwrap().len();
    let (soft, hard) = getrlimit(Resource::RLIMIT_FSIZE).unwrap();
    // Room for 50 more bytes: a 4 KB record is cut part-way.
    setrlimit(Resource::RLIMIT_FSIZE, size + 50, hard).unwrap();
    let full = store
        .put("queue", "big", Bytes::from(vec![b'b'; 4096]), Cas::Any)
        .await;
    // The disk has room again.
    setrlimit(Resource::RLIMIT_FSIZE, soft, hard).unwrap();
    let err = full
        .expect_err("the write past the limit fails")
        .to_string();
    assert!(err.contains("queue.kv"), "{err}");
    assert_eq!(
        std::fs::metadata(&file).unwrap().len(),
        size,
        "the partial record is cut off"
    );
    store
        .put("queue", "after", Bytes::from_static(b"fits"), Cas::Any)
        .await
        .unwrap();
    drop(store);
    // The next start reads every record written whole.
    let store = FileStore::open(tmp.path()).unwrap();
    for i in 0..10 {
        assert!(
            store
                .get("queue", &format!("k{i}"))
                .await
                .unwrap()
                .is_some()
        );
    }
    assert!(store.get("queue", "big").await.unwrap().is_none());
    let after = store.get("queue", "after").await.unwrap().unwrap();
    assert_eq!(after.value, Bytes::from_static(b"fits"));
}

/// `xo store repair` names what it dropped: a key whose later revision is
/// kept lost nothing; one with no later revision is said to be lost.
#[test]
fn a_repair_names_the_keys_it_dropped_and_whether_they_are_lost() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let store = FileStore::open(tmp.path()).unwrap();
        for (k, v) in [("a", "1"), ("b", "1"), ("a", "2")] {
            store
                .put("queue", k, Bytes::from(v.to_string()), Cas::Any)
                .await
                .unwrap();
        }
    });
    let file = tmp.path().join("kv/queue.kv");
    let mut data = std::fs::read(&file).unwrap();
    // Each record: 4 bytes length, 4 bytes checksum, body. Damage the
    // bodies of the first two (a rev 1, b rev 2) by flipping their checksums.
    let mut pos = 0;
    for _ in 0..2 {
        let len = u32::from_le_bytes(data[pos..pos + 4].try_into().unwrap()) as usize;
        data[pos + 4] ^= 0xff;
        pos += 8 + len;
    }
    std::fs::write(&file, &data).unwrap();
    let r = xo_bus::file_store::repair_file(&file)
        .unwrap()
        .expect("damage found");
    assert_eq!(r.lost.len(), 2, "{:?}", r.lost);
    assert!(
        r.lost[0].contains("key a rev 1") && r.lost[0].contains("nothing is lost"),
        "{}",
        r.lost[0]
    );
    assert!(
        r.lost[1].contains("key b rev 2") && r.lost[1].contains("LOST"),
        "{}",
        r.lost[1]
    );
}
