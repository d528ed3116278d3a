//! Every pipeline path with the script driver and real subprocesses: no
//! bus needed, the pipeline is driven directly. The tasks run in the
//! project directory (`runner.isolation = "directory"`), where a test can
//! read what an agent left mid-task; worktrees have their own tests
//! (`tests/worktree.rs`, and the rollback here).

use std::path::{Path, PathBuf};

use xo_pipeline::driver::{CommandDriver, Driver, ScriptDriver, Turns};
use xo_pipeline::sandbox::Sandbox;
use xo_pipeline::{Job, Outcome, Pipeline};
use xo_proto::queue::{ReplayMark, Task, TaskRecord};
use xo_runtime::config::{Isolation, RunnerConfig};

struct Rig {
    _tmp: tempfile::TempDir,
    pipeline: Pipeline,
    data: PathBuf,
    project: PathBuf,
}

fn rig(tune: impl FnOnce(&mut RunnerConfig)) -> Rig {
    let tmp = tempfile::tempdir().unwrap();
    let mut cfg = RunnerConfig {
        default_project: "p".into(),
        isolation: Isolation::Directory,
        ..Default::default()
    };
    tune(&mut cfg);
    let sandbox = Sandbox::open(&tmp.path().join("sandbox")).unwrap();
    let project = sandbox.project_dir("p").unwrap();
    let data = tmp.path().join("data");
    let pipeline = Pipeline::new(cfg, sandbox, data.clone(), "u1", None).unwrap();
    Rig {
        _tmp: tmp,
        pipeline,
        data,
        project,
    }
}

fn task(id: &str, script: &str) -> Task {
    Task::new(
        id,
        "do the thing",
        format!("Work.\n```xo-script\nturn_ms = 0\n{script}\n```\n"),
        "coder",
    )
}

fn job(task: Task) -> Job {
    Job {
        task_list: None,
        record: TaskRecord::running(task, 1),
        goal: Some("the goal".into()),
        manual: false,
        knowledge: String::new(),
        directives: Vec::new(),
        settings: Default::default(),
    }
}

fn script_driver() -> Driver {
    Driver::Script(ScriptDriver::from_file(None).unwrap())
}

async fn run(r: &Rig, d: &mut Driver, j: &Job) -> Outcome {
    r.pipeline.run(d, j, Turns::default(), None).await
}

/// (type, content) of every prompt-log line.
fn prompt_log(data: &Path) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(data.join("p/prompts.log.jsonl")).unwrap_or_default();
    text.lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (
                v["type"].as_str().unwrap().to_string(),
                v["content"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn types(data: &Path) -> Vec<String> {
    prompt_log(data).into_iter().map(|(t, _)| t).collect()
}

fn work_log(r: &Rig, id: &str) -> String {
    std::fs::read_to_string(r.data.join(format!("p/tasks/{id}.md"))).unwrap_or_default()
}

const OK: &str = r#"{ reply = '{"status": "ok", "message": "done"}' }"#;

fn completed(o: Outcome) -> xo_pipeline::TaskResult {
    match o {
        Outcome::Completed(r) => r,
        other => panic!("expected completed, got {other:?}"),
    }
}

fn blocked(o: Outcome) -> String {
    match o {
        Outcome::Blocked(r) => r,
        other => panic!("expected blocked, got {other:?}"),
    }
}

#[tokio::test]
async fn happy_path_is_validated_formatted_and_logged() {
    let r = rig(|c| c.output_template = "[{task_id}] {status}: {message}".into());
    let mut t = task(
        "t1",
        &format!("[[run]]\nsteps = [{{ write = \"out.txt\", content = \"hi\" }}, {OK}]"),
    );
    t.acceptance_criteria = vec!["file contains: out.txt :: hi".into()];
    t.required_artifacts = vec!["out.txt".into()];
    let res = completed(run(&r, &mut script_driver(), &job(t)).await);
    let rep = res.report();
    assert!(rep.passed);
    assert_eq!(rep.formatted.as_deref(), Some("[t1] ok: done"));
    assert!(rep.template_applied);
    assert_eq!(rep.criteria.len(), 2);
    assert_eq!(rep.criteria[0].quality.as_deref(), Some("EXACT"));
    assert_eq!(types(&r.data), ["PROMPT", "RESPONSE"]);
    // The refs point at the logged lines; the raw output is kept there.
    let (path, off) = rep
        .response_ref
        .as_deref()
        .unwrap()
        .rsplit_once('@')
        .unwrap();
    let text = std::fs::read_to_string(path).unwrap();
    let line = text[off.parse::<usize>().unwrap()..]
        .lines()
        .next()
        .unwrap();
    assert!(line.contains("\"type\":\"RESPONSE\"") && line.contains("done"));
    assert!(work_log(&r, "t1").contains("completed"));
}

#[tokio::test]
async fn wrong_format_is_rerun_with_exactly_the_same_prompt() {
    let r = rig(|_| {});
    let t = task(
        "t2",
        &format!("[[run]]\nsteps = [{{ reply = \"I finished it.\" }}]\n[[run]]\nsteps = [{OK}]"),
    );
    completed(run(&r, &mut script_driver(), &job(t)).await);
    let log = prompt_log(&r.data);
    let prompts: Vec<&String> = log
        .iter()
        .filter(|(t, _)| t == "PROMPT")
        .map(|(_, c)| c)
        .collect();
    assert_eq!(prompts.len(), 2);
    assert_eq!(prompts[0], prompts[1], "seed 002: same inputs exactly");
    let w = work_log(&r, "t2");
    assert_eq!(w.matches("Retry Event").count(), 1, "{w}");
    assert!(w.contains("**Attempt:** 1/3") && w.contains("I finished it."));
}

#[tokio::test]
async fn out_of_format_retries_blocks() {
    let r = rig(|_| {});
    let t = task("t3", "[[run]]\nsteps = [{ reply = \"no json here\" }]");
    let why = blocked(run(&r, &mut script_driver(), &job(t)).await);
    assert!(why.starts_with("OUTPUT_FORMAT_INVALID"), "{why}");
    assert_eq!(
        types(&r.data).iter().filter(|t| *t == "PROMPT").count(),
        4,
        "1 + 3 retries"
    );
    assert_eq!(work_log(&r, "t3").matches("Retry Event").count(), 3);
}

#[tokio::test]
async fn failed_criteria_get_fix_prompts_then_strict_mode() {
    let r = rig(|_| {});
    let mut t = task(
        "t4",
        &format!(
            "[[run]]\nsteps = [{OK}]\n[[run]]\nsteps = [{OK}]\n[[run]]\nsteps = [{{ write = \"x.txt\", content = \"x\" }}, {OK}]"
        ),
    );
    t.acceptance_criteria = vec!["file exists: x.txt".into()];
    completed(run(&r, &mut script_driver(), &job(t)).await);
    let log = prompt_log(&r.data);
    let prompts: Vec<&(String, String)> = log.iter().filter(|(t, _)| t != "RESPONSE").collect();
    assert_eq!(
        prompts.iter().map(|(t, _)| t.as_str()).collect::<Vec<_>>(),
        ["PROMPT", "FIX_PROMPT", "FIX_PROMPT"]
    );
    assert!(prompts[1].1.contains("x.txt does not exist"));
    assert!(!prompts[1].1.contains("STRICT MODE"));
    assert!(prompts[2].1.contains("STRICT MODE"), "same failure twice");
}

#[tokio::test]
async fn out_of_retries_ends_blocked() {
    let r = rig(|c| c.max_retries = 2);
    let mut t = task("t5", &format!("[[run]]\nsteps = [{OK}]"));
    t.acceptance_criteria = vec!["command succeeds: false".into()];
    let why = blocked(run(&r, &mut script_driver(), &job(t)).await);
    assert!(
        why.contains("validation failed after 2 retries") && why.contains("false"),
        "{why}"
    );
    assert_eq!(
        types(&r.data).iter().filter(|t| *t != "RESPONSE").count(),
        3
    );
}

#[tokio::test]
async fn uncertain_criteria_are_interrogated() {
    let r = rig(|_| {});
    let yes = r#"{ reply = '{"status": "ok", "message": "YES: docs.md says so"}' }"#;
    let unclear = r#"{ reply = '{"status": "ok", "message": "well, partly"}' }"#;
    let mut t = task(
        "t6",
        &format!(
            "[[run]]\nsteps = [{{ write = \"docs.md\", content = \"usage guide\" }}, {OK}]\n[[run]]\nsteps = [{unclear}]\n[[run]]\nsteps = [{yes}]"
        ),
    );
    t.acceptance_criteria = vec!["the usage guide is written".into()];
    let res = completed(run(&r, &mut script_driver(), &job(t)).await);
    let c = &res.report().criteria[0];
    assert!(
        c.passed && c.detail.contains("confirmed by interrogation"),
        "{c:?}"
    );
    assert_eq!(
        types(&r.data)
            .iter()
            .filter(|t| *t == "INTERROGATION_PROMPT")
            .count(),
        2
    );

    // Never a clear answer: at most 4 questions, then it fails and a fix
    // prompt follows; out of retries, blocked.
    let r = rig(|c| c.max_retries = 1);
    let mut t = task(
        "t7",
        &format!("[[run]]\nsteps = [{OK}]\n[[run]]\nsteps = [{unclear}]"),
    );
    t.acceptance_criteria = vec!["the design is sound".into()];
    let why = blocked(run(&r, &mut script_driver(), &job(t)).await);
    assert!(why.contains("no clear answer after 4 questions"), "{why}");
    let questions = types(&r.data)
        .iter()
        .filter(|t| *t == "INTERROGATION_PROMPT")
        .count();
    assert_eq!(
        questions,
        4 + 4 + 4,
        "first check, the retry's, and the final interrogation"
    );
}

#[tokio::test]
async fn questions_get_clarification_or_wait_in_manual_mode() {
    let ask = r#"{ reply = '{"status": "ok", "message": "Should I use tabs or spaces?"}' }"#;
    let script = format!("[[run]]\nsteps = [{ask}]\n[[run]]\nsteps = [{OK}]");
    let r = rig(|_| {});
    completed(run(&r, &mut script_driver(), &job(task("t8", &script))).await);
    let log = prompt_log(&r.data);
    let clar = log
        .iter()
        .find(|(t, _)| t == "CLARIFICATION_PROMPT")
        .unwrap();
    assert!(clar.1.contains("Should I use tabs or spaces?"));
    let r = rig(|_| {});
    let mut j = job(task("t9", &script));
    j.manual = true;
    match run(&r, &mut script_driver(), &j).await {
        Outcome::Question(q) => assert_eq!(q, "Should I use tabs or spaces?"),
        o => panic!("{o:?}"),
    }
    // AUTO mode, the agent keeps asking: out of clarifications, the task
    // waits for the operator's answer rather than blocking.
    let r = rig(|c| c.max_retries = 1);
    let always = format!("[[run]]\nsteps = [{ask}]");
    match run(&r, &mut script_driver(), &job(task("t10", &always))).await {
        Outcome::Question(q) => assert_eq!(q, "Should I use tabs or spaces?"),
        o => panic!("{o:?}"),
    }
    let clarifications = types(&r.data)
        .iter()
        .filter(|t| *t == "CLARIFICATION_PROMPT")
        .count();
    assert_eq!(clarifications, 1);
}

#[tokio::test]
async fn critical_halts_block_at_once() {
    let r = rig(|_| {});
    let b = r#"{ reply = '{"status": "blocked", "message": "no credentials"}' }"#;
    let why = blocked(
        run(
            &r,
            &mut script_driver(),
            &job(task("t10", &format!("[[run]]\nsteps = [{b}]"))),
        )
        .await,
    );
    assert_eq!(why, "BLOCKED: no credentials");
    assert_eq!(types(&r.data), ["PROMPT", "RESPONSE"]);
    // A script that does not parse is an execution failure naming it.
    let why = blocked(
        run(
            &r,
            &mut script_driver(),
            &job(task("t11", "[[run]]\nsteps = [{ bogus = 1 }]")),
        )
        .await,
    );
    assert!(
        why.starts_with("EXEC_FAILURE") && why.contains("t11") && why.contains("bogus"),
        "{why}"
    );
}

#[tokio::test]
async fn violations_minor_corrected_major_end_the_task() {
    let r = rig(|_| {});
    let upper = r#"{ reply = '{"status": "OK", "message": "done"}' }"#;
    // Seed 003 by default: the word is not corrected; the agent is asked
    // to fix its format and, as it never does, the task blocks.
    let why = blocked(
        run(
            &r,
            &mut script_driver(),
            &job(task("t12s", &format!("[[run]]\nsteps = [{upper}]"))),
        )
        .await,
    );
    assert!(why.starts_with("OUTPUT_FORMAT_INVALID"), "{why}");
    assert!(why.contains(r#"status "OK""#), "{why}");
    // Seed 004 SUP-7 when the project asks for it: corrected and logged.
    std::fs::create_dir_all(r.project.join(".xo")).unwrap();
    std::fs::write(
        r.project.join(".xo/project.toml"),
        "[supervisor_rules]\nreply_words = \"corrected\"\n",
    )
    .unwrap();
    completed(
        run(
            &r,
            &mut script_driver(),
            &job(task("t12", &format!("[[run]]\nsteps = [{upper}]"))),
        )
        .await,
    );
    assert!(work_log(&r, "t12").contains("Violation auto-corrected"));
    std::fs::write(
        r.project.join(".xo/project.toml"),
        "required_sections = [\"## Summary\"]\n",
    )
    .unwrap();
    match run(
        &r,
        &mut script_driver(),
        &job(task("t13", &format!("[[run]]\nsteps = [{OK}]"))),
    )
    .await
    {
        Outcome::Violation(v) => assert_eq!(v, "supervisor violation: missing_required_sections"),
        o => panic!("{o:?}"),
    }
    let with = r###"{ reply = '{"status": "ok", "message": "## Summary\ndone"}' }"###;
    completed(
        run(
            &r,
            &mut script_driver(),
            &job(task("t14", &format!("[[run]]\nsteps = [{with}]"))),
        )
        .await,
    );
}

#[tokio::test]
async fn project_config_is_read_at_each_task_start() {
    let r = rig(|c| c.global_template = "GLOBAL-RULES".into());
    std::fs::create_dir_all(r.project.join(".xo")).unwrap();
    std::fs::write(
        r.project.join(".xo/project.toml"),
        "input_template = \"PROJECT-V1\"\n",
    )
    .unwrap();
    let s = format!("[[run]]\nsteps = [{OK}]");
    completed(run(&r, &mut script_driver(), &job(task("a", &s))).await);
    std::fs::write(
        r.project.join(".xo/project.toml"),
        "input_template = \"PROJECT-V2\"\n",
    )
    .unwrap();
    completed(run(&r, &mut script_driver(), &job(task("b", &s))).await);
    let prompts: Vec<String> = prompt_log(&r.data)
        .into_iter()
        .filter(|(t, _)| t == "PROMPT")
        .map(|(_, c)| c)
        .collect();
    assert!(prompts[0].starts_with("GLOBAL-RULES\n\nPROJECT-V1"));
    assert!(
        prompts[1].starts_with("GLOBAL-RULES\n\nPROJECT-V2"),
        "the edit applies from the next task"
    );
    std::fs::write(r.project.join(".xo/project.toml"), "input_template = [1]\n").unwrap();
    let why = blocked(run(&r, &mut script_driver(), &job(task("c", &s))).await);
    assert!(
        why.contains("project.toml") && why.contains("input_template"),
        "{why}"
    );
    std::fs::write(
        r.project.join(".xo/project.toml"),
        "input_template_file = \"missing.md\"\n",
    )
    .unwrap();
    let why = blocked(run(&r, &mut script_driver(), &job(task("d", &s))).await);
    assert!(why.contains("missing.md"), "{why}");
}

#[test]
fn a_missing_global_template_file_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = RunnerConfig {
        global_template_file: "/nonexistent/global.md".into(),
        ..Default::default()
    };
    let e = Pipeline::new(
        cfg,
        Sandbox::open(tmp.path()).unwrap(),
        tmp.path().into(),
        "u",
        None,
    )
    .unwrap_err();
    assert!(e.to_string().contains("/nonexistent/global.md"), "{e}");
}

#[tokio::test]
async fn sandbox_escapes_are_refused() {
    let r = rig(|_| {});
    let mut t = task("t15", &format!("[[run]]\nsteps = [{OK}]"));
    t.working_directory = Some("../elsewhere".into());
    let why = blocked(run(&r, &mut script_driver(), &job(t)).await);
    assert!(
        why.contains("escapes the sandbox") && why.contains("'..'"),
        "{why}"
    );
    let mut t = task("t16", &format!("[[run]]\nsteps = [{OK}]"));
    t.working_directory = Some("/tmp".into());
    assert!(blocked(run(&r, &mut script_driver(), &job(t)).await).contains("absolute"));
    // A symlink out of the sandbox, written through by the agent.
    let outside = r._tmp.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, r.project.join("link")).unwrap();
    let mut t = task(
        "t17",
        &format!(
            "[[run]]\nsteps = [{{ write = \"link/pwned.txt\", content = \"x\" }}, {{ write = \"../../pwned.txt\", content = \"x\" }}, {OK}]"
        ),
    );
    t.acceptance_criteria = vec!["output contains: escapes the sandbox".into()];
    completed(run(&r, &mut script_driver(), &job(t)).await);
    assert!(!outside.join("pwned.txt").exists());
    assert!(!r._tmp.path().join("pwned.txt").exists());
}

#[tokio::test]
async fn resume_validates_existing_artifacts_first() {
    let r = rig(|_| {});
    std::fs::write(r.project.join("done.txt"), "x").unwrap();
    let mut t = task("t18", "[[run]]\nsteps = [{ reply = \"should not run\" }]");
    t.required_artifacts = vec!["done.txt".into()];
    let mut j = job(t.clone());
    j.record.mark = Some(ReplayMark::Resume);
    j.record.attempt = 2;
    let res = completed(run(&r, &mut script_driver(), &j).await);
    assert!(res.report().passed);
    assert!(types(&r.data).is_empty(), "the agent did not run");
    // Incomplete artifacts: the agent runs again.
    std::fs::remove_file(r.project.join("done.txt")).unwrap();
    let mut t2 = t;
    t2.task_id = "t19".into();
    t2.instructions = format!(
        "```xo-script\nturn_ms = 0\n[[run]]\nsteps = [{{ write = \"done.txt\", content = \"y\" }}, {OK}]\n```"
    );
    let mut j = job(t2);
    j.record.mark = Some(ReplayMark::Resume);
    completed(run(&r, &mut script_driver(), &j).await);
    assert_eq!(types(&r.data), ["PROMPT", "RESPONSE"]);
}

/// `runner.restart_mode = "rollback"` (an operator setting): a task marked
/// for resume is run again instead of being accepted from its artifacts.
#[tokio::test]
async fn restart_mode_rollback_never_resumes() {
    let r = rig(|c| c.restart_mode = xo_runtime::config::RestartMode::Rollback);
    std::fs::write(r.project.join("done.txt"), "x").unwrap();
    let mut t = task("t18r", &format!("[[run]]\nsteps = [{OK}]"));
    t.required_artifacts = vec!["done.txt".into()];
    let mut j = job(t);
    j.record.mark = Some(ReplayMark::Resume);
    j.record.attempt = 2;
    completed(run(&r, &mut script_driver(), &j).await);
    assert_eq!(
        types(&r.data),
        ["PROMPT", "RESPONSE"],
        "the agent ran again"
    );
}

/// Project templates set in the operator settings win over project.toml.
#[tokio::test]
async fn settings_project_templates_win_over_project_toml() {
    let r = rig(|_| {});
    std::fs::create_dir_all(r.project.join(".xo")).unwrap();
    std::fs::write(
        r.project.join(".xo/project.toml"),
        "input_template = \"FROM-FILE\"\n",
    )
    .unwrap();
    let mut j = job(task("t18s", &format!("[[run]]\nsteps = [{OK}]")));
    j.settings.version = 3;
    j.settings.values.insert(
        "projects.p.input_template".into(),
        serde_json::Value::from("FROM-SETTINGS"),
    );
    completed(run(&r, &mut script_driver(), &j).await);
    let log = std::fs::read_to_string(r.data.join("p/prompts.log.jsonl")).unwrap();
    assert!(
        log.contains("FROM-SETTINGS") && !log.contains("FROM-FILE"),
        "{log}"
    );
}

/// A task whose first attempt dies after partial work (here: reports an
/// error) is replayed with a rollback to its start: in the project
/// directory, or (worktree) in its own tree — where the dead attempt's
/// work never reaches the project, and only the replay's does.
async fn rollback_replay(isolation: Isolation) {
    let r = rig(|c| c.isolation = isolation);
    std::fs::create_dir_all(r.project.join("w")).unwrap();
    std::fs::write(r.project.join("w/base.txt"), "base").unwrap();
    let s = format!(
        "[[run]]\nattempt = 1\nsteps = [{{ write = \"partial.txt\", content = \"half\" }}, {{ write = \"base.txt\", content = \"clobbered\" }}, {{ reply = '{{\"status\": \"error\", \"message\": \"crashed\"}}' }}]\n[[run]]\nattempt = 2\nsteps = [{{ write = \"final.txt\", content = \"ok\" }}, {OK}]"
    );
    let mut t = task("t20", &s);
    t.working_directory = Some("w".into());
    t.acceptance_criteria = vec![
        "command succeeds: test ! -e partial.txt".into(),
        "file contains: base.txt :: base".into(),
        "file exists: final.txt".into(),
    ];
    let mut d = script_driver();
    blocked(run(&r, &mut d, &job(t.clone())).await);
    let tree = match isolation {
        Isolation::Directory => r.project.clone(),
        Isolation::Worktree => {
            xo_pipeline::worktree::worktree_dir(r.pipeline.sandbox().root(), "p", "t20")
        }
    };
    assert!(tree.join("w/partial.txt").exists(), "{isolation:?}");
    if isolation == Isolation::Worktree {
        assert!(
            !r.project.join("w/partial.txt").exists(),
            "not in the project"
        );
    }
    let mut j = job(t);
    j.record.attempt = 2;
    j.record.mark = Some(ReplayMark::RollbackReplay);
    let res = completed(run(&r, &mut d, &j).await);
    assert!(res.report().passed, "{:?}", res.report());
    assert!(work_log(&r, "t20").contains("Rollback"));
    assert_eq!(
        std::fs::read_to_string(r.project.join("w/base.txt")).unwrap(),
        "base"
    );
    assert!(r.project.join("w/final.txt").exists());
    assert!(!r.project.join("w/partial.txt").exists());
    if isolation == Isolation::Worktree {
        assert!(!tree.exists(), "removed once its work is on its branch");
    }
}

#[tokio::test]
async fn rollback_replay_resets_to_the_starting_commit() {
    rollback_replay(Isolation::Directory).await;
}

#[tokio::test]
async fn rollback_replay_resets_the_tasks_worktree() {
    rollback_replay(Isolation::Worktree).await;
}

#[tokio::test]
async fn command_driver_runs_a_real_agent() {
    let r = rig(|_| {});
    let reply = r#"echo '{"status": "ok", "message": "read my prompt"}'"#;
    // Prompt on stdin.
    let mut d = Driver::Command(
        CommandDriver::new(vec![
            "sh".into(),
            "-c".into(),
            format!("cat > seen.txt; {reply}"),
        ])
        .unwrap(),
    );
    let mut t = Task::new("c1", "echo", "copy the prompt", "coder");
    t.acceptance_criteria = vec!["file contains: seen.txt :: ## TASK c1".into()];
    completed(run(&r, &mut d, &job(t)).await);
    // Prompt in a file, with the XO's steering prepended and written to .xo/steering.md.
    let mut d = Driver::Command(
        CommandDriver::new(vec![
            "sh".into(),
            "-c".into(),
            format!("cp \"$0\" seen2.txt; {reply}"),
            "{prompt_file}".into(),
        ])
        .unwrap(),
    );
    let turns = Turns::default();
    turns.push_steering("[SUPERVISOR] Loop detected. Try another approach.".into());
    let mut t = Task::new("c2", "echo", "copy the prompt", "coder");
    t.acceptance_criteria = vec!["file contains: seen2.txt :: ## TASK c2".into()];
    completed(r.pipeline.run(&mut d, &job(t), turns, None).await);
    let seen = std::fs::read_to_string(r.project.join("seen2.txt")).unwrap();
    assert!(seen.starts_with("## SUPERVISOR STEERING"), "{seen}");
    assert!(seen.contains("Loop detected"));
    let s = std::fs::read_to_string(r.project.join(".xo/steering.md")).unwrap();
    assert!(s.contains("[SUPERVISOR] Loop detected"));
    // Only allow-listed environment reaches the agent.
    let mut d = Driver::Command(
        CommandDriver::new(vec![
            "sh".into(),
            "-c".into(),
            format!("env > env.txt; {reply}"),
        ])
        .unwrap(),
    );
    completed(run(&r, &mut d, &job(Task::new("c3", "env", "x", "coder"))).await);
    let env = std::fs::read_to_string(r.project.join("env.txt")).unwrap();
    assert!(env.contains("XO_TASK_ID=c3") && env.contains("XO_UNIT=u1"));
    assert!(
        !env.contains("CARGO_"),
        "cargo's variables are not on the allow-list"
    );
}

#[tokio::test]
async fn an_agent_that_never_exits_is_killed() {
    let r = rig(|c| c.timeouts.standard_ms = 300);
    let mut d = Driver::Command(CommandDriver::new(vec!["sleep".into(), "1000".into()]).unwrap());
    let why = blocked(run(&r, &mut d, &job(Task::new("c4", "hang", "x", "coder"))).await);
    assert!(
        why.starts_with("EXEC_FAILURE") && why.contains("timed out"),
        "{why}"
    );
    let mut t = Task::new("c5", "hang", "x", "coder");
    t.timeout_profile = xo_proto::queue::TimeoutProfile::Long;
    let r = rig(|c| {
        c.timeouts.standard_ms = 600_000;
        c.timeouts.long_ms = 200;
    });
    assert!(
        blocked(run(&r, &mut d, &job(t)).await).contains("timed out"),
        "the profile picks the timeout"
    );
}

#[tokio::test]
async fn an_agent_that_prints_100_mb_is_bounded() {
    let r = rig(|c| {
        c.max_retries = 1;
        c.max_output_bytes = 1 << 20;
    });
    let mut d = Driver::Command(
        CommandDriver::new(vec![
            "sh".into(),
            "-c".into(),
            "head -c 100000000 /dev/zero | tr '\\0' a; echo '{\"status\":\"ok\",\"message\":\"x\"}'".into(),
        ])
        .unwrap(),
    );
    // The reply past the bound is in the kept tail.
    let done = completed(run(&r, &mut d, &job(Task::new("c6", "flood", "x", "coder"))).await);
    assert_eq!(done.reply()["message"], "x");
    let log = prompt_log(&r.data);
    let resp = log.iter().find(|(t, _)| t == "RESPONSE").unwrap();
    assert!(resp.1.len() <= (1 << 20) + 200, "{}", resp.1.len());
    assert!(resp.1.contains("bytes of output cut here"));
    let raw = std::fs::read_to_string(r.data.join("p/prompts.log.jsonl")).unwrap();
    assert!(raw.contains("\"truncated\":true"));
}

#[tokio::test]
async fn the_reply_at_the_end_of_a_100_mb_stream_is_found() {
    // A CLI agent that prints 100 MB of log before its reply: the bounded
    // capture keeps the tail, where the reply is.
    let r = rig(|_| {});
    let mut d = Driver::Command(
        CommandDriver::new(vec![
            "sh".into(),
            "-c".into(),
            r#"cat > /dev/null; head -c 100000000 /dev/zero | tr '\0' 'x' | fold -w 100; echo '{"status": "ok", "message": "the end of a long run"}'"#.into(),
        ])
        .unwrap(),
    );
    let t = Task::new("big", "talk a lot", "say everything", "coder");
    let done = completed(run(&r, &mut d, &job(t)).await);
    assert!(!done.report().summary.is_empty());
    assert_eq!(done.reply()["message"], "the end of a long run");
}

/// Seed 004 SUP-5's `fail_on_violation` (global, overridden by the project
/// file, overridden by the operator's project setting): a reply missing a
/// required section fails the task, or blocks it for the operator.
#[tokio::test]
async fn fail_on_violation_fails_or_blocks_by_global_project_and_setting() {
    let r = rig(|c| c.fail_on_violation = false);
    std::fs::create_dir_all(r.project.join(".xo")).unwrap();
    let toml = |extra: &str| {
        std::fs::write(
            r.project.join(".xo/project.toml"),
            format!("required_sections = [\"## Summary\"]\n{extra}"),
        )
        .unwrap()
    };
    let s = format!("[[run]]\nsteps = [{OK}]");
    toml("");
    let why = blocked(run(&r, &mut script_driver(), &job(task("v1", &s))).await);
    assert_eq!(
        why,
        "SUPERVISOR_VIOLATION: missing_required_sections: the reply has no \"## Summary\" section"
    );
    assert!(work_log(&r, "v1").contains("blocked for the operator (fail_on_violation = false)"));
    toml("[supervisor_rules]\nfail_on_violation = true\n");
    match run(&r, &mut script_driver(), &job(task("v2", &s))).await {
        Outcome::Violation(v) => assert_eq!(v, "supervisor violation: missing_required_sections"),
        o => panic!("the project's rule wins over the runner's: {o:?}"),
    }
    let mut j = job(task("v3", &s));
    j.settings.version = 1;
    j.settings.values.insert(
        "projects.p.fail_on_violation".into(),
        serde_json::Value::from(false),
    );
    assert!(
        blocked(run(&r, &mut script_driver(), &j).await).starts_with("SUPERVISOR_VIOLATION"),
        "the operator's setting wins over the file"
    );
    // The default is seed 004's: fail.
    assert!(RunnerConfig::default().fail_on_violation);
}

/// Seed 004 SUP-4's `allow_raw_output`: the result keeps the agent's raw
/// output, the output template not applied; the operator's setting wins.
#[tokio::test]
async fn allow_raw_output_keeps_the_agents_output_untemplated() {
    let r = rig(|c| c.output_template = "[{task_id}] {status}: {message}".into());
    std::fs::create_dir_all(r.project.join(".xo")).unwrap();
    std::fs::write(
        r.project.join(".xo/project.toml"),
        "[supervisor_rules]\nallow_raw_output = true\n",
    )
    .unwrap();
    let s = format!("[[run]]\nsteps = [{{ say = \"working on it\" }}, {OK}]");
    let res = completed(run(&r, &mut script_driver(), &job(task("w1", &s))).await);
    let rep = res.report();
    assert!(!rep.template_applied);
    let formatted = rep.formatted.as_deref().unwrap();
    assert!(
        formatted.contains(r#""status": "ok""#) && !formatted.starts_with("[w1]"),
        "the raw output: {formatted}"
    );
    let mut j = job(task("w2", &s));
    j.settings.version = 1;
    j.settings.values.insert(
        "projects.p.allow_raw_output".into(),
        serde_json::Value::from(false),
    );
    let rep = completed(run(&r, &mut script_driver(), &j).await)
        .report()
        .clone();
    assert!(rep.template_applied);
    assert_eq!(rep.formatted.as_deref(), Some("[w2] ok: done"));
}

/// The timeout a task runs under: seed 004 SUP-5's `timeout_default_ms` is
/// the standard (default) profile's; a project's profile (its file, the
/// operator's setting over it) wins over the task's, for the agent's
/// timeout and for the runner's wall budget alike (the prepared task's
/// `timeout`, which the runner's budget is made from).
#[tokio::test]
async fn the_projects_timeout_profile_and_timeout_default_ms_apply() {
    use xo_proto::queue::TimeoutProfile;
    let r = rig(|c| {
        c.timeout_default_ms = 250;
        c.timeouts.long_ms = 600_000;
    });
    assert_eq!(
        r.pipeline.timeout(TimeoutProfile::Standard),
        std::time::Duration::from_millis(250)
    );
    let mut d = Driver::Command(CommandDriver::new(vec!["sleep".into(), "1000".into()]).unwrap());
    let hang = |id: &str| Task::new(id, "hang", "x", "coder");
    // Killed at the timeout (250 ms), not at long_ms (10 min) or the
    // sleep's end (1000 s).
    let killed_after = |why: String| -> u64 {
        let ms = why
            .split("timed out after ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse().ok());
        ms.unwrap_or_else(|| panic!("not a timeout: {why}"))
    };
    let ms = killed_after(blocked(run(&r, &mut d, &job(hang("h1"))).await));
    assert!(
        (250..600_000).contains(&ms),
        "timeout_default_ms bounds a standard task: {ms}"
    );
    std::fs::create_dir_all(r.project.join(".xo")).unwrap();
    std::fs::write(
        r.project.join(".xo/project.toml"),
        "[supervisor_rules]\ntimeout_profile = \"long\"\n",
    )
    .unwrap();
    let pipeline = &r.pipeline;
    let timeout = |j: Job| async move {
        let prep = pipeline.prepare(&j, Turns::default(), None).await;
        prep.expect("prepared").timeout()
    };
    assert_eq!(
        timeout(job(hang("h2"))).await,
        std::time::Duration::from_millis(600_000)
    );
    let mut j = job(hang("h3"));
    j.settings.version = 1;
    j.settings.values.insert(
        "projects.p.timeout_profile".into(),
        serde_json::Value::from("standard"),
    );
    assert_eq!(
        timeout(j.clone()).await,
        std::time::Duration::from_millis(250)
    );
    let ms = killed_after(blocked(run(&r, &mut d, &j).await));
    assert!(
        (250..600_000).contains(&ms),
        "the operator's project profile is the one the agent runs under: {ms}"
    );
    // Both names for the standard timeout, disagreeing: refused, naming both.
    let mut cfg = xo_runtime::XoConfig::default();
    cfg.runner.timeout_default_ms = 1000;
    cfg.runner.timeouts.standard_ms = 2000;
    let e = cfg.validate().unwrap_err().to_string();
    assert!(
        e.contains("runner.timeout_default_ms") && e.contains("runner.timeouts.standard_ms"),
        "{e}"
    );
}

/// Seed 003's helper agent: a free-text criterion the interrogation left
/// unmet is checked against the code that exists: the helper, given the
/// files (code discovery), answers a verification command per criterion;
/// one that exits 0 (and not in an empty folder) passes it, and the task
/// completes without a fix retry.
#[tokio::test]
async fn the_helper_agent_verifies_a_failed_criterion_against_the_code() {
    assert!(
        !RunnerConfig::default().helper_agent,
        "an extra agent run: off unless asked"
    );
    let r = rig(|c| c.helper_agent = true);
    let helper_reply = r#"{ reply = '{"status": "ok", "message": "checked", "output": {"checks": [{"criterion": "the greeting is friendly", "command": "grep -q hello greet.txt"}]}}' }"#;
    let mut t = task(
        "h1",
        &format!(
            "[[run]]\nsteps = [{{ write = \"greet.txt\", content = \"hello friend\" }}, {OK}]\n\
             [[run]]\nsteps = [{{ reply = '{{\"status\": \"ok\", \"message\": \"NO: I cannot tell\"}}' }}]\n\
             [[run]]\nsteps = [{helper_reply}]"
        ),
    );
    t.acceptance_criteria = vec!["the greeting is friendly".into()];
    let res = completed(run(&r, &mut script_driver(), &job(t)).await);
    let c = &res.report().criteria[0];
    assert!(c.passed, "{c:?}");
    assert_eq!(c.quality.as_deref(), Some("MEDIUM"));
    assert!(
        c.detail
            .contains("verified by the helper agent: `grep -q hello greet.txt`"),
        "{}",
        c.detail
    );
    let log = prompt_log(&r.data);
    let kinds: Vec<&str> = log.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "PROMPT",
            "RESPONSE",
            "INTERROGATION_PROMPT",
            "RESPONSE",
            "HELPER_PROMPT",
            "RESPONSE"
        ],
        "no fix retry"
    );
    let helper = &log[4].1;
    assert!(helper.contains("## VALIDATION HELPER"), "{helper}");
    assert!(
        helper.contains("- the greeting is friendly (denied by interrogation"),
        "{helper}"
    );
    assert!(
        helper.contains("Files that exist (code discovery):\n- greet.txt"),
        "{helper}"
    );
    assert!(work_log(&r, "h1").contains("verified by the helper agent"));
}

/// A helper's command counts only if it exits 0 in the working directory
/// and not in an empty one: `true` proves nothing.
#[tokio::test]
async fn a_helper_command_that_needs_no_code_proves_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let sandbox = Sandbox::open(tmp.path()).unwrap();
    let cwd = sandbox.project_dir("p").unwrap();
    std::fs::create_dir_all(&cwd).unwrap();
    std::fs::write(cwd.join("greet.txt"), "hello").unwrap();
    let empty = tempfile::tempdir().unwrap();
    let env = vec![("PATH".to_string(), std::env::var("PATH").unwrap())];
    let ck = xo_pipeline::validate::Checker {
        sandbox: &sandbox,
        cwd: &cwd,
        env: &env,
        timeout: std::time::Duration::from_secs(10),
        max_output: 1 << 16,
        confine: None,
    };
    ck.verifies("grep -q hello greet.txt", empty.path())
        .await
        .unwrap();
    let e = ck.verifies("true", empty.path()).await.unwrap_err();
    assert!(e.to_string().contains("proves nothing"), "{e}");
    assert!(matches!(
        e,
        xo_pipeline::validate::NotVerified::ProvesNothing
    ));
    let e = ck
        .verifies("grep -q goodbye greet.txt", empty.path())
        .await
        .unwrap_err();
    assert!(e.to_string().starts_with("exit Some(1)"), "{e}");
    assert!(matches!(
        e,
        xo_pipeline::validate::NotVerified::Exit { code: Some(1), .. }
    ));
}
