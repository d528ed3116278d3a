//! Issue 39: a worktree per task, on real git. Two tasks that start at
//! once in a fresh project make one `main` and two trees that do not see
//! each other; a finished task's diff is its own; `ff` brings it onto
//! `main` and the project directory (replayed on a `main` that moved),
//! `merge` makes a merge commit, a conflict names its paths and keeps the
//! branch, `push` reaches a local bare remote, a rollback resets the tree
//! to its base, and a path changed by hand in the project directory is
//! never overwritten.

use std::path::{Path, PathBuf};
use std::process::Command;

use xo_pipeline::git::Snapshots;
use xo_pipeline::worktree::{Merge, MergeError, Worktree, worktree_dir};

struct Rig {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    project: PathBuf,
    snaps: Snapshots,
}

fn rig() -> Rig {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("sandbox");
    let project = root.join("p");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("a.txt"), "one\ntwo\nthree\n").unwrap();
    std::fs::write(project.join("b.txt"), "bee\n").unwrap();
    let snaps = Snapshots::new(&tmp.path().join("data/p"), &project);
    Rig {
        root: root.clone(),
        project,
        snaps,
        _tmp: tmp,
    }
}

/// Git on XO's repository of the project, as a person would inspect it.
fn git(r: &Rig, args: &[&str]) -> String {
    let o = Command::new("git")
        .env("GIT_DIR", r.snaps.git_dir())
        .args(args)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

async fn open(r: &Rig, task: &str) -> Worktree {
    r.snaps
        .open_worktree(&r.project, &worktree_dir(&r.root, "p", task), task, None)
        .await
        .unwrap()
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap()
}

#[tokio::test]
async fn tasks_started_at_once_share_one_main_and_never_a_tree() {
    let r = rig();
    let (a, b) = tokio::join!(open(&r, "t1"), open(&r, "t2"));
    assert_eq!(a.base, b.base, "one main, made once");
    assert_eq!(git(&r, &["rev-parse", "main"]), a.base);
    assert_eq!(
        git(&r, &["log", "--format=%s", "main"]),
        "xo: the project as it was"
    );
    assert_ne!(a.dir, b.dir);
    assert_eq!(read(&a.dir.join("a.txt")), "one\ntwo\nthree\n");
    assert!(
        !a.dir.join(".git").exists(),
        "the agent's tree holds no repository"
    );
    std::fs::write(a.dir.join("new.txt"), "from t1\n").unwrap();
    assert!(!b.dir.join("new.txt").exists(), "t2 does not see t1's work");
    assert!(!r.project.join("new.txt").exists(), "nor does the project");
    assert_eq!(git(&r, &["rev-parse", "xo/t1"]), a.base);
    // Opened again (a resume), the same tree with its work.
    let again = open(&r, "t1").await;
    assert_eq!(again.base, a.base);
    assert_eq!(read(&again.dir.join("new.txt")), "from t1\n");
}

#[tokio::test]
async fn a_finished_task_is_its_diff_on_its_branch_and_ff_brings_it_to_the_project() {
    let r = rig();
    let t1 = open(&r, "t1").await;
    let t2 = open(&r, "t2").await;
    std::fs::write(t1.dir.join("a.txt"), "one\nTWO\nthree\nfour\n").unwrap();
    std::fs::write(t1.dir.join("c.txt"), "sea\n").unwrap();
    std::fs::remove_file(t1.dir.join("b.txt")).unwrap();
    let d = r
        .snaps
        .settle(&t1, "t1", "coder-1", "t1: edit a")
        .await
        .unwrap();
    assert_eq!(d.branch, "xo/t1");
    assert_eq!(d.base, t1.base);
    assert_eq!(git(&r, &["rev-parse", "xo/t1"]), d.commit);
    assert_eq!(
        git(&r, &["log", "-1", "--format=%an <%ae> %s", "xo/t1"]),
        "coder-1 <coder-1@xo> t1: edit a"
    );
    let files: Vec<(&str, &str, Option<u64>, Option<u64>)> = d
        .files
        .iter()
        .map(|f| (f.path.as_str(), f.status.as_str(), f.added, f.removed))
        .collect();
    assert_eq!(
        files,
        [
            ("a.txt", "M", Some(2), Some(1)),
            ("b.txt", "D", Some(0), Some(1)),
            ("c.txt", "A", Some(1), Some(0)),
        ]
    );
    assert_eq!(d.lines(), (3, 2));
    assert!(d.patch.contains("-two\n+TWO\n"), "{}", d.patch);
    assert!(!d.truncated);
    // ff: main is still the base: main is the task's commit, and the
    // project directory follows.
    let to = r
        .snaps
        .integrate(&d, Merge::Ff, &r.project, "", "t1: edit a")
        .await
        .unwrap();
    assert_eq!(to, Some(format!("main {}", d.commit)));
    assert_eq!(git(&r, &["rev-parse", "main"]), d.commit);
    assert_eq!(read(&r.project.join("a.txt")), "one\nTWO\nthree\nfour\n");
    assert!(!r.project.join("b.txt").exists());
    assert_eq!(read(&r.project.join("c.txt")), "sea\n");
    // t2 started from the old main and changed another file: its change is
    // replayed on the main that moved, one parent (linear history).
    std::fs::write(t2.dir.join("d.txt"), "dee\n").unwrap();
    let d2 = r
        .snaps
        .settle(&t2, "t2", "coder-2", "t2: add d")
        .await
        .unwrap();
    assert_eq!(d2.files.len(), 1, "only its own change: {:?}", d2.files);
    r.snaps
        .integrate(&d2, Merge::Ff, &r.project, "", "t2: add d")
        .await
        .unwrap();
    let main = git(&r, &["rev-parse", "main"]);
    assert_eq!(git(&r, &["rev-parse", "main^"]), d.commit);
    assert_eq!(
        git(&r, &["rev-list", "--parents", "-n1", "main"])
            .split(' ')
            .count(),
        2
    );
    assert_eq!(read(&r.project.join("d.txt")), "dee\n");
    assert_eq!(read(&r.project.join("c.txt")), "sea\n", "t1's work stays");
    // A third task from the old base that changes the line t1 changed:
    // a conflict naming the path, main unmoved, the branch kept.
    let t3 = r
        .snaps
        .open_worktree(
            &r.project,
            &worktree_dir(&r.root, "p", "t3"),
            "t3",
            Some("xo/t2"),
        )
        .await
        .unwrap();
    assert_eq!(t3.base, d2.commit, "from the branch the task names");
    std::fs::write(t3.dir.join("a.txt"), "one\nzwei\nthree\n").unwrap();
    let d3 = r
        .snaps
        .settle(&t3, "t3", "coder-3", "t3: a again")
        .await
        .unwrap();
    let e = r
        .snaps
        .integrate(&d3, Merge::Ff, &r.project, "", "t3")
        .await
        .unwrap_err();
    match &e {
        MergeError::Conflict { paths, branch } => {
            assert_eq!(paths, &["a.txt"]);
            assert_eq!(branch, "xo/t3");
        }
        other => panic!("{other}"),
    }
    assert!(
        e.to_string()
            .starts_with("MERGE_CONFLICT: a.txt changed on main too"),
        "{e}"
    );
    assert_eq!(git(&r, &["rev-parse", "main"]), main);
    assert_eq!(git(&r, &["rev-parse", "xo/t3"]), d3.commit);
    assert_eq!(read(&r.project.join("a.txt")), "one\nTWO\nthree\nfour\n");
}

#[tokio::test]
async fn merge_makes_a_merge_commit_and_push_reaches_the_remote() {
    let r = rig();
    let t1 = open(&r, "t1").await;
    std::fs::write(t1.dir.join("e.txt"), "e\n").unwrap();
    let d = r.snaps.settle(&t1, "t1", "u", "t1: e").await.unwrap();
    r.snaps
        .integrate(&d, Merge::Merge, &r.project, "", "Merge xo/t1: e")
        .await
        .unwrap();
    let parents = git(&r, &["rev-list", "--parents", "-n1", "main"]);
    assert_eq!(parents.split(' ').count(), 3, "a merge commit: {parents}");
    assert!(parents.ends_with(&d.commit));
    assert_eq!(read(&r.project.join("e.txt")), "e\n");
    // push: the branch in a local bare remote.
    let remote = r.root.parent().unwrap().join("remote.git");
    assert!(
        Command::new("git")
            .args(["init", "-q", "--bare"])
            .arg(&remote)
            .status()
            .unwrap()
            .success()
    );
    let url = remote.display().to_string();
    let to = r
        .snaps
        .integrate(&d, Merge::Push, &r.project, &url, "")
        .await
        .unwrap();
    assert_eq!(to, Some(format!("{url} xo/t1")));
    let o = Command::new("git")
        .env("GIT_DIR", &remote)
        .args(["rev-parse", "xo/t1"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), d.commit);
    // A remote that is not there: said.
    let e = r
        .snaps
        .integrate(&d, Merge::Push, &r.project, "/nonexistent/remote.git", "")
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("push xo/t1") && e.to_string().contains("no repository"),
        "{e}"
    );
    // A remote whose branch moved elsewhere refuses: said, with its words.
    let other = Command::new("git")
        .env("GIT_DIR", &remote)
        .args(["commit-tree", "-m", "elsewhere"])
        .arg(format!("{}^{{tree}}", d.base))
        .output()
        .unwrap();
    let other = String::from_utf8_lossy(&other.stdout).trim().to_string();
    // (The remote has the base's objects: the branch was pushed.)
    assert!(
        Command::new("git")
            .env("GIT_DIR", &remote)
            .args(["update-ref", "refs/heads/xo/t1", &other])
            .status()
            .unwrap()
            .success(),
        "{other}"
    );
    let e = r
        .snaps
        .integrate(&d, Merge::Push, &r.project, &url, "")
        .await
        .unwrap_err();
    assert!(e.to_string().contains("push xo/t1"), "{e}");
}

#[tokio::test]
async fn a_rollback_resets_the_tree_to_its_base_and_hand_edits_in_the_project_are_kept() {
    let r = rig();
    let t1 = open(&r, "t1").await;
    let tree = r.snaps.for_tree(&t1.dir);
    std::fs::write(t1.dir.join("a.txt"), "half done\n").unwrap();
    std::fs::write(t1.dir.join("junk.txt"), "junk\n").unwrap();
    assert_eq!(
        tree.rollback(&t1.dir, "t1").await.unwrap(),
        Some(t1.base.clone())
    );
    assert_eq!(read(&t1.dir.join("a.txt")), "one\ntwo\nthree\n");
    assert!(!t1.dir.join("junk.txt").exists());
    // The person edits a.txt in the project directory; the task changes
    // it too: main moves, the hand edit is not overwritten.
    std::fs::write(r.project.join("a.txt"), "mine\n").unwrap();
    std::fs::write(t1.dir.join("a.txt"), "theirs\n").unwrap();
    std::fs::write(t1.dir.join("f.txt"), "f\n").unwrap();
    let d = r.snaps.settle(&t1, "t1", "u", "t1").await.unwrap();
    r.snaps
        .integrate(&d, Merge::Ff, &r.project, "", "t1")
        .await
        .unwrap();
    assert_eq!(git(&r, &["rev-parse", "main"]), d.commit);
    assert_eq!(read(&r.project.join("a.txt")), "mine\n", "never forced");
    r.snaps.remove_worktree(&t1, "t1").await;
    assert!(!t1.dir.exists());
    assert_eq!(
        git(&r, &["rev-parse", "xo/t1"]),
        d.commit,
        "the branch stays"
    );
    // The next task starts from main with what a person changed in the
    // directory — unless a change conflicts with main's (a.txt here): then
    // the directory's changes are left out (as a whole, said in the log)
    // and the directory keeps them.
    std::fs::write(r.project.join("g.txt"), "by hand\n").unwrap();
    let t2 = open(&r, "t2").await;
    assert_eq!(read(&t2.dir.join("a.txt")), "theirs\n");
    assert_eq!(read(&t2.dir.join("f.txt")), "f\n");
    assert!(!t2.dir.join("g.txt").exists());
    assert_eq!(git(&r, &["rev-parse", "xo/t2"]), t2.base);
    assert_eq!(read(&r.project.join("a.txt")), "mine\n");
    // Nothing new by hand: no commit.
    let t3 = open(&r, "t3").await;
    assert_eq!(t3.base, t2.base);
}

/// A change made by hand that main did not touch is on main before the
/// next task starts, with a commit saying so.
#[tokio::test]
async fn hand_edits_in_the_project_directory_reach_the_next_task() {
    let r = rig();
    let t1 = open(&r, "t1").await;
    std::fs::write(r.project.join("b.txt"), "bee, edited\n").unwrap();
    let t2 = open(&r, "t2").await;
    assert_eq!(
        read(&t1.dir.join("b.txt")),
        "bee\n",
        "a running task's tree is its own"
    );
    assert_eq!(read(&t2.dir.join("b.txt")), "bee, edited\n");
    assert_eq!(git(&r, &["rev-parse", "main"]), t2.base);
    assert_eq!(git(&r, &["rev-parse", "main^"]), t1.base);
    assert_eq!(
        git(&r, &["log", "-1", "--format=%s", "main"]),
        "xo: the project directory as it was when t2 started"
    );
}

/// libgit2 reads no configuration but XO's repository's: a user's
/// `~/.gitconfig` (which an unconfined agent can write) that ignores every
/// `.txt` and rewrites the push URL changes neither the snapshot nor where
/// a push goes. Run in a child process with its own `HOME` (libgit2 reads
/// it once per process).
#[test]
fn the_users_git_configuration_is_not_read() {
    const CHILD: &str = "XO_TEST_GIT_HOME_CHILD";
    let Ok(home) = std::env::var(CHILD) else {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("home");
        std::fs::create_dir_all(home.join(".config/git")).unwrap();
        std::fs::write(home.join("ignore"), "*.txt\n").unwrap();
        let elsewhere = tmp.path().join("elsewhere.git");
        std::fs::write(
            home.join(".gitconfig"),
            format!(
                "[core]\n\texcludesFile = {}\n[url \"{}\"]\n\tpushInsteadOf = /\n",
                home.join("ignore").display(),
                elsewhere.display()
            ),
        )
        .unwrap();
        std::fs::write(home.join(".config/git/ignore"), "*.txt\n").unwrap();
        // The vector is live for git itself.
        let probe = tmp.path().join("probe");
        std::fs::create_dir_all(&probe).unwrap();
        std::fs::write(probe.join("a.txt"), "a").unwrap();
        let ignored = Command::new("git")
            .current_dir(&probe)
            .env("HOME", &home)
            .env_remove("GIT_CONFIG_GLOBAL")
            .env_remove("XDG_CONFIG_HOME")
            .args(["-c", "init.defaultBranch=main", "init", "-q"])
            .status()
            .unwrap()
            .success()
            && Command::new("git")
                .current_dir(&probe)
                .env("HOME", &home)
                .env_remove("GIT_CONFIG_GLOBAL")
                .env_remove("XDG_CONFIG_HOME")
                .args(["check-ignore", "-q", "a.txt"])
                .status()
                .unwrap()
                .success();
        assert!(ignored, "git itself reads the planted ~/.gitconfig");
        let out = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "the_users_git_configuration_is_not_read",
                "--nocapture",
            ])
            .env(CHILD, &home)
            .env("HOME", &home)
            .env_remove("XDG_CONFIG_HOME")
            .output()
            .unwrap();
        assert!(
            out.status.success() && String::from_utf8_lossy(&out.stdout).contains("1 passed"),
            "the child: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        return;
    };
    assert_eq!(std::env::var("HOME").unwrap(), home);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let r = rig();
        let t1 = open(&r, "t1").await;
        assert_eq!(
            read(&t1.dir.join("a.txt")),
            "one\ntwo\nthree\n",
            "the .txt files are in main"
        );
        std::fs::write(t1.dir.join("c.txt"), "c\n").unwrap();
        let d = r.snaps.settle(&t1, "t1", "u", "t1: c").await.unwrap();
        assert!(
            d.files.iter().any(|f| f.path == "c.txt" && f.status == "A"),
            "{:?}",
            d.files
        );
        let remote = r.root.parent().unwrap().join("remote.git");
        assert!(
            Command::new("git")
                .args(["init", "-q", "--bare"])
                .arg(&remote)
                .status()
                .unwrap()
                .success()
        );
        r.snaps
            .integrate(
                &d,
                Merge::Push,
                &r.project,
                &remote.display().to_string(),
                "",
            )
            .await
            .unwrap();
        let o = Command::new("git")
            .env("GIT_DIR", &remote)
            .args(["rev-parse", "xo/t1"])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), d.commit);
    });
}

/// A change larger than the kept patch: the record holds it cut at a line,
/// and the whole of it is read from XO's repository (`xo task diff` on the
/// runner's machine), the same as git's own diff.
#[tokio::test]
async fn a_large_patch_is_cut_in_the_record_and_whole_in_the_repository() {
    let r = rig();
    let t1 = open(&r, "t1").await;
    let big: String = (0..10_000).map(|i| format!("line {i}\n")).collect();
    std::fs::write(t1.dir.join("big.txt"), &big).unwrap();
    std::fs::write(t1.dir.join("bin.dat"), [0u8, 1, 2, 0, 255]).unwrap();
    let d = r.snaps.settle(&t1, "t1", "u", "t1: big").await.unwrap();
    assert!(d.truncated);
    assert!(d.patch.len() <= xo_proto::queue::MAX_PATCH);
    assert!(d.patch.ends_with('\n'), "cut at a line");
    let big_file = d.files.iter().find(|f| f.path == "big.txt").unwrap();
    assert_eq!((big_file.added, big_file.removed), (Some(10_000), Some(0)));
    let bin = d.files.iter().find(|f| f.path == "bin.dat").unwrap();
    assert_eq!(bin.status, "A");
    assert_eq!(bin.added, None, "a binary file has no lines");
    let whole = xo_pipeline::git::whole_patch(&r.snaps.git_dir(), &d.base, &d.commit).unwrap();
    assert!(whole.len() > xo_proto::queue::MAX_PATCH);
    assert!(whole.starts_with(&d.patch[..200]));
    // Git's own diff has the same changed lines.
    let theirs = git(&r, &["diff", "--no-color", &d.base, &d.commit]);
    let lines = |p: &str| {
        p.lines()
            .filter(|l| l.starts_with('+') || l.starts_with('-') || l.starts_with("diff --git"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(lines(&whole), lines(&theirs));
    assert!(whole.contains("+line 9999\n"));
}
