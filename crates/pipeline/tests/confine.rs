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
use xo_runtime::config::{ConfineMode, RunnerConfig};

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
    let task = Task::new(
        "t1",
        "try everything",
        format!("Work.\n```xo-script\n{script}\n```\n"),
        "coder",
    );
    let job = Job {
        task_list: None,
        record: TaskRecord::running(task, 1),
        goal: Some("g".into()),
        manual: false,
        knowledge: String::new(),
        directives: Vec::new(),
        settings: Default::default(),
    };
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
