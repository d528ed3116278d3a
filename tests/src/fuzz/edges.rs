//! Fuzz targets of the readers of the edges: the console's request bodies, report files and timestamps, URLs, operator settings, hook payloads.

use super::*;

// --- the console's request bodies --------------------------------------------------

pub fn console_bodies() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // A queue and a console on the embedded bus, started as `xo up` starts them.
    let dir = tempfile::tempdir().expect("a temporary directory");
    let none = dir.path().join("none.toml");
    std::fs::write(&none, "").expect("an empty xo.toml");
    let cfg = xo_runtime::XoConfig::load(
        Some(&none),
        &[
            (
                "state.dir".to_string(),
                dir.path().join("state").display().to_string(),
            ),
            ("console.listen".to_string(), "127.0.0.1:0".to_string()),
        ],
    )
    .expect("the fuzz configuration");
    let fabric = rt.block_on(async {
        let store = xo_bus::Store::File(
            xo_bus::FileStore::open(cfg.state.store_dir()).expect("the file store"),
        );
        xo_fabric::Fabric::start_with(
            &cfg,
            xo_fabric::Plan {
                queue: true,
                console: xo_fabric::ConsoleMode::Required,
                ..xo_fabric::Plan::default()
            },
            xo_bus::Bus::Local(xo_bus::LocalBus::new()),
            Some(store),
        )
        .await
        .expect("a queue and a console")
    });
    let console = fabric.console().expect("the console").clone();
    let token = console.console.auth.token().to_string();
    let http = reqwest::Client::new();
    let url = console.url.clone();
    const KEYS: &[&str] = &[
        "mode",
        "project",
        "description",
        "completed",
        "budget_usd",
        "tasks",
        "task_id",
        "intent",
        "instructions",
        "role",
        "reason",
        "text",
        "message",
        "severity",
        "settings",
        "version",
        "replicas",
        "depends_on",
        "lane",
    ];
    static ROUTES: [&str; 8] = [
        "/api/v1/queue/init",
        "/api/v1/queue/goal",
        "/api/v1/queue/halt",
        "/api/v1/tasks",
        "/api/v1/tasks/t-1/answer",
        "/api/v1/units/u-1/steer",
        "/api/v1/knowledge/conventions/errors/deprecate",
        "/api/v1/fleet/coder/scale",
    ];
    let post = |route: &str, body: Vec<u8>, put: bool| -> Result<(), TestCaseError> {
        let (status, text) = rt.block_on(async {
            let req = if put {
                http.put(format!("{url}/api/v1/settings"))
            } else {
                http.post(format!("{url}{route}"))
            };
            let r = req
                .bearer_auth(&token)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .expect("the console answers");
            (r.status(), r.text().await.unwrap_or_default())
        });
        // A bad body is the caller's error, named; a service this rig does
        // not run is named as down (503). Never a 500.
        prop_assert!(
            status.is_success() || status.is_client_error() || status.as_u16() == 503,
            "{route}: {status} {text}"
        );
        if !status.is_success() {
            let v: Value = serde_json::from_str(&text).map_err(|e| {
                TestCaseError::fail(format!("{route}: {status} not JSON: {e}: {text}"))
            })?;
            prop_assert!(
                v["message"].as_str().is_some_and(|m| !m.is_empty()),
                "{route}: {status} {text}"
            );
        }
        Ok(())
    };
    fuzz(
        "console: random JSON bodies",
        10,
        (
            prop::sample::select(&ROUTES[..]),
            json_value(KEYS),
            any::<bool>(),
        ),
        |(route, v, put)| post(route, serde_json::to_vec(&v).unwrap(), put),
    );
    fuzz(
        "console: random bytes",
        10,
        (
            prop::sample::select(&ROUTES[..]),
            prop::collection::vec(any::<u8>(), 0..128),
        ),
        |(route, b)| post(route, b, false),
    );
    // Still serving, and the queue still answers through it.
    let s = rt.block_on(async {
        http.get(format!("{url}/api/v1/queue"))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap()
            .status()
    });
    assert!(s.is_success(), "{s}");
    rt.block_on(async { fabric.stop().await })
        .expect("the fabric stops");
}

// --- report files on the shared volume, times, URLs, settings, hook payloads --

/// A report file as a unit (or seed 000's host) writes it to
/// `<volume>/reports/`: seed-shaped or XO-shaped JSON, timestamps of any
/// text (multibyte characters where digits go, impossible dates), read the
/// way the supervisor's poller reads it. A reading that panics is what
/// once stopped file mode for good.
pub fn report_files() {
    const KEYS: &[&str] = &[
        "role_id",
        "timestamp",
        "turn",
        "iteration",
        "context_fill_pct",
        "size",
        "status",
        "health",
        "turns_since_progress",
        "GREEN",
        "AMBER",
        "RED",
        "2025-01-27T22:44:56.1234Z",
        "2025-01-27T22:44:56é1234",
        "2025-02-31T25:61:00+99:00",
    ];
    let time_text = prop_oneof![
        ".{0,40}",
        "[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9é]{0,9})?(Z|[+-][0-9]{2}:[0-9]{2})?",
    ];
    let file = (json_value(KEYS), time_text, ".{0,12}").prop_map(|(mut v, t, role)| {
        if let Value::Object(o) = &mut v {
            o.insert("role_id".into(), json!(role));
            o.insert("timestamp".into(), json!(t));
        }
        v
    });
    fuzz("report files (seed 000's shape)", 1, file, |v| {
        let bytes = serde_json::to_vec(&v).unwrap();
        let (r, largest) = measured(|| {
            let mapped = xo_supervisor::decode::seed_shaped(&bytes);
            let report = match &mapped {
                Some(Ok(m)) => {
                    codec::decode::<SaluteReport>(m, Some(codec::JSON), 1 << 20).map(Some)
                }
                _ => Ok(None),
            };
            if let Ok(Some(mut r)) = report {
                xo_supervisor::decode::fill_from_pct(&mut r, &bytes);
            }
            mapped
        });
        check_alloc("report file", bytes.len(), largest)?;
        if let Some(Err(e)) = r {
            prop_assert!(!e.to_string().is_empty());
        }
        Ok(())
    });
    fuzz("timestamps", 1, ".{0,48}", |t| {
        // A value or nothing; a value is a real instant, after 1970.
        if let Some(ms) = xo_sensor::parse_time_ms(&t) {
            prop_assert!(ms > 0, "{t:?} read as {ms}");
        }
        Ok(())
    });
}

/// URLs from outside: a NATS URL (with credentials) is split and
/// redacted, a login's `next` is kept only as a local route. Beyond no
/// panic: a password never survives redaction, and a kept route never
/// leaves this console (starts with one `/`, no control character, and a
/// browser joining it on any page of the console stays on the console).
pub fn urls() {
    let any_url = prop_oneof![
        ".{0,40}",
        "(nats|tls|ws|https?)://[a-z%@:/\\[\\]é.]{0,30}",
        "/[a-z/\\\\\t\n%.:@?#é]{0,30}",
    ];
    fuzz(
        "urls: redaction, credentials, return paths",
        1,
        any_url,
        |u| {
            let _ = xo_bus::nats::redact_url(&u);
            let _ = xo_bus::nats::split_credentials(&u);
            if let Some(to) = xo_console::auth::local_target(&u) {
                prop_assert!(
                    to.starts_with('/') && !to.starts_with("//"),
                    "{u:?} -> {to:?}"
                );
                prop_assert!(!to.chars().any(char::is_control), "{u:?} -> {to:?}");
                // A browser on any host joins what is sent back to that host.
                let here = url::Url::parse("https://xo.example:7878/units/a").unwrap();
                let went = here.join(&to).unwrap();
                prop_assert_eq!(went.origin(), here.origin(), "{:?} -> {:?}", u, to);
            }
            Ok(())
        },
    );
    let creds = (
        "[a-z]{1,8}",
        "Pw[A-Za-z0-9%é@:]{6,16}",
        "[a-z]{1,10}(:[0-9]{1,5})?",
        prop::sample::select(&["nats://", "tls://", "ws://", ""][..]),
    );
    fuzz(
        "urls: a password never survives redaction",
        1,
        creds,
        |(user, pass, host, scheme)| {
            let url = format!("{scheme}{user}:{pass}@{host}");
            let shown = xo_bus::nats::redact_url(&url);
            prop_assert!(!shown.contains(&pass), "{url:?} shown as {shown:?}");
            Ok(())
        },
    );
}

/// Operator settings as the console's settings page and `xo settings set`
/// send them: any key (known or not), any JSON value. Applied over the
/// defaults they give a config or an error that names the key.
pub fn settings_values() {
    let keys: Vec<String> = xo_runtime::settings::keys()
        .into_iter()
        .map(|k| k.key.replace("<role>", "default").replace("<project>", "p"))
        .collect();
    let keys: &'static [String] = Box::leak(keys.into_boxed_slice());
    let pairs = prop::collection::vec(
        (
            prop_oneof![
                4 => prop::sample::select(keys),
                1 => "[a-z_.<>/]{1,24}",
            ],
            json_value(&["true", "3", "-1", "1e308", "{output}", "http://"]),
        ),
        1..4,
    );
    let base = xo_runtime::XoConfig::default();
    fuzz("settings", 1, pairs, |pairs| {
        let s = xo_proto::settings::Settings {
            version: 1,
            values: pairs.iter().cloned().collect(),
            ..Default::default()
        };
        if let Err(e) = xo_runtime::settings::apply(&base, &s) {
            let said = e.to_string();
            prop_assert!(
                pairs
                    .iter()
                    .any(|(k, _)| said.contains(k.split('.').next().unwrap_or(k))),
                "{pairs:?}: {said}"
            );
        }
        Ok(())
    });
}

/// Hook payloads as Claude Code and Codex send them on stdin (`xo hook`):
/// any JSON, with their field names. A waiting session is read or not;
/// what it says is bounded by the payload.
pub fn hook_payloads() {
    use xo_pipeline::driver::waiting;
    const KEYS: &[&str] = &[
        "hook_event_name",
        "Notification",
        "PermissionRequest",
        "PreToolUse",
        "PostToolUse",
        "Stop",
        "session_id",
        "transcript_path",
        "cwd",
        "message",
        "notification_type",
        "permission_prompt",
        "idle_prompt",
        "tool_name",
        "tool_input",
        "command",
        "file_path",
        "url",
        "stop_hook_active",
    ];
    fuzz("hook payloads", 1, json_value(KEYS), |v| {
        let text = v.to_string();
        let (w, largest) = measured(|| {
            let _ = waiting::subject(&v);
            waiting::from_hook(&v, 1)
        });
        check_alloc("hook payload", text.len(), largest)?;
        if let Some(w) = w {
            let said = format!("{w:?}");
            prop_assert!(said.len() <= 4 * text.len() + 1024, "{said}");
        }
        Ok(())
    });
}
