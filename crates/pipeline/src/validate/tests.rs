use super::*;
use crate::halt::parse_reply;

fn reply(s: &str) -> AgentReply {
    parse_reply(s, false, crate::project::ReplyWords::Strict)
        .unwrap()
        .0
}

#[test]
fn criteria_parse() {
    assert_eq!(
        Criterion::parse("File exists: a/b.txt"),
        Criterion::FileExists("a/b.txt".into())
    );
    assert_eq!(
        Criterion::parse("file contains: a.txt :: hello world"),
        Criterion::FileContains("a.txt".into(), "hello world".into())
    );
    assert_eq!(
        Criterion::parse("command succeeds: true"),
        Criterion::CommandSucceeds("true".into())
    );
    assert_eq!(
        Criterion::parse("output contains: 42"),
        Criterion::OutputContains("42".into())
    );
    assert!(matches!(
        Criterion::parse("the code is tidy"),
        Criterion::FreeText(_)
    ));
}

#[tokio::test]
async fn every_rule_with_quality_and_confidence() {
    let tmp = tempfile::tempdir().unwrap();
    let sb = Sandbox::open(tmp.path()).unwrap();
    let p = sb.project_dir("p").unwrap();
    std::fs::write(p.join("greeting.txt"), "hello world").unwrap();
    let env = crate::proc::allowed_env(&["PATH".into()], &[]);
    let ck = Checker {
        sandbox: &sb,
        cwd: &p,
        env: &env,
        timeout: Duration::from_secs(60),
        max_output: 1 << 16,
        confine: None,
    };
    let mut task = Task::new("t", "greet", "write greeting.txt", "coder");
    task.required_artifacts = vec!["greeting.txt".into()];
    task.acceptance_criteria = vec![
        "file exists: greeting.txt".into(),
        "file contains: greeting.txt :: hello".into(),
        "command succeeds: test -s greeting.txt".into(),
        "output contains: wrote".into(),
    ];
    task.test_command = Some("grep -q world greeting.txt".into());
    task.tests_required = true;
    let out = AgentOutput {
        stdout: "wrote greeting.txt".into(),
        exit_code: Some(0),
        ..Default::default()
    };
    let r = reply("{\"status\":\"ok\",\"message\":\"done\"}");
    let v = ck.validate(&task, &out, &r).await;
    assert!(v.valid(), "{v:?}");
    assert_eq!(v.confidence(), Confidence::High);
    assert_eq!(v.checks.len(), 6);
    assert!(v.checks.iter().all(|c| c.quality == MatchQuality::Exact));

    // Each deterministic rule failing.
    task.acceptance_criteria = vec![
        "file exists: nope.txt".into(),
        "file contains: greeting.txt :: goodbye".into(),
        "command succeeds: false".into(),
        "output contains: 42".into(),
        "file exists: ../escape.txt".into(),
    ];
    task.test_command = Some("exit 1".into());
    let v = ck.validate(&task, &out, &r).await;
    assert!(!v.valid());
    assert_eq!(v.failed().len(), 6, "{:?}", v.failure_lines());
    assert!(
        v.failure_lines()
            .iter()
            .any(|l| l.contains("escapes the sandbox"))
    );
    let rep = v.report();
    assert!(!rep.passed && rep.criteria.len() == 7);
    assert_eq!(rep.criteria[1].quality.as_deref(), Some("NONE"));

    // Optional tests failing are a note, not a failure; exit code too.
    task.acceptance_criteria.clear();
    task.tests_required = false;
    let out2 = AgentOutput {
        exit_code: Some(1),
        ..out.clone()
    };
    let v = ck.validate(&task, &out2, &r).await;
    assert!(v.valid());
    assert_eq!(v.notes.len(), 2, "{:?}", v.notes);
    assert_eq!(v.confidence(), Confidence::Medium);

    // Free text is uncertain, with a quality from the pre-analysis.
    task.test_command = None;
    task.acceptance_criteria = vec!["greeting: hello world!".into()];
    let v = ck.validate(&task, &out, &r).await;
    assert_eq!(v.uncertain().len(), 1);
    assert_eq!(v.checks[1].quality, MatchQuality::High);
    assert_eq!(v.checks[1].hints, vec!["greeting.txt".to_string()]);
    assert_eq!(v.confidence(), Confidence::Uncertain);
    let v = ck
        .validate(
            &{
                let mut t = task.clone();
                t.acceptance_criteria = vec!["database migrations are reversible".into()];
                t
            },
            &out,
            &r,
        )
        .await;
    assert_eq!(v.checks[1].quality, MatchQuality::Low);
}

#[test]
fn schema_rule() {
    let s = serde_json::json!({"count": "integer", "name": "string"});
    assert!(check_schema(&s, Some(&serde_json::json!({"count": 2, "name": "x"}))).is_ok());
    assert!(
        check_schema(&s, Some(&serde_json::json!({"count": "2", "name": "x"})))
            .unwrap_err()
            .to_string()
            .contains("output.count")
    );
    assert!(
        check_schema(&s, Some(&serde_json::json!({"count": 2})))
            .unwrap_err()
            .to_string()
            .contains("missing")
    );
    assert!(
        check_schema(
            &s,
            Some(&serde_json::json!({"count": 2, "name": "x", "z": 1}))
        )
        .unwrap_err()
        .to_string()
        .contains("output.z")
    );
    assert!(check_schema(&s, None).is_err());
    // Each way of missing is its own case.
    assert_eq!(
        check_schema(&s, Some(&serde_json::json!({"count": "2", "name": "x"}))),
        Err(SchemaMismatch::WrongType {
            name: "count".into(),
            ty: "integer".into(),
            value: "\"2\"".into()
        })
    );
    assert_eq!(
        check_schema(&s, Some(&serde_json::json!({"count": 2}))),
        Err(SchemaMismatch::Missing("name".into()))
    );
    assert_eq!(check_schema(&s, None), Err(SchemaMismatch::NoOutput));
    assert_eq!(
        check_schema(&serde_json::json!([]), None),
        Err(SchemaMismatch::NotASchema)
    );
}

#[test]
fn output_template() {
    let r = reply("{\"status\":\"ok\",\"message\":\"built it\"}");
    let v = Validation {
        checks: vec![],
        notes: vec![],
    }
    .accept(r)
    .unwrap();
    let f = format_output("## {task_id}\n{status}: {message}", &v, "t9", "RAW");
    assert_eq!(f.formatted, "## t9\nok: built it");
    assert!(f.template_applied);
    assert_eq!(f.raw, "RAW");
    let f = format_output("", &v, "t9", "RAW");
    assert!(!f.template_applied);
    assert_eq!(f.formatted, "built it");
    let failing = Validation {
        checks: vec![exact("x".into(), false, "no".into())],
        notes: vec![],
    };
    assert!(
        failing
            .accept(reply("{\"status\":\"ok\",\"message\":\"m\"}"))
            .is_err()
    );
}
