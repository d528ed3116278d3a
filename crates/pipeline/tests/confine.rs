//! Issue 23, item 6: an agent's command once read `/proc/$PPID/environ`
//! (the runner's API key and NATS password) and wrote anywhere on the
//! filesystem. Confined with Landlock, it writes only in its task's folder
//! (and temp), cannot read the runner's `/proc` or signal it. The same
//! agent unconfined shows what the test would miss if confinement broke.

use std::path::{Path, PathBuf};

use xo_pipeline::driver::{Driver, ScriptDriver, Turns};
use xo_pipeline::sandbox::Sandbox;
use xo_pipeline::{Job, Outcome, Pipeline};
use xo_proto::queue::{Task, TaskRecord};
use xo_runtime::config::{ConfineMode, Isolation, RunnerConfig};

/// A folder outside the temp folder (which confined agents may write):
/// the checkout may itself be under it (a fresh clone in /tmp).
fn outside_temp() -> PathBuf {
    let temp = std::env::temp_dir();
    let candidates = [
        Some(PathBuf::from("/var/tmp")),
        std::env::var_os("HOME").map(PathBuf::from),
        Some(PathBuf::from(env!("CARGO_TARGET_TMPDIR"))),
    ];
    candidates
        .into_iter()
        .flatten()
        .find(|p| {
            !p.starts_with(&temp) && {
                let probe = p.join(format!(".xo-probe-{}", std::process::id()));
                let ok = std::fs::create_dir_all(&probe).is_ok();
                let _ = std::fs::remove_dir(&probe);
                ok
            }
        })
        .expect("a writable folder outside the temp folder (/var/tmp, HOME or the target dir)")
}

/// A job whose task runs `script` (an `xo-script` block) in its project.
fn scripted(id: &str, script: &str) -> Job {
    Job {
        task_list: None,
        record: TaskRecord::running(
            Task::new(
                id,
                "work",
                format!("Work.\n```xo-script\n{script}\n```\n"),
                "coder",
            ),
            1,
        ),
        goal: Some("g".into()),
        manual: false,
        knowledge: String::new(),
        directives: Vec::new(),
        settings: Default::default(),
    }
}

/// What the agent managed: (wrote outside, read the runner's environment,
/// signalled the runner, wrote in its own folder).
async fn attempt(mode: ConfineMode) -> (bool, bool, bool, bool) {
    let tmp = tempfile::tempdir().unwrap();
    let outside = outside_temp().join(format!("xo-confine-{}-{:?}", std::process::id(), mode));
    std::fs::create_dir_all(&outside).unwrap();
    let cfg = RunnerConfig {
        default_project: "p".into(),
        confine: mode,
        ..Default::default()
    };
    let sandbox = Sandbox::open(&tmp.path().join("sandbox")).unwrap();
    let project = sandbox.project_dir("p").unwrap();
    let pipeline = Pipeline::new(cfg, sandbox, tmp.path().join("data"), "u1", None)
        .unwrap()
        .confined()
        .unwrap();
    assert_eq!(pipeline.is_confined(), mode != ConfineMode::Off);
    let line = format!(
        "echo mine > inside.txt; (echo x > {out}/x) 2> write.err; (cat /proc/$PPID/environ > env.txt) 2> env.err; if kill -0 $PPID 2> kill.err; then echo yes > signalled; fi; true",
        out = outside.display()
    );
    let script = format!(
        "turn_ms = 0\n[[run]]\nsteps = [{{ run = {line:?} }}, {{ reply = '{{\"status\": \"ok\", \"message\": \"done\"}}' }}]"
    );
    let job = scripted("t1", &script);
    let mut driver = Driver::Script(ScriptDriver::from_file(None).unwrap());
    let out = pipeline
        .run(&mut driver, &job, Turns::default(), None)
        .await;
    assert!(matches!(out, Outcome::Completed(_)), "{out:?}");
    let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
    let result = (
        outside.join("x").exists(),
        size(&project.join("env.txt")) > 0,
        project.join("signalled").exists(),
        project.join("inside.txt").exists(),
    );
    let _ = std::fs::remove_dir_all(&outside);
    result
}

#[tokio::test]
async fn a_confined_agent_writes_only_its_folder_and_cannot_reach_the_runner() {
    assert!(
        xo_pipeline::confine::available(),
        "this kernel has no Landlock: the confinement cannot be tested here"
    );
    // Unconfined, the same agent does all of it: the checks can see it.
    assert_eq!(attempt(ConfineMode::Off).await, (true, true, true, true));
    // Confined: only its own folder.
    assert_eq!(
        attempt(ConfineMode::Landlock).await,
        (false, false, false, true)
    );
    assert_eq!(
        attempt(ConfineMode::Auto).await,
        (false, false, false, true)
    );
}

/// Issue 40, item 1: the agent plants every known way to make the
/// runner's own git run a command (a clean and a smudge filter named by
/// `.gitattributes`, hooks in `.git/hooks` and a `core.hooksPath`,
/// `core.fsmonitor`, `core.sshCommand`, `diff.external`, a textconv) and
/// puts symlinks where the runner keeps its files (the work log, the
/// task's `.start`, the pending steering, the checkpoint). The runner then
/// records a start (git add), finishes a task (add, diff) and rolls one
/// back (read-tree, clean, checkout-index): nothing runs and nothing
/// outside the tree is touched. Each vector writes to a folder outside the
/// sandbox the agent cannot write, so a marker there can only come from
/// the runner. Run unconfined too: the runner's git must not rely on
/// Landlock to run nothing.
async fn git_vectors(mode: ConfineMode, isolation: Isolation) -> (Vec<String>, String) {
    let tmp = tempfile::tempdir().unwrap();
    let outside = outside_temp().join(format!(
        "xo-git-{}-{:?}-{:?}",
        std::process::id(),
        mode,
        isolation
    ));
    let _ = std::fs::remove_dir_all(&outside);
    std::fs::create_dir_all(&outside).unwrap();
    let bashrc = outside.join("bashrc");
    std::fs::write(&bashrc, "# mine\n").unwrap();
    let cfg = RunnerConfig {
        default_project: "p".into(),
        confine: mode,
        isolation,
        ..Default::default()
    };
    let sandbox = Sandbox::open(&tmp.path().join("sandbox")).unwrap();
    let project = sandbox.project_dir("p").unwrap();
    // Where a task's agent works: the project, or its own tree.
    let root = sandbox.root().to_path_buf();
    let tree = |task: &str| match isolation {
        Isolation::Directory => project.clone(),
        Isolation::Worktree => xo_pipeline::worktree::worktree_dir(&root, "p", task),
    };
    let data = tmp.path().join("data");
    let pipeline = Pipeline::new(cfg, sandbox, data.clone(), "u1", None)
        .unwrap()
        .confined()
        .unwrap();
    let m = outside.display().to_string();
    let mark = |what: &str| format!("sh -c 'echo {what} >> {m}/ran; cat'");
    let hook = format!("#!/bin/sh\necho hook >> {m}/ran\n");
    // The agent's own repository, configured to run commands.
    let plant = [
        "git init -q".to_string(),
        format!("git config filter.x.clean \"{}\"", mark("clean")),
        format!("git config filter.x.smudge \"{}\"", mark("smudge")),
        "git config filter.x.required true".to_string(),
        format!("git config core.fsmonitor \"echo fsmonitor >> {m}/ran\""),
        "git config core.hooksPath .githooks".to_string(),
        format!("git config core.sshCommand \"echo ssh >> {m}/ran\""),
        format!("git config diff.external \"{}\"", mark("external")),
        format!("git config diff.x.textconv \"{}\"", mark("textconv")),
        "printf '* filter=x diff=x\\n' > .gitattributes".to_string(),
        "mkdir -p .githooks .git/hooks".to_string(),
        format!(
            "for h in pre-commit post-commit post-checkout post-index-change reference-transaction; do printf '{}' > .git/hooks/$h; cp .git/hooks/$h .githooks/$h; chmod +x .git/hooks/$h .githooks/$h; done",
            hook.replace('\n', "\\n")
        ),
        // Links where XO's files were once kept and where it still writes.
        "mkdir -p .xo/tasks".to_string(),
        format!("ln -sf {m}/bashrc .xo/tasks/t1.md"),
        format!("ln -sf {m}/bashrc .xo/tasks/t2.md"),
        format!("ln -sf {m}/bashrc .xo/tasks/t2.start"),
        format!("ln -sf {m}/bashrc .xo/steering.pending"),
        format!("ln -sf {m}/bashrc .xo/checkpoint"),
        "echo v1 > work.txt".to_string(),
        // What it planted, where the test can read it once its tree is
        // gone (worktree isolation).
        "cp .git/config planted.config".to_string(),
    ]
    .join(" && ");
    let plant = format!("( {plant} ) 2> plant.err || cp plant.err plant.failed");
    let steps = |cmd: &str, status: &str| {
        format!(
            "turn_ms = 0\n[[run]]\nsteps = [{{ run = {cmd:?} }}, {{ reply = '{{\"status\": \"{status}\", \"message\": \"m\"}}' }}]"
        )
    };
    let job = |id: &str, script: String| scripted(id, &script);
    let mut driver = Driver::Script(ScriptDriver::from_file(None).unwrap());
    // t1 plants and finishes (the runner adds and diffs the tree).
    let out = pipeline
        .run(
            &mut driver,
            &job("t1", steps(&plant, "ok")),
            Turns::default(),
            None,
        )
        .await;
    assert!(matches!(out, Outcome::Completed(_)), "{out:?}");
    // The plant took, every vector of it: a test whose agent failed to
    // plant would prove nothing.
    assert!(
        !project.join("plant.failed").exists(),
        "{mode:?}: the agent could not plant: {}",
        std::fs::read_to_string(project.join("plant.err")).unwrap_or_default()
    );
    let config = std::fs::read_to_string(project.join("planted.config")).unwrap();
    for key in [
        "[filter \"x\"]",
        "fsmonitor",
        "hooksPath",
        "sshCommand",
        "external",
        "textconv",
    ] {
        assert!(
            config.contains(key),
            "{mode:?}: {key} not planted:\n{config}"
        );
    }
    if isolation == Isolation::Directory {
        assert!(project.join(".git/hooks/pre-commit").exists());
        assert!(
            std::fs::symlink_metadata(project.join(".xo/steering.pending"))
                .unwrap()
                .is_symlink()
        );
    } else {
        // Its tree's `.git` and `.xo/` never left its tree.
        assert!(!project.join(".git").exists());
        assert!(project.join(".gitattributes").exists());
    }
    // t2 starts on the planted tree (add with the filter named), changes a
    // file and blocks; its replay rolls back (checkout with the filter).
    let out = pipeline
        .run(
            &mut driver,
            &job(
                "t2",
                steps("echo half > work.txt && echo new > extra.txt", "blocked"),
            ),
            Turns::default(),
            None,
        )
        .await;
    assert!(matches!(out, Outcome::Blocked(_)), "{out:?}");
    xo_pipeline::driver::command::deliver(&tree("t2"), &["[SUPERVISOR] steer".into()]).await;
    let mut replay = job("t2", steps("true", "ok"));
    replay.record.mark = Some(xo_proto::queue::ReplayMark::RollbackReplay);
    let out = pipeline
        .run(&mut driver, &replay, Turns::default(), None)
        .await;
    assert!(matches!(out, Outcome::Completed(_)), "{out:?}");
    assert_eq!(
        std::fs::read_to_string(project.join("work.txt")).unwrap(),
        "v1\n",
        "the rollback restored the start"
    );
    assert!(
        !project.join("extra.txt").exists(),
        "the rollback removed t2's file"
    );
    let work_log = std::fs::read_to_string(data.join("p/tasks/t2.md")).unwrap_or_else(|e| {
        panic!(
            "{e}: {:?}",
            std::process::Command::new("find")
                .arg(&data)
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        )
    });
    assert!(work_log.contains("Rollback"), "{work_log}");
    let ran = std::fs::read_to_string(outside.join("ran"))
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect();
    let bashrc = std::fs::read_to_string(&bashrc).unwrap();
    let _ = std::fs::remove_dir_all(&outside);
    (ran, bashrc)
}

#[tokio::test]
async fn the_runners_git_runs_nothing_the_agent_wrote_and_follows_no_link() {
    for isolation in [Isolation::Directory, Isolation::Worktree] {
        for mode in [ConfineMode::Off, ConfineMode::Landlock] {
            let (ran, bashrc) = git_vectors(mode, isolation).await;
            assert!(
                ran.is_empty(),
                "{mode:?} {isolation:?}: the runner ran {ran:?}"
            );
            assert_eq!(
                bashrc, "# mine\n",
                "{mode:?} {isolation:?}: a file outside was written"
            );
        }
    }
}

/// What the planted config does when a git of the agent's own runs: the
/// vectors are live (a test that plants dead ones would prove nothing).
#[test]
fn the_planted_vectors_are_live_for_a_git_that_reads_them() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let m = d.join("ran");
    let sh = |line: &str| {
        let ok = std::process::Command::new("sh")
            .args(["-c", line])
            .current_dir(d)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .status()
            .unwrap()
            .success();
        assert!(ok, "{line}");
    };
    sh("git init -q");
    sh(&format!(
        "git config filter.x.clean \"sh -c 'echo clean >> {}; cat'\"",
        m.display()
    ));
    sh("printf '* filter=x\\n' > .gitattributes && echo v1 > work.txt && git add -A");
    assert!(std::fs::read_to_string(&m).unwrap().contains("clean"));
}
