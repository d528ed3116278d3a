//! The console's HTTP API against real services on a real nats-server:
//! every route with the bus's own types, bad bodies and unknown ids named,
//! the token, CSRF and read-only rules, a down service named, `/metrics`
//! parsed by a Prometheus parser, the live feed over SSE, and settings
//! changed through the API applied by the running supervisor.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use xo_bus::typed;
use xo_console::ConsoleHandle;
use xo_fabric::Slot;
use xo_proto::{Format, SaluteReport};
use xo_runtime::{Clock, XoConfig};
use xo_tests::sandbox::{Sandbox, Started, plan};

/// The CSRF value a page carries (its `xo-csrf` meta) for the browser
/// whose cookie is `cookie`.
async fn page_csrf(rig: &Rig, cookie: &str, path: &str) -> String {
    let page = rig
        .http
        .get(rig.u(path))
        .header("cookie", cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    page.split("name=\"xo-csrf\" content=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap_or_else(|| panic!("no CSRF value on {path}: {page}"))
        .to_string()
}

/// A browser's login as the holder of `token`: its cookie, and the CSRF
/// value its pages carry.
async fn browser_login(rig: &Rig, token: &str) -> (String, String) {
    let login = login_form(rig, &format!("token={token}")).await;
    assert_eq!(login.status(), StatusCode::SEE_OTHER);
    let cookie = login.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_string();
    let csrf = page_csrf(rig, &cookie, "/units/op-unit").await;
    (cookie, csrf)
}

/// The login form, sent as a browser sends it (`body` urlencoded as is).
async fn login_form(rig: &Rig, body: &str) -> reqwest::Response {
    rig.http
        .post(rig.u("/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body.to_string())
        .send()
        .await
        .unwrap()
}

struct Rig {
    sb: Sandbox,
    cfg: XoConfig,
    /// The queue's fabric, stopped alone by a test.
    queue: Option<Started>,
    http: reqwest::Client,
    url: String,
    token: String,
}

impl Rig {
    async fn start(extra: &[(&str, &str)]) -> Self {
        // On the heap: five services' start futures are deep for a test thread.
        Box::pin(Self::start_with_clock(extra, Clock::System)).await
    }

    /// The rig with the console on `clock` (the other services on the
    /// system's).
    async fn start_with_clock(extra: &[(&str, &str)], clock: Clock) -> Self {
        let mut sb = Sandbox::nats()
            .clock(Clock::System)
            .with(&[
                ("console.listen", "127.0.0.1:0"),
                ("supervisor.tick_ms", "100"),
            ])
            .with(extra)
            .build()
            .await;
        let queue = sb.start(&[Slot::Queue]).await;
        sb.start(&[Slot::Knowledge, Slot::Review, Slot::Supervisor])
            .await;
        sb.start_on_clock(plan(&[Slot::Console]), clock).await;
        let cfg = sb.cfg.clone();
        let token = std::fs::read_to_string(cfg.state.console_token_path())
            .unwrap()
            .trim()
            .to_string();
        Self {
            url: sb.get::<ConsoleHandle>().url.clone(),
            sb,
            cfg,
            queue: Some(queue),
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap(),
            token,
        }
    }

    fn console(&self) -> &ConsoleHandle {
        self.sb.get::<ConsoleHandle>()
    }

    /// Publishes a unit's report and waits until the console lists the unit.
    async fn report(&self, client: &xo_bus::Bus, r: &SaluteReport) {
        let unit = &r.unit.unit;
        typed::publish(
            client,
            &self.cfg.subjects().salute(unit),
            r,
            Format::Msgpack,
        )
        .await
        .unwrap();
        client.flush().await.unwrap();
        let path = format!("/api/v1/units/{unit}");
        xo_tests::until(&format!("{unit} listed after its report"), async || {
            (self.get(&path).await.0 == StatusCode::OK).then_some(())
        })
        .await
    }

    fn u(&self, path: &str) -> String {
        format!("{}{path}", self.url)
    }

    /// A GET with the token (and another `Host`, if given).
    async fn fetch(&self, path: &str, host: Option<&str>) -> reqwest::Response {
        let mut req = self.http.get(self.u(path)).bearer_auth(&self.token);
        if let Some(h) = host {
            req = req.header("host", h);
        }
        req.send().await.unwrap()
    }

    async fn get(&self, path: &str) -> (StatusCode, Value) {
        let r = self.fetch(path, None).await;
        let s = r.status();
        (s, r.json().await.unwrap_or(Value::Null))
    }

    /// A write with the bearer token.
    async fn send(&self, method: reqwest::Method, path: &str, body: Value) -> (StatusCode, Value) {
        let r = self
            .http
            .request(method, self.u(path))
            .bearer_auth(&self.token)
            .json(&body)
            .send()
            .await
            .unwrap();
        let s = r.status();
        (s, r.json().await.unwrap_or(Value::Null))
    }

    async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.send(reqwest::Method::POST, path, body).await
    }

    /// Everything, in the fabric's order (the console first).
    async fn stop(mut self) {
        self.sb.stop_all().await.unwrap();
    }
}

/// Claims a coder task as `r1` and completes it, passed, with `usage`
/// and the diff `diff` makes of its id: its id and that diff.
async fn complete_one(
    client: &xo_bus::Bus,
    cfg: &XoConfig,
    usage: xo_proto::queue::Usage,
    diff: impl FnOnce(&str) -> Option<xo_proto::queue::TaskDiff>,
) -> (String, Option<xo_proto::queue::TaskDiff>) {
    let (s, t) = (cfg.subjects(), Duration::from_secs(10));
    let claimed = typed::call(
        client,
        &s,
        &xo_proto::queue::Claim {
            role: "coder".into(),
            claimant: "r1".into(),
            wait_ms: 0,
        },
        t,
    )
    .await
    .unwrap()
    .expect("a task");
    let id = claimed.record.task.task_id.clone();
    let diff = diff(&id);
    typed::call(
        client,
        &s,
        &xo_proto::queue::Complete {
            task_id: id.clone(),
            token: claimed.token,
            claimant: "r1".into(),
            report: xo_proto::queue::ValidationReport {
                passed: true,
                ..Default::default()
            },
            manager_reply: None,
            usage,
            exchange: None,
            diff: diff.clone(),
        },
        t,
    )
    .await
    .unwrap();
    (id, diff)
}

fn task(id: &str) -> Value {
    json!({"task_id": id, "intent": format!("do {id}"), "instructions": "x", "role": "coder"})
}

#[tokio::test]
async fn every_route_answers_with_the_bus_types() {
    let rig = Rig::start(&[]).await;
    let (s, v) = rig.get("/api/v1/units").await;
    assert_eq!((s, v), (StatusCode::OK, json!([])));

    // Queue: init, goal, enqueue, list, one task, start/halt/resume/step.
    let (s, v) = rig
        .post("/api/v1/queue/init", json!({"mode": "MANUAL"}))
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["mode"], "MANUAL");
    let (s, _) = rig
        .post("/api/v1/queue/goal", json!({"description": "ship it"}))
        .await;
    assert_eq!(s, StatusCode::OK);
    let (s, v) = rig
        .post("/api/v1/tasks", json!({"tasks": [task("t1"), task("t2")]}))
        .await;
    assert_eq!((s, v), (StatusCode::OK, json!(["t1", "t2"])));
    let (_, v) = rig.get("/api/v1/tasks?state=pending").await;
    assert_eq!(v.as_array().unwrap().len(), 2);
    let (s, v) = rig.get("/api/v1/tasks/t2").await;
    assert_eq!(
        (s, v["task"]["intent"].clone()),
        (StatusCode::OK, json!("do t2"))
    );
    for (verb, status) in [
        ("start", "RUNNING"),
        ("halt", "HALTED"),
        ("resume", "RUNNING"),
    ] {
        let (s, v) = rig.post(&format!("/api/v1/queue/{verb}"), json!({})).await;
        assert_eq!(
            (s, v["status"].clone()),
            (StatusCode::OK, json!(status)),
            "{verb}"
        );
    }
    let (_, v) = rig.get("/api/v1/queue").await;
    assert_eq!(v["goal"]["description"], "ship it");
    let (s, v) = rig.post("/api/v1/queue/step", json!({})).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let (s, v) = rig.post("/api/v1/tasks/t1/cancel", json!({})).await;
    assert_eq!(
        (s, v["state"].clone()),
        (StatusCode::OK, json!("cancelled"))
    );
    // The queue's own refusal comes through with its code and message.
    let (s, v) = rig
        .post("/api/v1/tasks/t2/answer", json!({"text": "42"}))
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_eq!(v["code"], "invalid");
    assert!(
        v["message"].as_str().unwrap().contains("not awaiting"),
        "{v}"
    );

    // Audit tail and verify (the queue reads its own files).
    let (s, v) = rig.get("/api/v1/audit?lines=3").await;
    assert_eq!(s, StatusCode::OK);
    let events: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(events.len(), 3, "{v}");
    assert_eq!(*events.last().unwrap(), "TASK_CANCELLED");
    let (s, v) = rig.get("/api/v1/audit/verify").await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["intact"], true);
    assert!(v["lines"].as_u64().unwrap() >= 8, "{v}");

    // Steering from the API reaches the unit's subject (once the unit is known).
    let client = rig.sb.connect("test").await;
    let r = SaluteReport::new("u-1", "coder", 1, 1);
    typed::publish(
        &client,
        &rig.cfg.subjects().salute("u-1"),
        &r,
        Format::Msgpack,
    )
    .await
    .unwrap();
    // Its report checked, not only its watcher started (a watcher starts
    // with no role; the report gives it one).
    let (s, v) = xo_tests::until("u-1's report checked", async || {
        Some(rig.get("/api/v1/units/u-1").await)
            .filter(|(s, v)| *s == StatusCode::OK && v["summary"]["seq"] == 1)
    })
    .await;
    assert_eq!(
        (s, v["summary"]["role"].clone()),
        (StatusCode::OK, json!("coder"))
    );
    let mut sub = client
        .subscribe(&rig.cfg.subjects().steer("u-1"))
        .await
        .unwrap();
    client.flush().await.unwrap();
    let (s, v) = rig
        .post(
            "/api/v1/units/u-1/steer",
            json!({"message": "use the cache", "severity": "urgent"}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let m = tokio::time::timeout(Duration::from_secs(10), sub.next())
        .await
        .unwrap()
        .unwrap();
    let st: xo_proto::Steering = typed::decode(&m, usize::MAX).unwrap();
    assert!(st.message.contains("use the cache"));
    assert_eq!(st.severity, xo_proto::Severity::Urgent);

    // Knowledge, directives, review runs, settings.
    let (s, v) = rig.get("/api/v1/knowledge").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert!(v["docs"].is_array());
    let (s, v) = rig.get("/api/v1/knowledge/lessons/none-such").await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{v}");
    let (s, v) = rig.get("/api/v1/directives").await;
    assert_eq!((s, v), (StatusCode::OK, json!([])));
    let (s, v) = rig.get("/api/v1/reviews").await;
    assert_eq!((s, v), (StatusCode::OK, json!([])));
    let (s, v) = rig.get("/api/v1/settings").await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["settings"]["version"], 0);
    assert_eq!(v["defaults"]["supervisor.enabled"], true);
    assert!(v["keys"].as_array().unwrap().len() > 10);
    let (s, v) = rig
        .send(
            reqwest::Method::PUT,
            "/api/v1/settings",
            json!({"set": {"runner.global_template": "ALWAYS TEST"}, "base_version": 0}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["settings"]["version"], 1);
    // The console token's operator, through the API.
    assert_eq!(v["settings"]["updated_by"], "console (api)");
    // A change against an old version is refused; so is a key that is not settable.
    let (s, v) = rig
        .send(
            reqwest::Method::PUT,
            "/api/v1/settings",
            json!({"set": {"runner.max_retries": 1}, "base_version": 0}),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert!(
        v["message"].as_str().unwrap().contains("since version 0"),
        "{v}"
    );
    let (s, v) = rig
        .send(
            reqwest::Method::PUT,
            "/api/v1/settings",
            json!({"set": {"nats.url": "nats://elsewhere:4222"}}),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert!(v["message"].as_str().unwrap().contains("nats.url"), "{v}");
    // The change is in the audit with before and after.
    let (_, v) = rig.get("/api/v1/audit?lines=1").await;
    assert_eq!(v[0]["event"], "SETTINGS_CHANGED");
    assert_eq!(
        v[0]["state_after"]["values"]["runner.global_template"],
        "ALWAYS TEST"
    );
    assert_eq!(
        v[0]["state_before"]["values"]["runner.global_template"],
        Value::Null
    );

    // No fleet manager runs here: the answer names it.
    let (s, v) = rig.get("/api/v1/fleet").await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(v["code"], "unavailable");
    assert!(
        v["message"].as_str().unwrap().contains("fleet manager"),
        "{v}"
    );
    rig.stop().await;
}

#[tokio::test]
async fn bad_requests_are_refused_naming_what_was_wrong() {
    let rig = Rig::start(&[]).await;
    let (s, v) = rig.post("/api/v1/tasks", json!({"tasks": "t1"})).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert!(v["message"].as_str().unwrap().contains("`tasks`"), "{v}");
    let (s, v) = rig
        .post("/api/v1/tasks", json!({"tasks": [{"task_id": "x"}]}))
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert!(v["message"].as_str().unwrap().contains("tasks[0]"), "{v}");
    let r = rig
        .http
        .post(rig.u("/api/v1/units/u-1/steer"))
        .bearer_auth(&rig.token)
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let (s, v) = rig
        .post(
            "/api/v1/units/u-1/steer",
            json!({"message": "x", "severity": "loud"}),
        )
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert!(v["message"].as_str().unwrap().contains("`severity`"), "{v}");
    let (s, v) = rig
        .post("/api/v1/units/u-1/steer", json!({"message": "  "}))
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    let (s, v) = rig.get("/api/v1/units/a.b").await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert!(v["message"].as_str().unwrap().contains("unit"), "{v}");
    let (s, v) = rig.get("/api/v1/units/nobody").await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{v}");
    let (s, _) = rig.get("/api/v1/tasks/ghost").await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (s, v) = rig.get("/api/v1/tasks?state=sleeping").await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert!(v["message"].as_str().unwrap().contains("sleeping"), "{v}");
    let (s, v) = rig.get("/api/v1/no/such/route").await;
    assert_eq!(
        (s, v["code"].clone()),
        (StatusCode::NOT_FOUND, json!("not_found"))
    );
    let (s, v) = rig.post("/api/v1/queue/explode", json!({})).await;
    assert_eq!(s, StatusCode::NOT_FOUND, "{v}");
    let (s, v) = rig
        .post("/api/v1/tasks/t1/answer", json!({"txt": "typo"}))
        .await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert!(v["message"].as_str().unwrap().contains("txt"), "{v}");
    rig.stop().await;
}

#[tokio::test]
async fn the_token_csrf_and_read_only_rules_hold() {
    let rig = Rig::start(&[]).await;
    let post = |path: &str| rig.http.post(rig.u(path)).json(&json!({"reason": "r"}));
    // No token, a wrong token.
    let r = post("/api/v1/queue/halt").send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["code"], "unauthorized");
    let r = post("/api/v1/queue/halt")
        .bearer_auth("not-the-token-at-all")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    // Issue 23, item 7: reads need the token too on loopback (any local
    // user could read the fleet), unless console.open_reads says otherwise.
    for path in ["/api/v1/units", "/", "/metrics", "/api/v1/events"] {
        let r = rig.http.get(rig.u(path)).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "{path}");
    }
    // A page reaching the console under another name (DNS rebinding) is
    // refused, even with the token; loopback names are not.
    let r = rig.fetch("/api/v1/units", Some("evil.example:7878")).await;
    assert_eq!(r.status(), StatusCode::MISDIRECTED_REQUEST);
    let port = rig.console().addr.port();
    let r = rig
        .fetch("/api/v1/units", Some(&format!("localhost:{port}")))
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    // A wrong token is refused even for a read.
    let r = rig
        .http
        .get(rig.u("/api/v1/units"))
        .bearer_auth("nope-nope-nope-nope")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    // The cookie of a logged-in browser needs the CSRF value for a write.
    let login = login_form(&rig, &format!("token={}", rig.token)).await;
    assert_eq!(login.status(), StatusCode::SEE_OTHER);
    let cookie = login.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let pair = cookie.split(';').next().unwrap().to_string();
    rig.post("/api/v1/queue/init", json!({})).await;
    let r = post("/api/v1/queue/halt")
        .header("cookie", &pair)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["code"], "csrf");
    let csrf = page_csrf(&rig, &pair, "/queue").await;
    let r = post("/api/v1/queue/halt")
        .header("cookie", &pair)
        .header("x-xo-csrf", &csrf)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    // A form without its CSRF field is refused; with it, it redirects back.
    let r = rig
        .http
        .post(rig.u("/ui/queue/resume"))
        .header("cookie", &pair)
        .form(&[("x", "y")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let r = rig
        .http
        .post(rig.u("/ui/queue/resume"))
        .header("cookie", &pair)
        .form(&[("csrf", csrf.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let back = r.headers()["location"].to_str().unwrap().to_string();
    assert!(back.starts_with("/queue?ok="), "{back}");
    // Issue 40, item 5: the page shows the flash its own redirect signed,
    // and nothing of a flash someone else wrote into a link.
    let shown = |path: String| {
        let rig = &rig;
        let pair = pair.clone();
        async move {
            rig.http
                .get(rig.u(&path))
                .header("cookie", &pair)
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap()
        }
    };
    let page = shown(back.clone()).await;
    assert!(page.contains("class=\"flash"), "the signed flash is shown");
    for forged in [
        "/queue?error=Session%20expired%3A%20call%20%2B1-555-0100".to_string(),
        back.replace("?ok=", "?ok=Call%20us%20").to_string(),
    ] {
        let page = shown(forged.clone()).await;
        assert!(
            !page.contains("555-0100") && !page.contains("Call us"),
            "{forged} was shown"
        );
    }
    // A login's return path is a route of this console, whatever the
    // browser would make of it.
    let token = rig.token.clone();
    for next in [
        "/%09/evil.example",
        "/%0d/x",
        "//evil.example",
        "/%5Cevil.example",
    ] {
        let r = login_form(&rig, &format!("token={token}&next={next}")).await;
        assert_eq!(r.status(), StatusCode::SEE_OTHER, "{next}");
        assert_eq!(r.headers()["location"].to_str().unwrap(), "/", "{next}");
    }
    // A wrong login token.
    let r = login_form(&rig, "token=guess-guess-guess").await;
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    // The right one in a URL the browser would keep: not used.
    let r = rig
        .http
        .get(rig.u(&format!("/login?token={token}")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert!(r.headers().get("set-cookie").is_none());
    let page = r.text().await.unwrap();
    assert!(
        page.contains("so it was not used"),
        "the page says why: {page}"
    );
    // A login link's one-time code logs in once.
    let link = rig.console().login_url();
    let path = &link[link.find("/login").unwrap()..];
    assert!(!link.contains(&token), "{link}");
    let r = rig.http.get(rig.u(path)).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(
        r.headers()["set-cookie"]
            .to_str()
            .unwrap()
            .split(';')
            .next(),
        Some(pair.as_str())
    );
    let again = rig.http.get(rig.u(path)).send().await.unwrap();
    assert_eq!(again.status(), StatusCode::UNAUTHORIZED, "used once");
    assert!(again.headers().get("set-cookie").is_none());
    rig.stop().await;

    // Read-only: actions hidden and refused, even with the token.
    let ro = Rig::start(&[("console.read_only", "true")]).await;
    let (s, v) = ro.post("/api/v1/queue/init", json!({})).await;
    assert_eq!(
        (s, v["code"].clone()),
        (StatusCode::FORBIDDEN, json!("read_only"))
    );
    let page = ro.fetch("/queue", None).await.text().await.unwrap();
    assert!(
        page.contains("read-only") && !page.contains("<form method=\"post\""),
        "{page}"
    );
    let (s, _) = ro.get("/api/v1/queue").await;
    assert_eq!(s, StatusCode::OK);
    ro.stop().await;

    // Open reads on loopback, when asked for: pages and API reads without
    // the token, actions still with it; the Host still checked.
    let reads = Rig::start(&[("console.open_reads", "true")]).await;
    for path in ["/api/v1/units", "/"] {
        let r = reads.http.get(reads.u(path)).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{path}");
    }
    let r = reads
        .http
        .post(reads.u("/api/v1/queue/halt"))
        .json(&json!({"reason": "r"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let r = reads
        .http
        .get(reads.u("/"))
        .header("host", "rebound.example")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::MISDIRECTED_REQUEST);
    reads.stop().await;

    // Beyond loopback every request needs the token.
    let open = Rig::start(&[("console.listen", "0.0.0.0:0")]).await;
    let port = open.console().addr.port();
    let url = format!("http://127.0.0.1:{port}/api/v1/units");
    let r = open.http.get(&url).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let r = open
        .http
        .get(&url)
        .bearer_auth(&open.token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let r = open
        .http
        .get(format!("http://127.0.0.1:{port}/"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    open.stop().await;
}

#[tokio::test]
async fn a_service_that_is_down_is_named_not_a_500() {
    let mut rig = Rig::start(&[]).await;
    let q = rig.queue.take().unwrap();
    rig.sb.stop(q).await.unwrap();
    let r = rig.fetch("/queue", None).await;
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    let page = r.text().await.unwrap();
    assert!(
        page.contains("the queue is not running") && page.contains("xo serve queue"),
        "{page}"
    );
    let (s, v) = rig.get("/api/v1/tasks").await;
    assert_eq!(
        (s, v["code"].clone()),
        (StatusCode::SERVICE_UNAVAILABLE, json!("unavailable"))
    );
    // The fleet page still works: another service.
    let r = rig.fetch("/", None).await;
    assert_eq!(r.status(), StatusCode::OK);
    rig.stop().await;
}

#[tokio::test]
async fn metrics_parse_as_prometheus_text() {
    let rig = Rig::start(&[]).await;
    rig.post("/api/v1/queue/init", json!({})).await;
    rig.post(
        "/api/v1/tasks",
        json!({"tasks": [task("m1"), task("m2"), task("m3")]}),
    )
    .await;
    rig.post("/api/v1/tasks/m3/cancel", json!({})).await;
    rig.post(
        "/api/v1/queue/goal",
        json!({"description": "g", "budget_usd": 25.0, "completed": false}),
    )
    .await;
    rig.post("/api/v1/queue/start", json!({})).await;
    let client = rig.sb.connect("test").await;
    // One task done in 2.5 s of wall time, for the duration histogram.
    complete_one(
        &client,
        &rig.cfg,
        xo_proto::queue::Usage {
            wall_ms: 2_500,
            cost_usd: 0.5,
            ..Default::default()
        },
        |_| None,
    )
    .await;
    // A unit in a PACE emergency: the XO steers it (kind pace).
    let mut r = SaluteReport::new("metric-unit", "coder", 1, 1);
    r.unit.pace = xo_proto::Pace::Emergency;
    r.size.context_fill = 0.4;
    r.equipment.cost_usd = 1.25;
    // Two of its records its sensor could not read (issue 38).
    r.status.unreadable = 2;
    typed::publish(
        &client,
        &rig.cfg.subjects().salute("metric-unit"),
        &r,
        Format::Msgpack,
    )
    .await
    .unwrap();
    // Wait until the supervisor has it and has steered it (the metrics
    // then must say so).
    xo_tests::until("a unit steered", async || {
        let (_, v) = rig.get("/api/v1/units").await;
        v.as_array()
            .is_some_and(|a| a.iter().any(|u| u["steering_sent"].as_u64() >= Some(1)))
            .then_some(())
    })
    .await;
    let text = rig.fetch("/metrics", None).await.text().await.unwrap();
    let lines = text.lines().map(|l| Ok(l.to_string()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("valid exposition");
    let value = |name: &str, label: Option<(&str, &str)>| -> f64 {
        let s = scrape
            .samples
            .iter()
            .find(|s| s.metric == name && label.is_none_or(|(k, v)| s.labels.get(k) == Some(v)))
            .unwrap_or_else(|| panic!("{name} {label:?} missing in\n{text}"));
        match s.value {
            prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Untyped(v) => v,
            ref other => panic!("{name}: {other:?}"),
        }
    };
    assert_eq!(value("xo_tasks", Some(("state", "pending"))), 1.0);
    assert_eq!(value("xo_tasks", Some(("state", "completed"))), 1.0);
    assert_eq!(value("xo_tasks", Some(("state", "cancelled"))), 1.0);
    assert_eq!(value("xo_service_up", Some(("service", "queue"))), 1.0);
    assert_eq!(value("xo_reports_received_total", None), 1.0);
    // Nothing lost (issue 43): both counters there, at zero.
    assert_eq!(value("xo_reports_gap_total", None), 0.0);
    assert_eq!(value("xo_reports_dropped_total", None), 0.0);
    // How often each unit's state is written: the interval, one unit being
    // far below the write budget.
    assert_eq!(value("xo_unit_state_persist_seconds", None), 5.0);
    assert_eq!(value("xo_queue_running", None), 1.0);
    assert_eq!(value("xo_units_unreadable", None), 1.0);
    assert_eq!(value("xo_unit_records_unreadable", None), 2.0);
    assert!(scrape.docs.contains_key("xo_tasks"), "HELP lines are read");
    // Health within the schema: green, amber, red.
    assert!(!text.contains("health=\"black\""), "{text}");
    // One steering counter, the supervisor's, by kind.
    assert_eq!(value("xo_steering_sent_total", Some(("kind", "pace"))), 1.0);
    assert!(
        !text.contains("xo_steering_total"),
        "no second steering counter"
    );
    // Per role.
    assert_eq!(value("xo_role_units", Some(("role", "coder"))), 1.0);
    assert_eq!(
        value("xo_role_context_fill_max", Some(("role", "coder"))),
        0.4
    );
    assert_eq!(value("xo_role_cost_usd", Some(("role", "coder"))), 1.25);
    // The goal's spend against its budget; not stuck.
    assert_eq!(value("xo_goal_spent_usd", None), 0.5);
    assert_eq!(value("xo_goal_budget_usd", None), 25.0);
    assert_eq!(value("xo_queue_stuck", None), 0.0);
    assert_eq!(
        value(
            "xo_build_info",
            Some(("version", env!("CARGO_PKG_VERSION")))
        ),
        1.0
    );
    // Task durations, a histogram in seconds.
    let h = scrape
        .samples
        .iter()
        .find(|s| s.metric == "xo_task_duration_seconds")
        .unwrap_or_else(|| panic!("the histogram in\n{text}"));
    match &h.value {
        prometheus_parse::Value::Histogram(b) => {
            let at = |le: f64| b.iter().find(|x| x.less_than == le).unwrap().count;
            assert_eq!((at(1.0), at(5.0), at(f64::INFINITY)), (0.0, 1.0, 1.0));
        }
        other => panic!("{other:?}"),
    }
    rig.stop().await;
}

/// Reads SSE frames until one of `event` arrives; returns its data.
async fn next_event(resp: &mut reqwest::Response, buf: &mut String, event: &str) -> Value {
    loop {
        let (name, data) = next_frame(resp, buf).await;
        if name == event {
            return data;
        }
    }
}

/// The next event of a stream, whatever its name (keep-alive comments
/// skipped).
async fn next_frame(resp: &mut reqwest::Response, buf: &mut String) -> (String, Value) {
    loop {
        while let Some(end) = buf.find("\n\n") {
            let frame: String = buf.drain(..end + 2).collect();
            let mut name = "";
            let mut data = String::new();
            for l in frame.lines() {
                if let Some(n) = l.strip_prefix("event: ") {
                    name = n;
                } else if let Some(d) = l.strip_prefix("data: ") {
                    data.push_str(d);
                }
            }
            if !name.is_empty() {
                return (name.to_string(), serde_json::from_str(&data).unwrap());
            }
        }
        let chunk = tokio::time::timeout(Duration::from_secs(20), resp.chunk())
            .await
            .expect("an event within the hang guard")
            .unwrap()
            .expect("stream open");
        buf.push_str(&String::from_utf8_lossy(&chunk));
    }
}

/// Issue 41, item 2: a fleet page's stream carries only the rows its page
/// uses (`?view=` names the page as rendered): its own, and on page 1 in
/// triage order a row that ranks into it; the others' are not sent to it.
#[tokio::test]
async fn a_fleet_tab_gets_only_the_rows_of_its_page() {
    use std::collections::BTreeSet;
    let rig = Rig::start(&[]).await;
    let client = rig.sb.connect("test").await;
    let subjects = rig.cfg.subjects();
    let send = |unit: String, seq: u64, health: xo_proto::Health| {
        let client = client.clone();
        let subjects = subjects.clone();
        async move {
            let mut r = SaluteReport::new(&unit, "coder", seq, seq);
            r.equipment.cost_usd = seq as f64 / 10.0;
            r.status.health = health;
            typed::publish(&client, &subjects.salute(&unit), &r, Format::Msgpack)
                .await
                .unwrap();
        }
    };
    for i in 0..20 {
        rig.report(
            &client,
            &SaluteReport::new(format!("view-{i:02}"), "coder", 1, 1),
        )
        .await;
    }
    // Page 1 of 5 rows, triage order: all green, so by id.
    let page = rig.fetch("/?per=5", None).await.text().await.unwrap();
    let view = page
        .split("data-view=\"")
        .nth(1)
        .and_then(|t| t.split('"').next())
        .unwrap_or_else(|| panic!("no view on the fleet table: {page}"))
        .to_string();
    let mut tab = rig
        .fetch(&format!("/api/v1/events?only=rows&view={view}"), None)
        .await;
    assert_eq!(tab.status(), StatusCode::OK);
    let mut buf = String::new();
    // Every unit reports again; one turns red (it ranks into page 1).
    for i in 0..20 {
        let h = if i == 15 {
            xo_proto::Health::Red
        } else {
            xo_proto::Health::Green
        };
        send(format!("view-{i:02}"), 2, h).await;
    }
    client.flush().await.unwrap();
    let allowed: BTreeSet<String> = (0..5)
        .map(|i| format!("view-{i:02}"))
        .chain(["view-15".to_string()])
        .collect();
    let mut got: BTreeSet<String> = BTreeSet::new();
    let mut red_in = false;
    let mut page_fresh = false;
    while !(red_in && page_fresh) {
        let (name, batch) = next_frame(&mut tab, &mut buf).await;
        assert_eq!(name, "rows");
        assert_eq!(
            batch["units"], 20,
            "the counts are the whole fleet's: {batch}"
        );
        for row in batch["rows"].as_array().unwrap() {
            let unit = row["unit"].as_str().unwrap().to_string();
            red_in |= unit == "view-15" && row["rank"] == 0;
            page_fresh |= unit == "view-00" && row["seq"] == 2;
            got.insert(unit);
        }
    }
    let others: Vec<&String> = got.difference(&allowed).collect();
    assert!(
        others.is_empty(),
        "rows not on the page were sent: {others:?}"
    );
    // A view not known (or claimed already) gets every row, as before.
    let r = rig
        .fetch(&format!("/api/v1/events?only=rows&view={view}"), None)
        .await;
    assert_eq!(r.status(), StatusCode::OK);
}

/// Issue 41, item 2: the fleet page's live rows come on the stream,
/// rendered by the console, a batch at a time with the fleet's counts (a
/// tab makes no request per report), each at the unit's latest report; a
/// stream takes only the events it names (`?only=`, unknown names
/// refused) and one unit's (`?unit=`).
#[tokio::test]
async fn the_fleet_rows_come_batched_and_a_stream_takes_only_what_it_asks() {
    use std::collections::BTreeSet;
    let rig = Rig::start(&[]).await;
    let r = rig.fetch("/api/v1/events?only=rows,bogus", None).await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let text = r.text().await.unwrap();
    assert!(
        text.contains("\"bogus\"") && text.contains("salute, steer") && text.contains("rows"),
        "{text}"
    );
    let r = rig.fetch("/api/v1/events?unit=a%20b", None).await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);

    let mut rows = rig.fetch("/api/v1/events?only=rows", None).await;
    let mut one = rig
        .fetch("/api/v1/events?only=salute&unit=batch-07", None)
        .await;
    let (mut rbuf, mut obuf) = (String::new(), String::new());
    let client = rig.sb.connect("test").await;
    let subjects = rig.cfg.subjects();
    // 20 units report three times each; batch-07 is the last of each round.
    const UNITS: usize = 20;
    for seq in 1..=3u64 {
        for i in (0..UNITS).filter(|i| *i != 7).chain([7]) {
            let unit = format!("batch-{i:02}");
            let mut r = SaluteReport::new(&unit, "coder", seq, seq);
            // Each report reads differently in the row (a row that reads
            // the same is not sent again).
            r.equipment.cost_usd = seq as f64 / 10.0;
            if i % 5 == 0 {
                r.status.health = xo_proto::Health::Amber;
            }
            typed::publish(&client, &subjects.salute(&unit), &r, Format::Msgpack)
                .await
                .unwrap();
        }
    }
    client.flush().await.unwrap();
    // The one-unit stream: only batch-07's reports, in order.
    for seq in 1..=3u64 {
        let (name, ev) = next_frame(&mut one, &mut obuf).await;
        assert_eq!(name, "salute");
        assert_eq!(ev["unit"]["unit"], "batch-07", "{ev}");
        assert_eq!(ev["time"]["seq"], seq);
    }
    // The rows stream: only `rows`; every unit's row arrives, never twice
    // in one batch, at its last report; the counts are the fleet's.
    let mut latest: std::collections::BTreeMap<String, Value> = Default::default();
    let mut last = Value::Null;
    while latest.len() < UNITS
        || latest.values().any(|r| r["seq"] != 3)
        || last["units"] != json!(UNITS)
    {
        let (name, batch) = next_frame(&mut rows, &mut rbuf).await;
        assert_eq!(name, "rows", "{batch}");
        let mut in_batch = BTreeSet::new();
        for row in batch["rows"].as_array().unwrap() {
            let unit = row["unit"].as_str().unwrap().to_string();
            assert!(in_batch.insert(unit.clone()), "{unit} twice in {batch}");
            let html = row["html"].as_str().unwrap();
            assert!(
                html.starts_with(&format!("<tr id=\"unit-{unit}\"")),
                "{html}"
            );
            assert_eq!(row["role"], "coder");
            latest.insert(unit, row.clone());
        }
        last = batch;
    }
    for (unit, row) in &latest {
        let amber = unit.ends_with("00")
            || unit.ends_with("05")
            || unit.ends_with("10")
            || unit.ends_with("15");
        assert_eq!(row["rank"], if amber { 1 } else { 3 }, "{row}");
    }
    let counts: Vec<u64> = last["counts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_u64().unwrap())
        .collect();
    // red, amber, stale, green, idle.
    assert_eq!(counts, [0, 4, 0, 16, 0], "{last}");
    let metrics = rig.fetch("/metrics", None).await.text().await.unwrap();
    let value = |name: &str| -> u64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name} missing:\n{metrics}"))
            .parse()
            .unwrap()
    };
    assert!(value("xo_console_row_batches_total") >= 1);
    assert!(value("xo_console_live_bytes_total") > 0);
    // Two refused streams, two open ones; the metrics themselves not counted.
    assert!(value("xo_console_requests_total") >= 4);
}

#[tokio::test]
async fn live_events_and_settings_that_apply_without_a_restart() {
    let rig = Rig::start(&[]).await;
    let mut resp = rig.fetch("/api/v1/events", None).await;
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let mut buf = String::new();
    let client = rig.sb.connect("test").await;
    let subjects = rig.cfg.subjects();
    // The hub subscribes before the console answers; a report goes out as JSON
    // even when it was sent as MessagePack.
    let mut stalled = SaluteReport::new("sse-unit", "coder", 10, 1);
    stalled.activity.turns_since_progress = 9;
    typed::publish(
        &client,
        &subjects.salute("sse-unit"),
        &stalled,
        Format::Msgpack,
    )
    .await
    .unwrap();
    let ev = next_event(&mut resp, &mut buf, "salute").await;
    assert_eq!(ev["unit"]["unit"], "sse-unit");
    // The supervisor steers the stall; the steering is on the feed too.
    let ev = next_event(&mut resp, &mut buf, "steer").await;
    assert_eq!(
        (ev["unit"].clone(), ev["kind"].clone()),
        (json!("sse-unit"), json!("stall"))
    );

    // Supervision switched off in the settings: the next stall is not steered.
    let (s, v) = rig
        .send(
            reqwest::Method::PUT,
            "/api/v1/settings",
            json!({"set": {"supervisor.enabled": false}}),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let ev = next_event(&mut resp, &mut buf, "settings").await;
    assert_eq!(ev["settings"]["version"], 1);
    let mut steer = client.subscribe(&subjects.steer("sse-unit")).await.unwrap();
    client.flush().await.unwrap();
    // The supervisor applies the change from the event; wait until it has.
    let sup_version = || {
        rig.sb
            .get::<xo_supervisor::SupervisorHandle>()
            .ctx
            .live
            .version()
    };
    xo_tests::eventually("the supervisor applied settings version 1", || {
        sup_version() == 1
    })
    .await;
    for turn in 20..23u64 {
        let mut r = SaluteReport::new("sse-unit", "coder", turn, turn);
        r.activity.turns_since_progress = 20;
        typed::publish(&client, &subjects.salute("sse-unit"), &r, Format::Msgpack)
            .await
            .unwrap();
        let ev = next_event(&mut resp, &mut buf, "salute").await;
        assert_eq!(ev["time"]["seq"], turn);
    }
    // Evaluated (the seq moved) and nothing steered.
    xo_tests::until("sse-unit's seq 22 evaluated", async || {
        let (_, v) = rig.get("/api/v1/units/sse-unit").await;
        (v["summary"]["seq"] == 22).then_some(())
    })
    .await;
    assert!(
        steer.try_next().is_none(),
        "supervision is off: no steering"
    );
    // Back on: the same stall is steered again.
    let (s, _) = rig
        .send(
            reqwest::Method::PUT,
            "/api/v1/settings",
            json!({"unset": ["supervisor.enabled"]}),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    xo_tests::eventually("the supervisor applied settings version 2", || {
        sup_version() == 2
    })
    .await;
    let mut r = SaluteReport::new("sse-unit", "coder", 40, 40);
    r.activity.turns_since_progress = 30;
    typed::publish(&client, &subjects.salute("sse-unit"), &r, Format::Msgpack)
        .await
        .unwrap();
    let m = tokio::time::timeout(Duration::from_secs(20), steer.next())
        .await
        .unwrap()
        .unwrap();
    let st: xo_proto::Steering = typed::decode(&m, usize::MAX).unwrap();
    assert_eq!(st.kind, xo_proto::AnomalyKind::Stall);
    drop(resp);
    rig.stop().await;
}

/// A raw connection to `addr` from the loopback address `from`
/// (127.0.0.x: each a different client to the console).
async fn connect_from(from: &str, addr: std::net::SocketAddr) -> tokio::net::TcpStream {
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.bind(format!("{from}:0").parse().unwrap()).unwrap();
    sock.connect(addr).await.unwrap()
}

/// What the console says on `s` before closing it, or `None` while it
/// keeps the connection open (nothing within `wait`).
async fn answer(s: &mut tokio::net::TcpStream, wait: Duration) -> Option<String> {
    use tokio::io::AsyncReadExt;
    let mut got = Vec::new();
    match tokio::time::timeout(wait, s.read_to_end(&mut got)).await {
        Ok(_) => Some(String::from_utf8_lossy(&got).into_owned()),
        Err(_) => None,
    }
}

/// Sends `GET path` with the console's token on `s`.
async fn send_get(s: &mut tokio::net::TcpStream, path: &str, token: &str) {
    use tokio::io::AsyncWriteExt;
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n\r\n")
            .as_bytes(),
    )
    .await
    .unwrap();
}

/// Sends `GET path` with the console's token on `s` and reads the answer's
/// head (the connection stays open when the answer keeps it alive).
async fn request_on(s: &mut tokio::net::TcpStream, path: &str, token: &str) -> String {
    use tokio::io::AsyncReadExt;
    send_get(s, path, token).await;
    let mut buf = vec![0u8; 4096];
    let n = s.read(&mut buf).await.unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// `GET path` with the token on `s`, kept alive: the whole answer (its
/// body read to its `content-length`).
async fn get_on(s: &mut tokio::net::TcpStream, path: &str, token: &str) -> String {
    use tokio::io::AsyncReadExt;
    send_get(s, path, token).await;
    let mut got = Vec::new();
    let mut buf = vec![0u8; 65536];
    loop {
        let n = s.read(&mut buf).await.unwrap();
        assert!(n > 0, "closed mid-answer");
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .and_then(|n| n.trim().parse().ok())
                .expect("a content-length");
            if body.len() >= len {
                return text.into_owned();
            }
        }
    }
}

/// Issue 23, item 3: about 20,000 `GET /api/v1/events` once took every file
/// descriptor of the process. Issue 40, item 5: 256 idle TCP connections
/// then kept the console at 503. Connections count against
/// `console.max_connections` only once a request is parsed; idle sockets
/// beyond a bound push out the oldest idle one instead of shutting the
/// door, so a browser that sends its request at once is served whatever
/// the flood; live streams are bounded; one more of what is bounded is
/// answered 503 naming the bound, and a slot given back is used again.
#[tokio::test]
async fn connections_and_event_streams_are_bounded() {
    let rig = Rig::start(&[
        // 3 streams, this test's metrics connection and five more.
        ("console.max_connections", "9"),
        ("console.max_event_streams", "3"),
        ("console.max_per_client", "5"),
        // No connection here times out: the bounds alone are tested.
        ("console.header_timeout_ms", "600000"),
        ("console.idle_timeout_ms", "600000"),
    ])
    .await;
    let addr = rig.console().addr;
    // Each stream on its own client: its own connection.
    let client = || {
        let mut h = reqwest::header::HeaderMap::new();
        h.insert(
            reqwest::header::AUTHORIZATION,
            format!("Bearer {}", rig.token).parse().unwrap(),
        );
        reqwest::Client::builder()
            .default_headers(h)
            .pool_max_idle_per_host(0)
            .build()
            .unwrap()
    };
    let mut streams = Vec::new();
    for _ in 0..3 {
        let r = client().get(rig.u("/api/v1/events")).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        streams.push(r);
    }
    let r = client().get(rig.u("/api/v1/events")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(r.headers()["retry-after"], "5");
    let text = r.text().await.unwrap();
    assert!(text.contains("console.max_event_streams"), "{text}");

    // One address opens 25 sockets and sends nothing (five to its bound):
    // each one past the bound pushes out the oldest (closed, nothing
    // said: the accept queue is first in, first out), the last five stay.
    let mut idle = Vec::new();
    for _ in 0..25 {
        idle.push(connect_from("127.0.0.2", addr).await);
    }
    let mut kept = idle.split_off(20);
    for (i, s) in idle.iter_mut().enumerate() {
        let a = answer(s, Duration::from_secs(60)).await;
        assert_eq!(a.as_deref(), Some(""), "idle socket {i} was not pushed out");
    }
    for s in &mut kept {
        assert_eq!(answer(s, Duration::from_millis(50)).await, None);
    }
    // The operator, behind the same address (a loopback console), opens a
    // page: the oldest idle socket makes room, the page is served.
    let mut page = connect_from("127.0.0.2", addr).await;
    let head = request_on(&mut page, "/api/v1/queue", &rig.token).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    drop(page);
    // Until the page's connection is closed it holds a slot: waited for
    // (the refused stream's too), on a connection of its own kept open.
    let mut metrics_conn = connect_from("127.0.0.9", addr).await;
    // 3 streams and the metrics connection.
    xo_tests::until("4 connections open", async || {
        let m = get_on(&mut metrics_conn, "/metrics", &rig.token).await;
        m.lines()
            .find_map(|l| l.strip_prefix("xo_console_connections_open "))
            .filter(|open| *open == "4")
            .map(|_| ())
    })
    .await;

    // Another address holds five parsed connections: with the 3 streams
    // and the metrics connection that is max_connections. Its sixth has no idle one to push out:
    // 503, naming the per-client bound.
    let mut held = Vec::new();
    for _ in 0..5 {
        let mut s = connect_from("127.0.0.3", addr).await;
        let head = request_on(&mut s, "/healthz", &rig.token).await;
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        held.push(s);
    }
    let mut sixth = connect_from("127.0.0.3", addr).await;
    let busy = answer(&mut sixth, Duration::from_secs(60)).await.unwrap();
    assert!(busy.starts_with("HTTP/1.1 503"), "{busy}");
    assert!(busy.contains("console.max_per_client"), "{busy}");
    // A third address's request finds max_connections taken: 503, naming
    // it.
    let mut s4 = connect_from("127.0.0.4", addr).await;
    let head = request_on(&mut s4, "/healthz", &rig.token).await;
    let refusal = {
        use tokio::io::AsyncReadExt;
        let mut rest = Vec::new();
        s4.read_to_end(&mut rest).await.unwrap();
        head + &String::from_utf8_lossy(&rest)
    };
    assert!(refusal.starts_with("HTTP/1.1 503"), "{refusal}");
    assert!(refusal.contains("retry-after: 1"), "{refusal}");
    assert!(refusal.contains("console.max_connections"), "{refusal}");

    // Slots come back as connections close: a page loads again.
    held.clear();
    drop(metrics_conn);
    xo_tests::until("a slot came back", async || {
        let r = client().get(rig.u("/api/v1/queue")).send().await.ok()?;
        (r.status() == StatusCode::OK).then_some(())
    })
    .await;
    let metrics = client()
        .get(rig.u("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for line in [
        "xo_console_event_streams_refused_total 1",
        "xo_console_connections_timed_out_total 0",
        "xo_console_connections_evicted_total 21",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in\n{metrics}");
    }
    // The per-client refusal and the request at max_connections.
    assert!(
        metrics
            .lines()
            .any(|l| l == "xo_console_connections_refused_total 2"),
        "{metrics}"
    );
    drop(kept);
    drop(streams);
    rig.stop().await;
}

/// Issue 40, item 5: a socket that sends nothing, one that sends half a
/// request head, and a kept-alive connection that sends no next request
/// are each closed after `console.header_timeout_ms`, and counted; a live
/// event stream, quiet as it may be, is not.
#[tokio::test]
async fn sockets_that_send_no_request_are_closed() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rig = Rig::start(&[("console.header_timeout_ms", "300")]).await;
    let addr = rig.console().addr;
    let stream = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap()
        .get(rig.u("/api/v1/events"))
        .bearer_auth(&rig.token)
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), StatusCode::OK);

    let mut silent = connect_from("127.0.0.1", addr).await;
    let mut half = connect_from("127.0.0.1", addr).await;
    half.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0")
        .await
        .unwrap();
    let mut kept = connect_from("127.0.0.1", addr).await;
    kept.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 512];
    let n = kept.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    // Each is closed by the console (read_to_end returns) with nothing
    // more said; the wait is a guard against a hang, not a measure.
    for (what, s) in [
        ("silent", &mut silent),
        ("half a head", &mut half),
        ("kept alive", &mut kept),
    ] {
        let a = answer(s, Duration::from_secs(60)).await;
        assert!(a.is_some(), "{what}: still open after a minute");
    }
    // The quiet event stream is still open and still serves.
    let mut stream = stream;
    let fresh = || {
        reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .build()
            .unwrap()
    };
    let r = fresh()
        .get(rig.u("/api/v1/queue"))
        .bearer_auth(&rig.token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let chunk = tokio::time::timeout(Duration::from_millis(200), stream.chunk()).await;
    assert!(
        !matches!(chunk, Ok(Ok(None)) | Ok(Err(_))),
        "the event stream was closed: {chunk:?}"
    );
    let metrics = fresh()
        .get(rig.u("/metrics"))
        .bearer_auth(&rig.token)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics
            .lines()
            .any(|l| l == "xo_console_connections_timed_out_total 3"),
        "{metrics}"
    );
    drop(stream);
    rig.stop().await;
}

/// `/api/v1/openapi.json` is made from the router's own route list: every
/// operation it describes is served by its handler (never the fallback,
/// never 405), refusals have the documented `{code, message}` shape, each
/// operation names its success reply and the bearer scheme, and the API
/// module adds no route outside the description.
#[tokio::test]
async fn the_openapi_description_is_every_route_and_only_those() {
    let rig = Rig::start(&[]).await;
    let (s, spec) = rig.get("/api/v1/openapi.json").await;
    assert_eq!(s, StatusCode::OK);
    assert!(
        spec["openapi"]
            .as_str()
            .is_some_and(|v| v.starts_with("3.")),
        "{spec}"
    );
    assert_eq!(spec["servers"][0]["url"], "/api/v1");
    assert_eq!(
        spec["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    let paths = spec["paths"].as_object().expect("paths");
    let sample = |name: &str| match name {
        "unit" => "nobody",
        "id" => "no-such-task",
        "verb" => "nothing",
        "category" => "rules",
        "name" => "nothing",
        "role" => "coder",
        other => panic!("a path parameter the test does not know: {other}"),
    };
    let mut ops = 0;
    for (path, item) in paths {
        for method in ["get", "post", "put", "delete", "patch"] {
            let Some(op) = item.get(method) else { continue };
            ops += 1;
            let what = format!("{} {path}", method.to_uppercase());
            // Described: a summary, its parameters, a success reply.
            assert!(op["summary"].is_string(), "{what}: no summary");
            let declared: Vec<&str> = op["parameters"]
                .as_array()
                .map(|ps| {
                    ps.iter()
                        .filter(|p| p["in"] == "path")
                        .filter_map(|p| p["name"].as_str())
                        .collect()
                })
                .unwrap_or_default();
            let mut url = path.clone();
            for seg in path.split('/').filter(|s| s.starts_with('{')) {
                let name = seg.trim_matches(|c| c == '{' || c == '}');
                assert!(
                    declared.contains(&name),
                    "{what}: path parameter {name} not described"
                );
                url = url.replace(seg, sample(name));
            }
            assert!(
                op["responses"]["200"].is_object(),
                "{what}: no 200 reply described"
            );
            // Every write takes a JSON body but a restart.
            if method != "get" && !path.ends_with("/restart") {
                assert!(
                    op["requestBody"]["content"]["application/json"].is_object(),
                    "{what}: its body is not described"
                );
            }
            // Served by its own handler.
            let full = format!("/api/v1{url}");
            if path == "/events" {
                let r = rig.fetch(&full, None).await;
                assert_eq!(r.status(), StatusCode::OK, "{what}");
                assert!(
                    r.headers()["content-type"]
                        .to_str()
                        .unwrap()
                        .starts_with("text/event-stream")
                );
                continue;
            }
            let m = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let (status, body) = if method == "get" {
                rig.get(&full).await
            } else {
                rig.send(m, &full, json!({})).await
            };
            assert_ne!(status, StatusCode::METHOD_NOT_ALLOWED, "{what}");
            if !status.is_success() {
                assert!(
                    body["code"].is_string() && body["message"].is_string(),
                    "{what}: {status} {body}"
                );
                assert!(
                    !body["message"]
                        .as_str()
                        .unwrap()
                        .contains("no such API route"),
                    "{what} fell through to the fallback: {body}"
                );
            }
        }
    }
    // Every route of the console's API is there (the router has these, and
    // the source adds no route beside the description's but the
    // description itself).
    for (m, p) in [
        ("get", "/units"),
        ("post", "/units/{unit}/steer"),
        ("post", "/tasks"),
        ("post", "/tasks/{id}/{verb}"),
        ("put", "/settings"),
        ("get", "/events"),
    ] {
        assert!(paths[p].get(m).is_some(), "{m} {p} missing");
    }
    let src = include_str!("../../../services/console/src/api.rs");
    assert_eq!(
        src.matches(".route(").count(),
        1,
        "only /openapi.json is routed outside the description"
    );
    assert!(ops > 0);
    // A route that is not there falls through, and says where the list is.
    let (s, body) = rig.get("/api/v1/no-such-thing").await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert!(
        body["message"].as_str().unwrap().contains("openapi.json"),
        "{body}"
    );
    rig.stop().await;
}

/// Issue 39: a completed task's diff (kept by the queue from the runner's
/// completion) is served at `/api/v1/tasks/<id>/diff` and shown on its
/// page: where it went, its files with their lines, the patch; a task
/// with none is a 404 that says why.
#[tokio::test]
async fn a_completed_tasks_diff_is_served_and_shown() {
    let rig = Rig::start(&[]).await;
    rig.post("/api/v1/queue/init", json!({})).await;
    rig.post("/api/v1/tasks", json!({"tasks": [task("d1"), task("d2")]}))
        .await;
    rig.post(
        "/api/v1/queue/goal",
        json!({"description": "g", "budget_usd": 0.0, "completed": false}),
    )
    .await;
    rig.post("/api/v1/queue/start", json!({})).await;
    let client = rig.sb.connect("test").await;
    let (id, diff) = complete_one(&client, &rig.cfg, Default::default(), |id| {
        Some(xo_proto::queue::TaskDiff {
            branch: format!("xo/{id}"),
            base: "1111111111aaaa".into(),
            commit: "2222222222bbbb".into(),
            files: vec![xo_proto::queue::FileChange {
                path: "src/<lib>.rs".into(),
                status: "M".into(),
                added: Some(2),
                removed: Some(1),
            }],
            patch: "--- a/src/<lib>.rs\n+++ b/src/<lib>.rs\n@@ -1 +1,2 @@\n-old\n+new\n+more\n"
                .into(),
            truncated: false,
            merged: Some("main 2222222222bbbb".into()),
        })
    })
    .await;
    let diff = diff.unwrap();
    let (st, v) = rig.get(&format!("/api/v1/tasks/{id}/diff")).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let got: xo_proto::queue::TaskDiff = serde_json::from_value(v).unwrap();
    assert_eq!(got, diff);
    let other = if id == "d1" { "d2" } else { "d1" };
    let (st, v) = rig.get(&format!("/api/v1/tasks/{other}/diff")).await;
    assert_eq!(st, StatusCode::NOT_FOUND);
    assert!(v.to_string().contains("has not completed (pending)"), "{v}");
    let page = rig
        .fetch(&format!("/tasks/{id}"), None)
        .await
        .text()
        .await
        .unwrap();
    assert!(page.contains("<h2>Changes</h2>"), "{page}");
    assert!(
        page.contains(&format!("branch <code>xo/{id}</code> · 1 file,")),
        "{page}"
    );
    assert!(page.contains("brought to main 2222222222bbbb"), "{page}");
    assert!(
        page.contains("<code>src/&lt;lib&gt;.rs</code>"),
        "escaped: {page}"
    );
    assert!(page.contains("<span class=\"add\">+more</span>"), "{page}");

    // Linked history (issue 41, item 3): a unit reporting on the task is
    // named on the task's page, with the steering it got, and its fleet
    // row links the task.
    let mut r = SaluteReport::new("linked-unit", "coder", 1, 1);
    r.activity.task_id = Some(id.clone());
    rig.report(&client, &r).await;
    let page = rig
        .fetch(&format!("/tasks/{id}"), None)
        .await
        .text()
        .await
        .unwrap();
    let units = page
        .split("<ul id=\"task-units\">")
        .nth(1)
        .unwrap_or_else(|| panic!("the task's units: {page}"));
    assert!(
        units.starts_with("<li><a href=\"/units/linked-unit\">linked-unit</a>"),
        "{units}"
    );
    assert!(
        units.split("</li>").next().unwrap().contains("steered"),
        "{units}"
    );
    let fleet = rig.fetch("/", None).await.text().await.unwrap();
    assert!(
        fleet.contains(&format!("<a href=\"/tasks/{id}\"><code>{id}</code></a>")),
        "{fleet}"
    );
    rig.stop().await;
}

/// Two named operators' tokens (`console.operators_file`).
const ANA: &str = "ana-token-0123456789abcdef";
const BO: &str = "bo-token-0123456789abcdef";

/// A rig whose console knows ana and bo (the operators file in `dir`,
/// `head` before their lines), with one unit, `op-unit`, reporting.
async fn with_operators(dir: &std::path::Path, head: &str) -> Rig {
    let file = dir.join("operators");
    std::fs::write(&file, format!("{head}ana {ANA}\n\nbo {BO}\n")).unwrap();
    let rig = Rig::start(&[("console.operators_file", file.to_str().unwrap())]).await;
    let client = rig.sb.connect("test").await;
    rig.report(&client, &SaluteReport::new("op-unit", "coder", 1, 1))
        .await;
    rig
}

/// Issue 41, item 4: every queue write is signed on its audit line with
/// the operator the token names; a body's `by` names a client, never
/// another operator.
#[tokio::test]
async fn queue_writes_are_signed_on_their_audit_lines() {
    let dir = tempfile::tempdir().unwrap();
    let rig = with_operators(dir.path(), "").await;
    let (ana, bo) = (ANA, BO);
    let as_ana = |path: &str, body: Value| {
        let req = rig.http.post(rig.u(path)).bearer_auth(ana).json(&body);
        async move {
            let r = req.send().await.unwrap();
            let s = r.status();
            (s, r.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    let (s, v) = as_ana("/api/v1/queue/init", json!({"mode": "MANUAL"})).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    // The body tries to sign as bo: it only names ana's client.
    let (s, v) = as_ana(
        "/api/v1/tasks",
        json!({"tasks": [task("s1"), task("s2")], "by": "bo"}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    // bo, in a browser, cancels s1 (confirmed on the task's page).
    let (cookie, csrf) = browser_login(&rig, bo).await;
    let r = rig
        .http
        .post(rig.u("/ui/tasks/s1/cancel"))
        .header("cookie", cookie)
        .form(&[("csrf", csrf.as_str()), ("confirm", "yes")])
        .send()
        .await
        .unwrap();
    assert!(r.status().is_redirection(), "{}", r.status());
    let (s, lines) = rig.get("/api/v1/audit?lines=100").await;
    assert_eq!(s, StatusCode::OK, "{lines}");
    let by = |event: &str| -> Vec<String> {
        lines
            .as_array()
            .unwrap()
            .iter()
            .filter(|l| l["event"] == event)
            .map(|l| {
                l["state_after"]["by"]
                    .as_str()
                    .unwrap_or("(unsigned)")
                    .to_string()
            })
            .collect()
    };
    assert_eq!(by("INIT"), vec!["ana (api)"], "{lines}");
    let enq = by("ENQUEUE");
    assert!(
        !enq.is_empty() && enq.iter().all(|b| b == "ana (api: bo)"),
        "{enq:?}"
    );
    assert_eq!(by("TASK_CANCELLED"), vec!["bo"], "{lines}");
    // The audit page names them too.
    let page = rig.fetch("/audit", None).await.text().await.unwrap();
    assert!(
        page.contains("<td>bo</td>"),
        "the audit page does not name bo"
    );
    rig.stop().await;
}

/// Issue 41, item 4: named operators, each with a token of their own
/// (`console.operators_file`). A write names who made it: the operator
/// from a browser, `NAME (api: CLIENT)` with a bearer token; each
/// operator's forms carry their own CSRF value; the file's mistakes are
/// named with their line.
#[tokio::test]
async fn named_operators_sign_their_writes() {
    let dir = tempfile::tempdir().unwrap();
    let rig = with_operators(dir.path(), "# who may steer\n").await;
    let file = dir.path().join("operators");
    let (ana, bo) = (ANA, BO);
    // A script with ana's token, naming itself.
    let r = rig
        .http
        .post(rig.u("/api/v1/units/op-unit/ack"))
        .bearer_auth(ana)
        .json(&json!({"why": "looking at it", "by": "ci"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["ack"]["by"], "ana (api: ci)", "{v}");
    // bo in a browser: logs in, and the unit page's form carries bo's
    // CSRF value, not ana's.
    let (cookie, csrf) = browser_login(&rig, bo).await;
    let (_, other) = browser_login(&rig, ana).await;
    let ack = |csrf: String| {
        let cookie = cookie.clone();
        let http = rig.http.clone();
        let url = rig.u("/ui/units/op-unit/ack");
        async move {
            http.post(url)
                .header("cookie", cookie)
                .form(&[
                    ("csrf", csrf.as_str()),
                    ("why", "restarting its runner"),
                    ("for", "30m"),
                ])
                .send()
                .await
                .unwrap()
        }
    };
    // Another operator's CSRF value is not bo's.
    assert_ne!(other, csrf);
    assert_eq!(ack(other).await.status(), StatusCode::FORBIDDEN);
    let r = ack(csrf).await;
    assert!(
        r.status().is_redirection() || r.status().is_success(),
        "{}",
        r.status()
    );
    let (_, v) = rig.get("/api/v1/units/op-unit").await;
    assert_eq!(v["summary"]["ack"]["by"], "bo", "{v}");
    // Issue 41, item 3: operator steering and acknowledgements are audit
    // lines naming the unit and who; the audit page links the unit.
    let r = rig
        .http
        .post(rig.u("/api/v1/units/op-unit/steer"))
        .bearer_auth(ana)
        .json(&json!({"message": "read the failing test first"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let lines = xo_tests::until("the acknowledgements and steering audited", async || {
        let (_, v) = rig.get("/api/v1/audit?lines=100").await;
        let lines = v.as_array().cloned().unwrap_or_default();
        let of = |ev: &str| lines.iter().filter(|l| l["event"] == ev).count();
        (of("UNIT_ACKNOWLEDGED") >= 2 && of("OPERATOR_STEERING") >= 1).then_some(lines)
    })
    .await;
    let said: Vec<(String, String, String)> = lines
        .iter()
        .filter(|l| l["event"] == "UNIT_ACKNOWLEDGED" || l["event"] == "OPERATOR_STEERING")
        .map(|l| {
            let a = &l["state_after"];
            (
                l["event"].as_str().unwrap_or("").to_string(),
                a["unit"].as_str().unwrap_or("").to_string(),
                a["by"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    for want in [
        ("UNIT_ACKNOWLEDGED", "op-unit", "ana (api: ci)"),
        ("UNIT_ACKNOWLEDGED", "op-unit", "bo"),
        ("OPERATOR_STEERING", "op-unit", "ana (api)"),
    ] {
        assert!(
            said.iter()
                .any(|(e, u, b)| (e.as_str(), u.as_str(), b.as_str()) == want),
            "{want:?} not in {said:?}"
        );
    }
    let page = rig.fetch("/audit", None).await.text().await.unwrap();
    assert!(
        page.contains("unit <a href=\"/units/op-unit\"><code>op-unit</code></a>"),
        "the audit page links the unit"
    );
    rig.stop().await;

    // A mistake in the file is named with its line, and the console does
    // not start on it.
    for (text, says) in [
        (
            "ana short\n",
            "line 1: operator ana's token is 5 characters",
        ),
        (
            &format!("ana {ana}\nana {bo}\n") as &str,
            "line 2: operator ana is named twice",
        ),
        (
            &format!("console {ana}\n") as &str,
            "line 1: operator name \"console\"",
        ),
        (
            &format!("ana {ana} extra\n") as &str,
            "line 1: expected `NAME TOKEN`",
        ),
    ] {
        std::fs::write(&file, text).unwrap();
        let mut cfg = XoConfig::default();
        cfg.console.operators_file = file.display().to_string();
        cfg.state.dir = dir.path().join("state");
        let err = xo_console::auth::Auth::load(&cfg, "127.0.0.1:0".parse().unwrap())
            .expect_err(text)
            .to_string();
        assert!(err.contains(says), "{err}");
    }
}

/// A login link lapses ten minutes after it was made by the console's
/// clock, which the test owns: no wait, and no dependence on the host's.
#[tokio::test]
async fn a_login_link_lapses_by_the_console_clock() {
    let clock = Clock::manual(xo_proto::now_ms());
    let rig = Rig::start_with_clock(&[], clock.clone()).await;
    let console = rig.console();
    let path = |link: String| link[link.find("/login").unwrap()..].to_string();
    // Nine minutes on: still good.
    let fresh = path(console.login_url());
    clock.advance(Duration::from_secs(9 * 60));
    let r = rig.http.get(rig.u(&fresh)).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER, "within its ten minutes");
    // Ten minutes on: refused, though the host's clock barely moved.
    let stale = path(console.login_url());
    clock.advance(Duration::from_secs(10 * 60));
    let r = rig.http.get(rig.u(&stale)).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "lapsed");
    assert!(r.headers().get("set-cookie").is_none());
    rig.stop().await;
}
