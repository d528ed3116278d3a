//! The openai driver, the real client code, against a local
//! OpenAI-compatible test server: tool calls in the sandbox, a 429 with
//! backoff, a malformed reply, malformed tool arguments, steering reaching
//! the conversation, token usage, and the API key kept out of every log.

use std::path::PathBuf;

use xo_pipeline::driver::{Driver, OpenAiDriver, Turns};
use xo_pipeline::sandbox::Sandbox;
use xo_pipeline::{Job, Outcome, Pipeline};
use xo_proto::queue::{Task, TaskRecord};
use xo_runtime::config::{OpenAiConfig, RunnerConfig};
use xo_tests::openai::{OpenAiStub, StubReply, text, tool_call};

/// The key is read from the environment the real way; cargo sets this
/// variable for every test process, so no test needs to mutate the
/// environment (which is `unsafe` in Rust 2024).
const KEY_VAR: &str = "CARGO_PKG_DESCRIPTION";

fn key() -> String {
    std::env::var(KEY_VAR).expect("cargo sets CARGO_PKG_DESCRIPTION for tests")
}

struct Rig {
    tmp: tempfile::TempDir,
    pipeline: Pipeline,
    project: PathBuf,
}

fn rig() -> Rig {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = RunnerConfig {
        default_project: "p".into(),
        ..Default::default()
    };
    let sandbox = Sandbox::open(&tmp.path().join("sandbox")).unwrap();
    let project = sandbox.project_dir("p").unwrap();
    let pipeline = Pipeline::new(cfg, sandbox, tmp.path().join("data"), "u1", None).unwrap();
    Rig {
        tmp,
        pipeline,
        project,
    }
}

fn driver(stub: &OpenAiStub, attempts: u32) -> Driver {
    let cfg = OpenAiConfig {
        base_url: stub.base_url(),
        model: "test-model".into(),
        api_key_env: KEY_VAR.into(),
        max_attempts: attempts,
        backoff_ms: 1,
        price_in_per_mtok: 1.0,
        price_out_per_mtok: 2.0,
        ..Default::default()
    };
    Driver::OpenAi(OpenAiDriver::new(&cfg, 1000).unwrap())
}

fn job(task: Task) -> Job {
    Job {
        task_list: None,
        record: TaskRecord::running(task, 1),
        goal: None,
        manual: false,
        knowledge: String::new(),
        directives: Vec::new(),
        settings: Default::default(),
    }
}

fn everything_written(r: &Rig) -> String {
    let mut all = String::new();
    let mut stack = vec![r.tmp.path().to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else {
                all.push_str(&String::from_utf8_lossy(&std::fs::read(e.path()).unwrap()));
            }
        }
    }
    all
}

#[tokio::test]
async fn tool_loop_backoff_malformed_replies_and_steering() {
    let r = rig();
    let stub = OpenAiStub::start(vec![
        StubReply::Status(429, "{\"error\":\"slow down\"}".into(), Some(0)),
        tool_call(
            "c1",
            "write_file",
            r#"{"path": "src/hello.txt", "content": "hi there"}"#,
        ),
        StubReply::Malformed("{\"choices\": [oops".into()),
        tool_call("c2", "read_file", "{not json"),
        tool_call("c3", "list_dir", r#"{"path": "src"}"#),
        tool_call(
            "c4",
            "write_file",
            r#"{"path": "../../escape.txt", "content": "x"}"#,
        ),
        text("All done.\n{\"status\": \"ok\", \"message\": \"wrote src/hello.txt\"}"),
    ]);
    let mut d = driver(&stub, 3);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let turns = Turns::new(tx);
    // Like the runner's steering subscription: the XO's message arrives
    // after the agent's first step.
    let mut t2 = Some(turns.clone());
    let events = tokio::spawn(async move {
        let mut all = Vec::new();
        while let Some(ev) = rx.recv().await {
            // Dropped once used, so the channel closes with the run.
            if let Some(t) = t2.take() {
                t.push_steering("[SUPERVISOR] Loop: stop rewriting the same file.".into());
            }
            all.push(ev.event);
        }
        all
    });
    let mut task = Task::new("o1", "write the greeting", "write src/hello.txt", "coder");
    task.acceptance_criteria = vec!["file contains: src/hello.txt :: hi there".into()];
    let out = r.pipeline.run(&mut d, &job(task), turns, None).await;
    let Outcome::Completed(res) = out else {
        panic!("{out:?}")
    };
    assert!(res.report().passed);
    assert_eq!(
        std::fs::read_to_string(r.project.join("src/hello.txt")).unwrap(),
        "hi there"
    );
    assert!(!r.tmp.path().join("escape.txt").exists());

    let reqs = stub.requests();
    assert_eq!(reqs.len(), 7, "429 and the malformed reply were retried");
    assert_eq!(reqs[0].body["model"], "test-model");
    assert_eq!(reqs[0].body["tools"].as_array().unwrap().len(), 5);
    for q in &reqs {
        assert_eq!(
            q.header("authorization"),
            Some(format!("Bearer {}", key()).as_str())
        );
    }
    let last = reqs.last().unwrap().body["messages"]
        .as_array()
        .unwrap()
        .clone();
    let contents: Vec<String> = last
        .iter()
        .map(|m| m["content"].as_str().unwrap_or("").to_string())
        .collect();
    let steer = contents
        .iter()
        .position(|c| c.starts_with("[SUPERVISOR] Loop"))
        .expect("steering reached the conversation");
    assert!(steer >= 2, "after the prompt and the first step");
    assert!(
        contents.iter().any(|c| c.contains("not valid JSON")),
        "{contents:?}"
    );
    assert!(contents.iter().any(|c| c == "hello.txt"), "list_dir result");
    assert!(contents.iter().any(|c| c.contains("escapes the sandbox")));

    drop(d);
    let evs = events.await.unwrap();
    let tokens_in: u64 = evs.iter().map(|e| e.tokens_in).sum();
    assert_eq!(tokens_in, 4 * 100 + 120, "usage of each successful call");
    assert_eq!(evs.last().unwrap().context_limit, Some(1000));
    assert!(evs.iter().all(|e| e.model.as_deref() == Some("test-model")));
    let cost: f64 = evs.iter().map(|e| e.cost_usd).sum();
    assert!((cost - (520.0 + 2.0 * 60.0) / 1e6).abs() < 1e-12, "{cost}");
    assert!(
        !everything_written(&r).contains(&key()),
        "the key is in no log"
    );
}

#[tokio::test]
async fn an_endpoint_that_keeps_failing_blocks_without_leaking_the_key() {
    let r = rig();
    let stub = OpenAiStub::start(vec![StubReply::EchoAuth(502), StubReply::EchoAuth(502)]);
    let mut d = driver(&stub, 2);
    let out = r
        .pipeline
        .run(
            &mut d,
            &job(Task::new("o2", "x", "y", "coder")),
            Turns::default(),
            None,
        )
        .await;
    let Outcome::Blocked(why) = out else {
        panic!("{out:?}")
    };
    assert!(
        why.starts_with("EXEC_FAILURE") && why.contains("gave up after 2 attempts"),
        "{why}"
    );
    assert!(why.contains("502") && why.contains("***"), "{why}");
    assert!(!why.contains(&key()), "{why}");
    assert!(!everything_written(&r).contains(&key()));
    // A 4xx other than 429 is not retried.
    let stub = OpenAiStub::start(vec![StubReply::Status(401, "bad key".into(), None)]);
    let mut d = driver(&stub, 5);
    let out = r
        .pipeline
        .run(
            &mut d,
            &job(Task::new("o3", "x", "y", "coder")),
            Turns::default(),
            None,
        )
        .await;
    assert!(
        matches!(&out, Outcome::Blocked(w) if w.contains("401")),
        "{out:?}"
    );
    assert_eq!(stub.requests().len(), 1);
}

#[tokio::test]
async fn big_tool_outputs_are_cut_and_a_full_context_is_condensed_not_fatal() {
    let r = rig();
    // 200 KB: far over the tool output bound (16 KiB) and the window (1,000 tokens).
    std::fs::write(r.project.join("big.txt"), "y".repeat(200_000)).unwrap();
    let stub = OpenAiStub::start(vec![
        tool_call("c1", "read_file", r#"{"path": "big.txt"}"#),
        tool_call("c2", "read_file", r#"{"path": "big.txt"}"#),
        StubReply::Status(
            400,
            "{\"error\": \"This model's maximum context length is 8192 tokens\"}".into(),
            None,
        ),
        tool_call("c3", "list_dir", r#"{"path": "."}"#),
        tool_call("c4", "list_dir", r#"{"path": "."}"#),
        text("Read it.\n{\"status\": \"ok\", \"message\": \"read big.txt\"}"),
    ]);
    let mut d = driver(&stub, 1);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let turns = Turns::new(tx);
    let task = Task::new("o3", "read the big file", "read big.txt", "coder");
    let out = r.pipeline.run(&mut d, &job(task), turns, None).await;
    assert!(matches!(out, Outcome::Completed(_)), "{out:?}");
    drop(d);
    let mut condensed = 0;
    while let Ok(ev) = rx.try_recv() {
        condensed += usize::from(ev.event.condensed);
    }
    assert!(
        condensed >= 1,
        "the turns say the conversation was condensed"
    );

    let reqs = stub.requests();
    assert_eq!(
        reqs.len(),
        6,
        "the context refusal was answered by condensing once"
    );
    let content = |q: usize, m: usize| {
        reqs[q].body["messages"][m]["content"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    // The tool output reached the model cut, head and tail kept.
    let t1 = content(1, 3);
    assert!(t1.len() < 17_000, "{}", t1.len());
    assert!(t1.contains("bytes cut by XO") && t1.starts_with("yyyy") && t1.ends_with("yyyy"));
    // Refused for length, the retry carries the older output elided and the latest whole.
    assert!(
        content(2, 3).contains("bytes cut by XO"),
        "the refused request had it"
    );
    assert!(
        content(3, 3).starts_with("[elided by XO"),
        "{}",
        content(3, 3)
    );
    assert!(
        content(3, 5).contains("bytes cut by XO"),
        "the latest output stays"
    );
    // Past the condensing threshold, older outputs are elided before the call.
    assert!(
        content(5, 5).starts_with("[elided by XO"),
        "{}",
        content(5, 5)
    );
    assert_eq!(
        content(5, 1),
        content(0, 1),
        "the task itself is never elided"
    );
}

/// Issue 23, item 6: the key can come from a file (a mounted Secret) and so
/// stay out of the runner's environment, where an agent could read it.
#[tokio::test]
async fn the_api_key_comes_from_a_file_and_a_bad_file_is_named() {
    let r = rig();
    let stub = OpenAiStub::start(vec![text(
        "{\"status\": \"ok\", \"message\": \"nothing to do\"}",
    )]);
    let key_file = r.tmp.path().join("openai.key");
    std::fs::write(&key_file, "sk-from-a-file\n").unwrap();
    let cfg = OpenAiConfig {
        base_url: stub.base_url(),
        model: "test-model".into(),
        api_key_env: "XO_TEST_NO_SUCH_KEY_VAR".into(),
        api_key_file: key_file.display().to_string(),
        ..Default::default()
    };
    let mut d = Driver::OpenAi(OpenAiDriver::new(&cfg, 1000).unwrap());
    let out = r
        .pipeline
        .run(
            &mut d,
            &job(Task::new("k1", "nothing", "say ok", "coder")),
            Turns::default(),
            None,
        )
        .await;
    assert!(matches!(out, Outcome::Completed(_)), "{out:?}");
    let reqs = stub.requests();
    assert!(!reqs.is_empty());
    assert_eq!(
        reqs[0].header("authorization"),
        Some("Bearer sk-from-a-file")
    );
    // A missing or empty file is named at start.
    for (path, want) in [
        (r.tmp.path().join("missing.key"), "missing.key"),
        (
            {
                let p = r.tmp.path().join("empty.key");
                std::fs::write(&p, "\n").unwrap();
                p
            },
            "is empty",
        ),
    ] {
        let cfg = OpenAiConfig {
            api_key_file: path.display().to_string(),
            ..cfg.clone()
        };
        let e = OpenAiDriver::new(&cfg, 1000).unwrap_err().to_string();
        assert!(e.contains("api_key_file") && e.contains(want), "{e}");
    }
}

/// Issue 39, item 3 (seed 003): a task's `agent_mode` reaches the model
/// endpoint as the model it asks for, and is in the prompt log's metadata;
/// `auto` leaves the configured model.
#[tokio::test]
async fn a_tasks_agent_mode_is_the_model_asked_for_and_logged() {
    let r = rig();
    let done = || text("{\"status\": \"ok\", \"message\": \"done\"}");
    let stub = OpenAiStub::start(vec![done(), done()]);
    let mut d = driver(&stub, 1);
    let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
    let mut task = Task::new("m1", "x", "say done", "coder");
    task.agent_mode = Some("big-model".into());
    let out = r
        .pipeline
        .run(&mut d, &job(task), Turns::new(tx), None)
        .await;
    assert!(matches!(out, Outcome::Completed(_)), "{out:?}");
    let (tx, _rx) = tokio::sync::mpsc::unbounded_channel();
    let mut task = Task::new("m2", "x", "say done", "coder");
    task.agent_mode = Some("auto".into());
    let out = r
        .pipeline
        .run(&mut d, &job(task), Turns::new(tx), None)
        .await;
    assert!(matches!(out, Outcome::Completed(_)), "{out:?}");
    let reqs = stub.requests();
    assert_eq!(reqs[0].body["model"], "big-model");
    assert_eq!(
        reqs[1].body["model"], "test-model",
        "auto: the configured model"
    );
    let logged = everything_written(&r);
    let modes: Vec<&str> = logged
        .lines()
        .filter(|l| l.contains("\"type\":\"PROMPT\"") || l.contains("\"kind\":\"PROMPT\""))
        .filter_map(|l| {
            l.split("\"agent_mode\":\"")
                .nth(1)
                .and_then(|r| r.split('"').next())
        })
        .collect();
    assert_eq!(modes, ["big-model", "auto"], "{logged}");
}
