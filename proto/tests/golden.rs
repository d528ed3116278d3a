//! Golden encoded fixtures and checked-in JSON Schemas. Both fail when the
//! wire format changes by accident. To accept an intended change, run with
//! `XO_BLESS=1` and review the diff.

use std::path::PathBuf;

use xo_proto::codec::{self, CodecError, Format};
use xo_proto::{
    Action, AnomalyKind, Evidence, Heartbeat, Outcome, Pace, SaluteReport, Severity, Steering,
    SteeringSource,
};

fn dir(sub: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(sub)
}

fn bless() -> bool {
    std::env::var_os("XO_BLESS").is_some()
}

fn check_bytes(path: PathBuf, actual: &[u8]) {
    if bless() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; run with XO_BLESS=1 to create it", path.display()));
    assert!(
        expected == actual,
        "{} differs from the encoding of the current types; if intended, run with XO_BLESS=1",
        path.display()
    );
}

fn sample_report() -> SaluteReport {
    let mut r = SaluteReport::new("coder-1", "coder", 12, 4);
    r.time.at = 1_767_225_600_000;
    r.size.context_tokens = 81_000;
    r.size.context_limit = 100_000;
    r.size.context_fill = 0.81;
    r.size.history_len = 40;
    r.size.condensations = 1;
    r.activity.task_id = Some("T-7".into());
    r.activity.step = Some("run tests".into());
    r.activity.summary = Some("fixing the parser".into());
    r.activity.turns_since_progress = 2;
    r.activity.recent = vec![
        Action::tool("shell", "a1", Outcome::Ok, 10).with_output("o1"),
        Action::tool("shell", "a1", Outcome::Error, 11).with_error("exit_1"),
        Action::message(Some("m1"), Outcome::Ok, 12),
    ];
    r.location.host = Some("host-a".into());
    r.location.container = Some("xo-runner-1".into());
    r.location.workdir = Some("/work/sandbox".into());
    r.unit.pace = Pace::Alternate;
    r.equipment.model = Some("local/test".into());
    r.equipment.tokens_in = 1200;
    r.equipment.tokens_out = 300;
    r.equipment.cost_usd = 0.25;
    r.equipment.tool_failures.insert("shell".into(), 1);
    r
}

fn sample_steering() -> Steering {
    Steering {
        v: 1,
        unit: "coder-1".into(),
        id: "coder-1-12-context".into(),
        kind: AnomalyKind::Context,
        severity: Severity::Warning,
        message: "[SUPERVISOR] Context 81% full. Wrap up the current step or summarise.".into(),
        turn: 12,
        at: 1_767_225_600_000,
        evidence: Evidence {
            turns: vec![12],
            tools: vec![],
            rule: "context_fill > 0.80".into(),
            observed: "0.81".into(),
        },
        source: SteeringSource::Xo,
    }
}

fn sample_heartbeat() -> Heartbeat {
    let mut h = Heartbeat::new("coder-1", "coder", 9);
    h.at = 1_767_225_600_000;
    h.task_id = Some("T-7".into());
    h
}

macro_rules! golden {
    ($name:ident, $ty:ty, $sample:expr, $file:literal) => {
        #[test]
        fn $name() {
            let value: $ty = $sample;
            for (format, ext) in [(Format::Msgpack, "msgpack"), (Format::Json, "json")] {
                let bytes = codec::encode(&value, format).unwrap();
                check_bytes(dir(&format!("tests/fixtures/{}.{ext}", $file)), &bytes);
                let stored =
                    std::fs::read(dir(&format!("tests/fixtures/{}.{ext}", $file))).unwrap();
                let back: $ty = codec::decode(&stored, None, codec::DEFAULT_MAX_PAYLOAD).unwrap();
                assert_eq!(back, value, "{ext} fixture decodes to the sample");
            }
        }
    };
}

golden!(
    salute_report_fixture,
    SaluteReport,
    sample_report(),
    "salute_report_v1"
);
golden!(steering_fixture, Steering, sample_steering(), "steering_v1");
golden!(
    heartbeat_fixture,
    Heartbeat,
    sample_heartbeat(),
    "heartbeat_v1"
);

#[test]
fn schemas_match_the_types() {
    for (name, schema) in [
        ("salute_report", schemars::schema_for!(SaluteReport)),
        ("steering", schemars::schema_for!(Steering)),
        ("heartbeat", schemars::schema_for!(Heartbeat)),
        ("task", schemars::schema_for!(xo_proto::queue::Task)),
        (
            "audit_event",
            schemars::schema_for!(xo_proto::queue::AuditEvent),
        ),
        (
            "manager_reply",
            schemars::schema_for!(xo_proto::queue::ManagerReply),
        ),
        (
            "runner_event",
            schemars::schema_for!(xo_proto::queue::RunnerEvent),
        ),
        (
            "knowledge_doc",
            schemars::schema_for!(xo_proto::knowledge::KnowledgeDoc),
        ),
        (
            "knowledge_changed",
            schemars::schema_for!(xo_proto::knowledge::KnowledgeChanged),
        ),
        (
            "directive",
            schemars::schema_for!(xo_proto::knowledge::Directive),
        ),
        (
            "review_run",
            schemars::schema_for!(xo_proto::knowledge::ReviewRun),
        ),
    ] {
        let mut text = serde_json::to_string_pretty(&schema).unwrap();
        text.push('\n');
        check_bytes(dir(&format!("schema/{name}.schema.json")), text.as_bytes());
    }
}

#[test]
fn json_report_with_unknown_fields_and_defaults_decodes() {
    let json = br#"{"v":1,"unit":{"unit":"py-agent","role":"coder"},"time":{"turn":3,"seq":3},"future_field":{"x":1}}"#;
    let r: SaluteReport = codec::decode(json, None, 1024).unwrap();
    assert_eq!(r.unit.unit, "py-agent");
    assert_eq!(r.activity.turns_since_progress, 0);
}

#[test]
fn unknown_major_version_is_named() {
    let json = br#"{"v":7,"unit":{"unit":"u","role":"coder"},"time":{"turn":1,"seq":1}}"#;
    let err = codec::decode::<SaluteReport>(json, None, 1024).unwrap_err();
    assert_eq!(
        err,
        CodecError::UnsupportedVersion {
            ty: "SaluteReport",
            found: 7,
            min: 1,
            max: 1
        }
    );
    assert_eq!(
        err.to_string(),
        "SaluteReport: unsupported schema version 7 (this build reads 1 to 1)"
    );
}

#[test]
fn missing_field_is_named() {
    let json = br#"{"v":1,"unit":{"unit":"u","role":"coder"}}"#;
    let err = codec::decode::<SaluteReport>(json, None, 1024).unwrap_err();
    assert_eq!(err.code(), "undecodable");
    assert!(err.to_string().contains("missing field `time`"), "{err}");
}

#[test]
fn malformed_msgpack_is_undecodable() {
    let err = codec::decode::<SaluteReport>(&[0xc1, 0x00, 0xff], None, 1024).unwrap_err();
    assert!(
        matches!(
            err,
            CodecError::Undecodable {
                format: Format::Msgpack,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn oversized_payload_is_refused_before_decoding() {
    let bytes = codec::encode(&sample_report(), Format::Msgpack).unwrap();
    let err = codec::decode::<SaluteReport>(&bytes, None, bytes.len() - 1).unwrap_err();
    assert_eq!(err.code(), "too_large");
    assert!(codec::decode::<SaluteReport>(&bytes, None, bytes.len()).is_ok());
}

#[test]
fn invalid_unit_id_and_fill_are_rejected() {
    let mut r = sample_report();
    r.unit.unit = "a.b".into();
    let bytes = codec::encode(&r, Format::Json).unwrap();
    let err = codec::decode::<SaluteReport>(&bytes, None, 4096).unwrap_err();
    assert!(err.to_string().contains("unit id \"a.b\""), "{err}");
    let mut r = sample_report();
    r.size.context_fill = 1.5;
    let bytes = codec::encode(&r, Format::Msgpack).unwrap();
    let err = codec::decode::<SaluteReport>(&bytes, None, 4096).unwrap_err();
    assert!(
        err.to_string().contains("size.context_fill is 1.5"),
        "{err}"
    );
}

/// A report that decodes but breaks the contract says which way, as a
/// case of `Invalid` (the dead-letter header carries its words).
#[test]
fn an_invalid_report_says_which_way_by_case() {
    use xo_proto::{Invalid, InvalidToken};
    let reason = |f: &dyn Fn(&mut SaluteReport)| {
        let mut r = sample_report();
        f(&mut r);
        let bytes = codec::encode(&r, Format::Json).unwrap();
        match codec::decode::<SaluteReport>(&bytes, None, 1 << 20).unwrap_err() {
            xo_proto::CodecError::Invalid { ty, reason } => {
                assert_eq!(ty, "SaluteReport");
                reason
            }
            other => panic!("not refused as invalid: {other}"),
        }
    };
    assert!(matches!(
        reason(&|r| r.unit.unit = "a.b".into()),
        Invalid::Token(InvalidToken::Char { c: '.', .. })
    ));
    assert_eq!(
        reason(&|r| r.unit.role.clear()),
        Invalid::Empty { field: "unit.role" }
    );
    assert_eq!(
        reason(&|r| r.size.context_fill = 1.5),
        Invalid::Fraction {
            field: "size.context_fill",
            value: 1.5
        }
    );
    assert_eq!(
        reason(&|r| r.size.compacts_at = Some(1.5)),
        Invalid::Fraction {
            field: "size.compacts_at",
            value: 1.5
        }
    );
    let many = reason(&|r| {
        r.activity.recent = vec![xo_proto::Action::message(None, xo_proto::Outcome::Ok, 1); 65]
    });
    assert_eq!(
        many,
        Invalid::TooMany {
            field: "activity.recent",
            len: 65,
            max: xo_proto::salute::MAX_RECENT
        }
    );
    assert_eq!(
        many.to_string(),
        "activity.recent has 65 actions, at most 64"
    );
}

#[test]
fn content_type_header_wins_over_sniffing() {
    assert_eq!(
        Format::detect(b"{}", Some("application/msgpack")),
        Format::Msgpack
    );
    assert_eq!(
        Format::detect(b"\x81", Some("application/json")),
        Format::Json
    );
    assert_eq!(Format::detect(b"  {", None), Format::Json);
    assert_eq!(Format::detect(b"\x81", None), Format::Msgpack);
}

/// MessagePack carries inf and NaN (JSON cannot): every float of every
/// message is refused unless finite and in range, by name, on the fast
/// report reader, on serde, and in unversioned control requests.
#[test]
fn non_finite_floats_are_refused_by_name_on_every_path() {
    for cost in [f64::INFINITY, f64::NAN, -1.0] {
        let mut r = xo_proto::SaluteReport::new("u1", "coder", 1, 1);
        r.equipment.cost_usd = cost;
        let bytes = codec::encode(&r, Format::Msgpack).unwrap();
        let e = codec::decode::<xo_proto::SaluteReport>(&bytes, None, 1 << 20).unwrap_err();
        assert!(e.to_string().contains("cost_usd"), "{cost}: {e}");
    }
    let mut r = xo_proto::SaluteReport::new("u1", "coder", 1, 1);
    r.size.context_fill = f64::INFINITY;
    let bytes = codec::encode(&r, Format::Msgpack).unwrap();
    let e = codec::decode::<xo_proto::SaluteReport>(&bytes, None, 1 << 20).unwrap_err();
    assert!(e.to_string().contains("context_fill"), "{e}");

    // A lease heartbeat's usage and a goal's budget: control requests.
    let hb = xo_proto::queue::Heartbeat {
        task_id: "t1".into(),
        token: "x".into(),
        claimant: String::new(),
        checkpoint: false,
        usage: xo_proto::queue::Usage {
            cost_usd: f64::NAN,
            ..Default::default()
        },
    };
    let bytes = codec::encode(&hb, Format::Msgpack).unwrap();
    let e = codec::decode_plain::<xo_proto::queue::Heartbeat>(&bytes, None, 1 << 20).unwrap_err();
    assert!(e.to_string().contains("cost_usd"), "{e}");
    let json = br#"{"task_id":"t1","token":"x","usage":{"cost_usd":-3.0}}"#;
    let e = codec::decode_plain::<xo_proto::queue::Heartbeat>(json, None, 1 << 20).unwrap_err();
    assert!(e.to_string().contains("cost_usd"), "{e}");
    // Finite values pass.
    let mut r = xo_proto::SaluteReport::new("u1", "coder", 1, 1);
    r.equipment.cost_usd = 0.25;
    let bytes = codec::encode(&r, Format::Msgpack).unwrap();
    assert_eq!(
        codec::decode::<xo_proto::SaluteReport>(&bytes, None, 1 << 20)
            .unwrap()
            .equipment
            .cost_usd,
        0.25
    );
}
