//! The console in a real headless Chromium (Debian's `chromium` and
//! `chromium-driver`), driven through WebDriver, against `xo up` on the
//! embedded bus and a real runner process: a report sent with `xo report`
//! appears on the fleet page without a reload; steering typed on the unit
//! page is received on `xo.steer.<unit>`; a template edited in Settings is
//! in the next task's prompt log; halt and resume from the queue page; a
//! question answered from the page completes; read-only hides every action.
//! Screenshots go to `target/console-screenshots/`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use xo_tests::launcher::Xo;

use fantoccini::{Client, Locator};
use serde_json::{Value, json};

struct Procs(Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn xo(root: &Path, port: u16, extra_env: &[(&str, &str)]) -> Command {
    let mut c = Xo::new().command(&[]);
    c.current_dir(root)
        .env("XO__STATE__DIR", root.join("state"))
        .env("XO__CONSOLE__LISTEN", format!("127.0.0.1:{port}"))
        .env("XO__RUNNER__CLAIM_WAIT_MS", "300")
        .env("RUST_LOG", "info");
    for (k, v) in extra_env {
        c.env(k, v);
    }
    c
}

fn spawn_logged(mut c: Command, root: &Path, name: &str) -> Child {
    let log = std::fs::File::create(root.join(format!("{name}.log"))).unwrap();
    c.stdout(Stdio::null()).stderr(log).spawn().unwrap()
}

use xo_tests::browser::free_port;

async fn wait_http(url: &str, root: &Path) {
    let up = xo_tests::within(xo_tests::HANG_GUARD, async || reqwest::get(url).await.ok()).await;
    if up.is_some() {
        return;
    }
    let log = std::fs::read_to_string(root.join("up.log")).unwrap_or_default();
    panic!("{url} never answered\n{log}");
}

/// A headless Chromium session (`xo_tests::browser`); its driver is
/// stopped with the test's processes.
async fn browser(procs: &mut Procs) -> Client {
    let (client, driver) = xo_tests::browser::start()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    procs.0.push(driver);
    client
}

struct Up {
    root: tempfile::TempDir,
    url: String,
    token: String,
    http: reqwest::Client,
    procs: Procs,
}

impl Up {
    async fn start(extra_env: &[(&str, &str)]) -> Self {
        let root = tempfile::tempdir().unwrap();
        let port = free_port();
        let mut up = xo(root.path(), port, extra_env);
        up.arg("up");
        let child = spawn_logged(up, root.path(), "up");
        let url = format!("http://127.0.0.1:{port}");
        wait_http(&format!("{url}/assets/console.css"), root.path()).await;
        let token = std::fs::read_to_string(root.path().join("state/console.token"))
            .unwrap()
            .trim()
            .to_string();
        Self {
            url,
            token,
            http: reqwest::Client::new(),
            procs: Procs(vec![child]),
            root,
        }
    }

    fn cli(&self, args: &[&str]) -> Command {
        let port: u16 = self.url.rsplit(':').next().unwrap().parse().unwrap();
        let mut c = xo(self.root.path(), port, &[]);
        c.args(args);
        c
    }

    /// A first green report of `unit` (of `role`), through `xo report`.
    fn report_green(&self, unit: &str, role: &str) {
        self.report(&json!({
            "v": 1,
            "unit": {"unit": unit, "role": role, "pace": "primary"},
            "status": {"health": "green"},
            "time": {"turn": 1, "seq": 1, "at": 1}
        }));
    }

    /// Sends `report` with `xo report FILE`, as a unit's host would.
    fn report(&self, report: &Value) {
        let unit = report["unit"]["unit"].as_str().unwrap_or("unit");
        let seq = &report["time"]["seq"];
        let file = write(self.root.path(), &format!("{unit}-{seq}.json"), report);
        let out = self
            .cli(&["report", file.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    async fn api(&self, method: reqwest::Method, path: &str, body: Value) -> Value {
        let r = self
            .http
            .request(method, format!("{}/api/v1{path}", self.url))
            .bearer_auth(&self.token)
            .json(&body)
            .send()
            .await
            .unwrap();
        let s = r.status();
        let v: Value = r.json().await.unwrap_or(Value::Null);
        assert!(s.is_success(), "{path}: {s} {v}");
        v
    }

    async fn post(&self, path: &str, body: Value) -> Value {
        self.api(reqwest::Method::POST, path, body).await
    }

    async fn task_state(&self, id: &str) -> String {
        let v = self
            .api(reqwest::Method::GET, &format!("/tasks/{id}"), Value::Null)
            .await;
        v["state"].as_str().unwrap_or_default().to_string()
    }

    async fn wait_state(&self, id: &str, state: &str) {
        let reached = xo_tests::within(xo_tests::HANG_GUARD, async || {
            (self.task_state(id).await == state).then_some(())
        })
        .await;
        if reached.is_some() {
            return;
        }
        let log = |n: &str| {
            std::fs::read_to_string(self.root.path().join(format!("{n}.log"))).unwrap_or_default()
        };
        panic!(
            "task {id} never reached {state} (is {})\n--- up\n{}\n--- runner\n{}",
            self.task_state(id).await,
            log("up"),
            log("runner")
        );
    }
}

/// Logs in as a person does: the token typed into the login form (a
/// token in the address would stay in the browser's history).
async fn login(b: &Client, up: &Up) {
    b.goto(&format!("{}/login", up.url)).await.unwrap();
    b.find(Locator::Css("#login input[name=token]"))
        .await
        .unwrap()
        .send_keys(&up.token)
        .await
        .unwrap();
    click(b, "#login button[type=submit]").await;
    // The form's answer sends the browser to the fleet.
    wait_text(b, "body", "Fleet").await;
}

fn shots_dir() -> PathBuf {
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/console-screenshots");
    std::fs::create_dir_all(&d).unwrap();
    d
}

async fn shot(b: &Client, name: &str) {
    let png = b.screenshot().await.unwrap();
    std::fs::write(shots_dir().join(format!("{name}.png")), png).unwrap();
}

async fn text_of(b: &Client, css: &str) -> String {
    b.find(Locator::Css(css))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// Clicks the first element `css` finds. The live rows replace a row
/// between its finding and its click when a batch comes in (the element
/// found is then stale): it is found again, once per replacement seen.
async fn click(b: &Client, css: &str) {
    for _ in 0..50 {
        let found = b
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("{css}: {e}"));
        match found.click().await {
            Ok(()) => return,
            Err(e) if e.is_stale_element_reference() => continue,
            Err(e) => panic!("{css}: {e}"),
        }
    }
    panic!("{css}: replaced 50 times in a row before it could be clicked");
}

/// Waits (bounded; a hang guard) until the page's text contains `what`.
async fn wait_text(b: &Client, css: &str, what: &str) {
    let shown = xo_tests::within(xo_tests::HANG_GUARD, async || {
        let e = b.find(Locator::Css(css)).await.ok()?;
        e.text()
            .await
            .unwrap_or_default()
            .contains(what)
            .then_some(())
    })
    .await;
    if shown.is_some() {
        return;
    }
    let src = b.source().await.unwrap_or_default();
    panic!("{css} never showed {what:?}\n{src}");
}

fn write(root: &Path, name: &str, v: &Value) -> PathBuf {
    let p = root.join(name);
    std::fs::write(&p, serde_json::to_vec(v).unwrap()).unwrap();
    p
}

#[tokio::test]
async fn the_fleet_page_updates_live_and_steering_reaches_the_unit() {
    let mut up = Up::start(&[]).await;
    let b = browser(&mut up.procs).await;
    login(&b, &up).await;
    b.goto(&format!("{}/", up.url)).await.unwrap();
    wait_text(&b, "main", "No units match").await;
    // The live feed is connected before the report goes out.
    wait_text(&b, "#live", "live").await;
    b.execute("window.__stayed = 'same page';", vec![])
        .await
        .unwrap();

    let report = json!({
        "v": 1,
        "unit": {"unit": "web-1", "role": "coder", "pace": "primary"},
        "status": {"health": "green"},
        "activity": {"step": "writing tests", "turns_since_progress": 2},
        "size": {"context_tokens": 50000, "context_limit": 100000},
        "equipment": {"cost_usd": 0.42},
        "time": {"turn": 4, "seq": 1, "at": 1}
    });
    up.report(&report);
    b.wait()
        .for_element(Locator::Id("unit-web-1"))
        .await
        .expect("the unit's row appears");
    let stayed = b.execute("return window.__stayed;", vec![]).await.unwrap();
    assert_eq!(stayed, json!("same page"), "no reload");
    wait_text(&b, "#unit-web-1", "50%").await;
    let row = text_of(&b, "#unit-web-1").await;
    assert!(
        row.contains("coder") && row.contains("$0.4200") && row.contains("primary"),
        "{row}"
    );
    wait_text(&b, "#count-green", "1").await;
    shot(&b, "fleet").await;
    // White on every health colour passes WCAG AA (4.5:1).
    let ratios = b
        .execute(
            r#"const lum = (c) => { const v = c.match(/\d+/g).slice(0, 3).map(Number).map(x => { x /= 255; return x <= 0.03928 ? x / 12.92 : Math.pow((x + 0.055) / 1.055, 2.4); }); return 0.2126 * v[0] + 0.7152 * v[1] + 0.0722 * v[2]; };
               return ['green', 'amber', 'red'].map(h => { const e = document.createElement('span'); e.className = 'health ' + h; document.body.appendChild(e); const s = getComputedStyle(e); const r = (lum(s.color) + 0.05) / (lum(s.backgroundColor) + 0.05); e.remove(); return r; });"#,
            vec![],
        )
        .await
        .unwrap();
    for r in ratios.as_array().unwrap() {
        assert!(r.as_f64().unwrap() >= 4.5, "contrast {ratios}");
    }
    // The keyboard's first stop skips to the content.
    b.goto(&format!("{}/", up.url)).await.unwrap();
    b.find(Locator::Css("body"))
        .await
        .unwrap()
        .send_keys(&fantoccini::key::Key::Tab.to_string())
        .await
        .unwrap();
    let first = b
        .execute("return document.activeElement.className;", vec![])
        .await
        .unwrap();
    assert_eq!(first, json!("skip"));
    b.active_element()
        .await
        .unwrap()
        .send_keys(&fantoccini::key::Key::Enter.to_string())
        .await
        .unwrap();
    let at = b
        .execute("return document.activeElement.id;", vec![])
        .await
        .unwrap();
    assert_eq!(at, json!("main"));
    wait_text(&b, "#unit-web-1", "50%").await;
    // On a phone: the header on one row, the fleet as cards (unit, health,
    // task shown; the columns that do not fit hidden), nothing wider than
    // the screen.
    b.set_window_size(390, 844).await.unwrap();
    let phone = b
        .execute(
            "const r = document.getElementById('unit-web-1'); const shown = (sel) => { const e = r.querySelector(sel); return !!e && e.offsetWidth > 0; };
             return [document.querySelector('header').offsetHeight, document.documentElement.scrollWidth <= window.innerWidth, shown('td:nth-child(1)'), shown('td:nth-child(3)'), shown('td.task'), shown('td.cost'), document.querySelector('#units thead').offsetHeight];",
            vec![],
        )
        .await
        .unwrap();
    let p = phone.as_array().unwrap();
    assert!(p[0].as_f64().unwrap() < 60.0, "header on one row: {phone}");
    assert_eq!(
        &p[1..],
        &[
            json!(true),
            json!(true),
            json!(true),
            json!(true),
            json!(false),
            json!(0)
        ],
        "{phone}"
    );
    shot(&b, "fleet-phone").await;
    b.set_window_size(1280, 800).await.unwrap();

    // Steering typed on the unit page arrives on xo.steer.web-1.
    let mut tap = up
        .cli(&["tap", "xo.steer.web-1", "--json", "--count", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // `xo tap` says "tapping …" once its subscription is in place; the rest
    // of its stderr is drained so that it never writes to a closed pipe.
    let (tapping, listening) = std::sync::mpsc::channel();
    let tap_err = tap.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(tap_err).lines().map_while(Result::ok) {
            if line.starts_with("tapping ") {
                let _ = tapping.send(line);
            }
        }
    });
    click(&b, "#unit-web-1 a").await;
    wait_text(&b, "h1", "Unit web-1").await;
    wait_text(&b, "#latest-report", "writing tests").await;
    // The latest report follows the unit live, its actions listed.
    let report = json!({
        "v": 1,
        "unit": {"unit": "web-1", "role": "coder", "pace": "primary"},
        "status": {"health": "green"},
        "activity": {"step": "running the tests", "turns_since_progress": 0,
            "recent": [{"kind": "tool", "tool": "cargo_test", "outcome": "error", "error_type": "test_failure", "turn": 8}]},
        "size": {"context_tokens": 60000, "context_limit": 100000},
        "equipment": {"cost_usd": 0.5},
        "time": {"turn": 8, "seq": 2, "at": 2}
    });
    up.report(&report);
    wait_text(&b, "#latest-report", "running the tests").await;
    wait_text(&b, "#recent-actions", "cargo_test").await;
    assert!(
        text_of(&b, "#recent-actions")
            .await
            .contains("test_failure")
    );
    // Two reports: the charts of its last reports, drawn on reload.
    b.refresh().await.unwrap();
    wait_text(&b, "#history", "context fill: 60%").await;
    let charts = b
        .find_all(Locator::Css("#history figure.chart svg polyline"))
        .await
        .unwrap();
    assert_eq!(
        charts.len(),
        3,
        "context fill, cost, turns without progress"
    );
    assert!(text_of(&b, "#history").await.contains("cost: $0.5000"));
    // `xo tap` listens before the steering is sent.
    let said = listening
        .recv_timeout(xo_tests::HANG_GUARD)
        .expect("xo tap said it listens");
    assert!(said.contains("xo.steer.web-1"), "{said}");
    let area = b.find(Locator::Css("#steer-form textarea")).await.unwrap();
    area.send_keys("Stop rewriting the tests; run them first.")
        .await
        .unwrap();
    click(&b, "#steer-form button").await;
    wait_text(
        &b,
        ".flash.ok",
        "warning steering sent to web-1 at its turn 8",
    )
    .await;
    assert!(
        !text_of(&b, ".flash.ok").await.contains("operator-"),
        "no raw id"
    );
    let mut line = String::new();
    BufReader::new(tap.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let _ = tap.wait();
    assert!(line.contains("Stop rewriting the tests"), "{line}");
    wait_text(&b, "#timeline", "Stop rewriting the tests").await;
    // Issue 41, item 1: what followed a steering is said, and changes
    // live as the unit reports (the server's words, as `xo units UNIT`).
    wait_text(&b, "#timeline", "then: too soon to say").await;
    b.execute("window.__stayed = 'same page';", vec![])
        .await
        .unwrap();
    let report = json!({
        "v": 1,
        "unit": {"unit": "web-1", "role": "coder", "pace": "primary"},
        "status": {"health": "green"},
        "activity": {"step": "tests pass", "turns_since_progress": 1},
        "size": {"context_tokens": 61000, "context_limit": 100000},
        "equipment": {"cost_usd": 0.55},
        "time": {"turn": 10, "seq": 3, "at": 3}
    });
    up.report(&report);
    wait_text(&b, "#timeline", "then: progress within 1 turn").await;
    wait_text(&b, "#latest-report", "tests pass").await;
    let stayed = b.execute("return window.__stayed;", vec![]).await.unwrap();
    assert_eq!(stayed, json!("same page"), "no reload");
    shot(&b, "unit").await;

    // The login ends (the cookie is gone) while a steering is being typed:
    // sending it lands on the login page, which keeps the text and sends
    // nothing; logging in goes back to the unit's page, the text in place.
    let area = b.find(Locator::Css("#steer-form textarea")).await.unwrap();
    area.send_keys("KEPT-STEER: read the failing test's output first.")
        .await
        .unwrap();
    b.find(Locator::Css(
        "#steer-form select[name='severity'] option:nth-child(3)",
    ))
    .await
    .unwrap()
    .click()
    .await
    .unwrap();
    b.delete_cookie("xo_console").await.unwrap();
    click(&b, "#steer-form button").await;
    wait_text(&b, "#kept", "KEPT-STEER").await;
    wait_text(&b, ".flash.error", "that was not done").await;
    let token = b
        .find(Locator::Css("#login input[name='token']"))
        .await
        .unwrap();
    token.send_keys(&up.token).await.unwrap();
    click(&b, "#login button").await;
    wait_text(&b, "h1", "Unit web-1").await;
    wait_text(&b, "#kept-note", "has not been sent").await;
    let form = b
        .execute(
            "return [document.querySelector('#steer-form textarea').value, document.querySelector('#steer-form select').value];",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(
        form,
        json!([
            "KEPT-STEER: read the failing test's output first.",
            "urgent"
        ])
    );
    let detail = up
        .api(reqwest::Method::GET, "/units/web-1", Value::Null)
        .await;
    assert!(
        !detail.to_string().contains("KEPT-STEER"),
        "nothing was sent while logged out: {detail}"
    );
    b.close().await.unwrap();
}

/// Triage on the fleet page: units arriving live take their place by
/// severity (red, the XO's or their own, first); a count badge filters; the
/// search ignores case; a header sorts.
#[tokio::test]
async fn the_fleet_page_puts_red_first_live_and_filters_and_sorts() {
    let mut up = Up::start(&[]).await;
    let b = browser(&mut up.procs).await;
    login(&b, &up).await;
    b.goto(&format!("{}/", up.url)).await.unwrap();
    wait_text(&b, "#live", "live").await;
    let send_as = |unit: &str, health: &str, cost: f64, tsp: u32, ended: bool| {
        let report = json!({
            "v": 1,
            "unit": {"unit": unit, "role": "coder", "pace": "primary"},
            "status": {"health": health, "note": "cannot reach the registry", "ended": ended},
            "activity": {"step": "working", "turns_since_progress": tsp},
            "size": {"context_tokens": 10000, "context_limit": 100000},
            "equipment": {"cost_usd": cost},
            "time": {"turn": 1, "seq": 1, "at": 1}
        });
        up.report(&report);
    };
    let send = |unit: &str, health: &str, cost: f64| send_as(unit, health, cost, 1, false);
    // Green first, red last: the page still shows red on top.
    send("calm-1", "green", 0.3);
    b.wait()
        .for_element(Locator::Id("unit-calm-1"))
        .await
        .unwrap();
    send("warm-3", "amber", 0.1);
    b.wait()
        .for_element(Locator::Id("unit-warm-3"))
        .await
        .unwrap();
    send("Hot-2", "red", 0.2);
    b.wait()
        .for_element(Locator::Id("unit-Hot-2"))
        .await
        .unwrap();
    let order = || {
        let b = b.clone();
        async move {
            b.execute(
                "return Array.from(document.querySelectorAll('#units tbody tr')).map(r => r.dataset.unit);",
                vec![],
            )
            .await
            .unwrap()
        }
    };
    assert_eq!(
        order().await,
        json!(["Hot-2", "warm-3", "calm-1"]),
        "live rows in triage order"
    );
    wait_text(&b, "#count-red", "1 red").await;
    let hot = text_of(&b, "#unit-Hot-2").await;
    assert!(
        hot.contains("self: red") && hot.contains("cannot reach the registry"),
        "{hot}"
    );
    shot(&b, "fleet-triage").await;
    // The server's order after a reload is the same.
    b.refresh().await.unwrap();
    assert_eq!(order().await, json!(["Hot-2", "warm-3", "calm-1"]));
    // A badge filters.
    click(&b, "#count-red").await;
    wait_text(&b, "#count-red", "red").await;
    assert_eq!(order().await, json!(["Hot-2"]));
    // The search ignores case.
    b.goto(&format!("{}/?q=HOT", up.url)).await.unwrap();
    assert_eq!(order().await, json!(["Hot-2"]));
    // A header sorts by its column; again, the other way.
    b.goto(&format!("{}/", up.url)).await.unwrap();
    click(&b, "th a[data-sort='cost']").await;
    wait_text(&b, "th[aria-sort='ascending'] a[data-sort='cost']", "").await;
    assert_eq!(order().await, json!(["warm-3", "Hot-2", "calm-1"]));
    click(&b, "th a[data-sort='cost']").await;
    wait_text(&b, "th[aria-sort='descending'] a[data-sort='cost']", "").await;
    assert_eq!(order().await, json!(["calm-1", "Hot-2", "warm-3"]));
    // Live, in triage order: a red unit 280 turns without progress goes
    // above the red one of 1; a unit whose task ended red is idle, last.
    b.goto(&format!("{}/", up.url)).await.unwrap();
    wait_text(&b, "#live", "live").await;
    send_as("Looping-4", "red", 0.4, 280, false);
    send_as("Done-5", "red", 0.5, 0, true);
    b.wait()
        .for_element(Locator::Id("unit-Done-5"))
        .await
        .unwrap();
    b.wait()
        .for_element(Locator::Id("unit-Looping-4"))
        .await
        .unwrap();
    wait_text(&b, "#count-idle", "1 idle").await;
    wait_text(&b, "#count-red", "2 red").await;
    assert_eq!(
        order().await,
        json!(["Looping-4", "Hot-2", "warm-3", "calm-1", "Done-5"])
    );
    assert!(text_of(&b, "#unit-Done-5").await.contains("idle"));
    b.refresh().await.unwrap();
    assert_eq!(
        order().await,
        json!(["Looping-4", "Hot-2", "warm-3", "calm-1", "Done-5"]),
        "the server's order is the same"
    );
    // Issue 41, item 2: a page of rows at a time. A red unit arriving live
    // comes in on page 1, which keeps its length; page 2 does not take a
    // row that belongs on page 1.
    b.goto(&format!("{}/?per=3", up.url)).await.unwrap();
    wait_text(&b, "#live", "live").await;
    assert_eq!(order().await, json!(["Looping-4", "Hot-2", "warm-3"]));
    wait_text(&b, "#pages", "rows 1–3 of 5").await;
    send_as("Fire-7", "red", 0.1, 500, false);
    b.wait()
        .for_element(Locator::Id("unit-Fire-7"))
        .await
        .unwrap();
    assert_eq!(order().await, json!(["Fire-7", "Looping-4", "Hot-2"]));
    wait_text(&b, "#unit-count", "6").await;
    shot(&b, "fleet-pages").await;
    // The live rows came in the stream's `rows` batches: the tab asked the
    // server for nothing per report (only the header's "Needs you" count,
    // on its own timer).
    let asked = b
        .execute(
            "return performance.getEntriesByType('resource').map(e => new URL(e.name).pathname).filter(p => !p.startsWith('/assets/') && p !== '/api/v1/needs' && p !== '/api/v1/events');",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(asked, json!([]), "requests the fleet tab made");
    b.goto(&format!("{}/?per=3&page=2", up.url)).await.unwrap();
    wait_text(&b, "#live", "live").await;
    assert_eq!(order().await, json!(["warm-3", "calm-1", "Done-5"]));
    send_as("Fire-8", "red", 0.1, 0, false);
    // The batch that counted it has come: its row was not placed here.
    wait_text(&b, "#count-red", "4 red").await;
    assert_eq!(order().await, json!(["warm-3", "calm-1", "Done-5"]));
    // A long note without a space wraps inside its cell instead of
    // pushing the columns off the table.
    let long = "x".repeat(3000);
    let report = json!({
        "v": 1,
        "unit": {"unit": "Long-9", "role": "coder", "pace": "primary"},
        "status": {"health": "red", "note": long},
        "activity": {"step": "working", "turns_since_progress": 1},
        "time": {"turn": 1, "seq": 1, "at": 1}
    });
    up.report(&report);
    b.goto(&format!("{}/", up.url)).await.unwrap();
    b.wait()
        .for_element(Locator::Id("unit-Long-9"))
        .await
        .unwrap();
    let fits = b
        .execute(
            "const t = document.getElementById('units'); const n = document.querySelector('#unit-Long-9 .note'); return [t.scrollWidth <= t.parentElement.clientWidth + 1, n.getBoundingClientRect().width < window.innerWidth];",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(fits, json!([true, true]), "the long note wraps");
    shot(&b, "fleet-long-note").await;
    // A role seen in the fleet (not in xo.toml) can be tuned in Settings,
    // its thresholds filled with the default profile's values.
    up.report_green("ops-1", "devops");
    b.wait()
        .for_element(Locator::Id("unit-ops-1"))
        .await
        .unwrap();
    b.goto(&format!("{}/settings", up.url)).await.unwrap();
    // (inside a closed <details>: present, not shown)
    wait_text(
        &b,
        "[data-setting='roles.devops.doctrine.loop_error_repeats']",
        "",
    )
    .await;
    let v = b
        .find(Locator::Css(
            "[data-setting='roles.devops.doctrine.loop_error_repeats'] input",
        ))
        .await
        .unwrap()
        .attr("value")
        .await
        .unwrap();
    assert!(
        v.is_some_and(|v| !v.is_empty()),
        "filled with the default profile's value"
    );
    b.close().await.unwrap();
}

fn scripted(id: &str, runs: &str) -> Value {
    json!({
        "task_id": id,
        "intent": format!("task {id}"),
        "instructions": format!("```xo-script\nturn_ms = 5\n{runs}\n```"),
        "role": "coder"
    })
}

/// Every file under `dir` whose text contains `what`.
fn files_containing(dir: &Path, what: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if std::fs::read(&p).is_ok_and(|b| String::from_utf8_lossy(&b).contains(what)) {
                out.push(p);
            }
        }
    }
    out
}

#[tokio::test]
async fn settings_queue_actions_and_answers_from_the_pages() {
    let mut up = Up::start(&[]).await;
    let runner = spawn_logged(
        up.cli(&[
            "serve", "runner", "--script", "inline", "--role", "coder", "--unit", "r-1",
        ]),
        up.root.path(),
        "runner",
    );
    up.procs.0.push(runner);
    // MANUAL mode: a task runs when stepped; `hold` is never stepped, so
    // the queue does not run out of work and halt between the steps.
    let ok = "[[run]]\nsteps = [{ reply = '{\"status\": \"ok\", \"message\": \"done\"}' }]";
    // s1 changes the project: its page shows the diff on its branch.
    let writes = "[[run]]\nsteps = [{ write = \"greeting.txt\", content = \"hello from s1\" }, { reply = '{\"status\": \"ok\", \"message\": \"done\"}' }]";
    let ask = "[[run]]\nattempt = 1\nsteps = [{ reply = '{\"status\": \"ok\", \"message\": \"Which port should the server use?\"}' }]\n[[run]]\nattempt = 2\nsteps = [{ reply = '{\"status\": \"ok\", \"message\": \"served on the port given\"}' }]";
    // The first reply in the wrong format: a retry event in its work log.
    let fmt = "[[run]]\nsteps = [{ reply = 'All done.' }]\n[[run]]\nsteps = [{ reply = '{\"status\": \"ok\", \"message\": \"done\"}' }]";
    up.post("/queue/init", json!({"mode": "MANUAL"})).await;
    up.post("/queue/goal", json!({"description": "console e2e"}))
        .await;
    up.post(
        "/tasks",
        json!({"tasks": [scripted("s1", writes), scripted("q1", ask), scripted("fmt", fmt), scripted("hold", ok)]}),
    )
    .await;
    up.post("/queue/start", json!({})).await;
    let b = browser(&mut up.procs).await;
    login(&b, &up).await;

    // Settings: a Save with several wrong fields names every one beside
    // its field, keeps every edit (the good one too) and saves nothing.
    b.goto(&format!("{}/settings", up.url)).await.unwrap();
    for (css, typed) in [
        ("input[name='set:runner.max_retries']", "999"),
        ("input[name='set:review.model.base_url']", "not a url"),
        ("input[name='set:runner.timeouts.long_ms']", "soon"),
        (
            "textarea[data-key='runner.global_template']",
            "KEPT-EDIT-3: small steps.",
        ),
    ] {
        let e = b.find(Locator::Css(css)).await.unwrap();
        e.clear().await.unwrap();
        e.send_keys(typed).await.unwrap();
    }
    click(&b, "#save").await;
    wait_text(&b, "#check", "3 things to fix; nothing was saved").await;
    let errors = text_of(&b, "#errors").await;
    for key in [
        "runner.max_retries",
        "review.model.base_url",
        "runner.timeouts.long_ms",
    ] {
        assert!(errors.contains(key), "{key} not named: {errors}");
    }
    let kept = b
        .execute(
            "return ['runner.max_retries','review.model.base_url','runner.timeouts.long_ms'].map(k => document.querySelector(`[name='set:${k}']`).value).concat([document.querySelector(\"textarea[data-key='runner.global_template']\").value, document.querySelectorAll('.setting.invalid .field-error').length]);",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(
        kept,
        json!(["999", "not a url", "soon", "KEPT-EDIT-3: small steps.", 3]),
        "every edit kept, each error beside its field"
    );
    shot(&b, "settings-errors").await;
    let now = up.api(reqwest::Method::GET, "/settings", Value::Null).await;
    assert_eq!(now["settings"]["version"], 0, "nothing saved: {now}");

    // A bad output template is refused by the check; a global template is
    // previewed, then saved.
    b.goto(&format!("{}/settings", up.url)).await.unwrap();
    let out = b
        .find(Locator::Css("textarea[data-key='runner.output_template']"))
        .await
        .unwrap();
    out.send_keys("{stauts}: {message}").await.unwrap();
    click(&b, "#preview").await;
    wait_text(&b, "#check", "unknown placeholder {stauts}").await;
    let out = b
        .find(Locator::Css("textarea[data-key='runner.output_template']"))
        .await
        .unwrap();
    out.clear().await.unwrap();
    let global = b
        .find(Locator::Css("textarea[data-key='runner.global_template']"))
        .await
        .unwrap();
    global
        .send_keys("GLOBAL-MARKER-7: keep changes small.")
        .await
        .unwrap();
    click(&b, "#preview").await;
    wait_text(&b, "#preview-text", "GLOBAL-MARKER-7").await;
    shot(&b, "settings-preview").await;
    click(&b, "#save").await;
    wait_text(&b, ".flash.ok", "saved settings version 1").await;
    wait_text(&b, "[data-setting='runner.global_template']", "settings v1").await;
    shot(&b, "settings").await;

    // The next task's prompt carries the template (the runner read no file).
    up.post("/queue/step", json!({})).await;
    up.wait_state("s1", "completed").await;
    let found = files_containing(&up.root.path().join("state"), "GLOBAL-MARKER-7");
    assert!(
        found.iter().any(|p| p.to_string_lossy().contains("prompt")),
        "the prompt log has the template: {found:?}"
    );
    // Its page shows what it changed on its branch: the files, the lines
    // added and removed, the patch, and where the work went.
    b.goto(&format!("{}/tasks/s1", up.url)).await.unwrap();
    wait_text(&b, "#diff-summary", "branch xo/s1").await;
    assert!(text_of(&b, "#diff-summary").await.contains("1 file, +1 −0"));
    wait_text(&b, "#diff-files", "greeting.txt").await;
    wait_text(&b, "#diff-patch", "+hello from s1").await;
    b.execute(
        "document.getElementById('diff-summary').previousElementSibling.scrollIntoView();",
        vec![],
    )
    .await
    .unwrap();
    shot(&b, "task-diff").await;

    // Halt and resume from the queue page.
    b.goto(&format!("{}/queue", up.url)).await.unwrap();
    wait_text(&b, "#queue-status", "RUNNING").await;
    b.find(Locator::Css(
        "form[action='/ui/queue/halt'] input[name='reason']",
    ))
    .await
    .unwrap()
    .send_keys("lunch")
    .await
    .unwrap();
    click(&b, "form[action='/ui/queue/halt'] button").await;
    wait_text(&b, "#queue-status", "HALTED").await;
    wait_text(&b, ".status", "lunch").await;
    click(&b, "form[action='/ui/queue/resume'] button").await;
    wait_text(&b, "#queue-status", "RUNNING").await;

    // A question the agent asks (MANUAL mode) is answered from the page; the
    // task then completes.
    up.post("/queue/step", json!({})).await;
    up.wait_state("q1", "awaiting_response").await;
    b.goto(&format!("{}/queue", up.url)).await.unwrap();
    wait_text(&b, "#tasks-awaiting_response", "Which port").await;
    shot(&b, "queue").await;
    let answer = b
        .find(Locator::Css("#task-q1 input[name='text']"))
        .await
        .unwrap();
    answer.send_keys("8080").await.unwrap();
    click(&b, "#task-q1 form[action='/ui/tasks/q1/answer'] button").await;
    wait_text(&b, ".flash.ok", "answer").await;
    up.post("/queue/step", json!({})).await;
    up.wait_state("q1", "completed").await;

    // A task's page links its prompt log (every prompt and reply, the saved
    // template in the prompt) and its work log (the format retry's event).
    up.post("/queue/step", json!({})).await;
    up.wait_state("fmt", "completed").await;
    b.goto(&format!("{}/tasks/s1", up.url)).await.unwrap();
    click(&b, "#prompt-log-link").await;
    wait_text(&b, "#prompt-log", "GLOBAL-MARKER-7").await;
    let kinds = b
        .execute(
            "return Array.from(document.querySelectorAll('#prompt-log h3')).map(h => h.firstChild.textContent.trim());",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(kinds, json!(["PROMPT", "RESPONSE"]), "s1's lines only");
    b.goto(&format!("{}/tasks/fmt", up.url)).await.unwrap();
    click(&b, "#work-log-link").await;
    wait_text(&b, "#worklog", "Retry Event").await;
    assert!(
        text_of(&b, "#worklog")
            .await
            .contains("Invalid output format")
    );
    assert!(text_of(&b, "#worklog").await.contains("Result"));
    // A task that has not run says where its work log will be.
    b.goto(&format!("{}/tasks/hold/worklog", up.url))
        .await
        .unwrap();
    wait_text(&b, "#no-log", "hold.md").await;

    // The Charts page, from what XO keeps: the three completed tasks per
    // interval and by duration, the goal's spend, and an operator's
    // steering in this minute's bar.
    up.post(
        "/units/r-1/steer",
        json!({"message": "check the logs", "severity": "info"}),
    )
    .await;
    b.goto(&format!("{}/charts", up.url)).await.unwrap();
    let sums = b
        .execute(
            "const sum = id => Array.from(document.querySelectorAll(`#${id} rect.bar`)).reduce((a, r) => a + Number(r.dataset.value), 0);\n\
             return [sum('chart-throughput'), sum('chart-duration'), sum('chart-steering'), Array.from(document.querySelectorAll('#chart-steering rect.bar')).map(r => r.dataset.series), document.querySelectorAll('#chart-spend path.spend').length];",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(sums, json!([3, 3, 1, ["operator"], 1]), "{sums}");
    assert!(text_of(&b, "#chart-duration").await.contains("3 tasks"));
    // Marked where they happened: the settings change made above (on the
    // throughput and steering charts) and the operator's steering (on the
    // throughput chart, in this minute's slot).
    let marks = b
        .execute(
            "const n = css => document.querySelectorAll(css).length;\n\
             return [n('#chart-throughput line.mark.settings'), n('#chart-steering line.mark.settings'), n('#chart-throughput line.mark.steering'), (document.querySelector('#chart-throughput line.mark.settings title') || {}).textContent || ''];",
            vec![],
        )
        .await
        .unwrap();
    let (settings, on_steering, steering, said) = (
        marks[0].as_u64().unwrap_or(0),
        marks[1].as_u64().unwrap_or(0),
        marks[2].as_u64().unwrap_or(0),
        marks[3].as_str().unwrap_or(""),
    );
    assert!(
        settings >= 1 && on_steering >= 1 && steering >= 1,
        "{marks}"
    );
    assert!(
        said.contains("settings version") && said.contains(" by "),
        "{said}"
    );
    shot(&b, "charts").await;

    // The audit page verifies the chain, SETTINGS_CHANGED among its lines.
    b.goto(&format!("{}/audit?lines=500", up.url))
        .await
        .unwrap();
    wait_text(&b, "#audit", "SETTINGS_CHANGED").await;
    click(&b, "#verify").await;
    wait_text(&b, "#verdict", "Chain intact").await;
    shot(&b, "audit").await;
    // Filtered by event (any case): only those lines, each saying what it
    // changed and who changed it.
    b.goto(&format!(
        "{}/audit?lines=500&event=settings_changed",
        up.url
    ))
    .await
    .unwrap();
    let rows = b
        .execute(
            "return Array.from(document.querySelectorAll('#audit tbody tr')).map(r => r.cells[2].innerText);",
            vec![],
        )
        .await
        .unwrap();
    let rows = rows.as_array().unwrap();
    assert!(
        !rows.is_empty() && rows.iter().all(|r| r == "SETTINGS_CHANGED"),
        "{rows:?}"
    );
    let text = text_of(&b, "#audit").await;
    assert!(
        text.contains("version") && text.contains("→") && text.contains("console"),
        "{text}"
    );
    b.close().await.unwrap();
}

/// Seed 004 (every setting modifiable from the web): a fresh fabric is set
/// up from the Queue page alone: initialise, set the goal, enqueue a task;
/// a bad field is refused with its name and nothing is added.
#[tokio::test]
async fn the_queue_is_set_up_from_the_page() {
    let mut up = Up::start(&[]).await;
    let b = browser(&mut up.procs).await;
    login(&b, &up).await;
    b.goto(&format!("{}/queue", up.url)).await.unwrap();
    // Nothing set up: the set-up forms are open.
    let open = b
        .find(Locator::Id("setup"))
        .await
        .unwrap()
        .attr("open")
        .await
        .unwrap();
    assert!(open.is_some(), "open on a fresh queue");
    let fill = |css: &'static str, text: &'static str| {
        let b = b.clone();
        async move {
            let e = b.find(Locator::Css(css)).await.unwrap();
            e.clear().await.unwrap();
            e.send_keys(text).await.unwrap();
        }
    };
    let submit = |to: &'static str| {
        let b = b.clone();
        async move {
            click(&b, &format!("form[action='{to}'] button")).await;
        }
    };
    click(
        &b,
        "form[action='/ui/queue/init'] select[name='mode'] option:nth-child(2)",
    )
    .await;
    click(&b, "form[action='/ui/queue/init'] input[name='force']").await;
    submit("/ui/queue/init").await;
    // "Start over" asks first, saying what it drops (here: nothing yet).
    wait_text(&b, "#confirm", "Start over?").await;
    assert!(
        text_of(&b, "#confirm")
            .await
            .contains("drops no goal and no task"),
        "{}",
        text_of(&b, "#confirm").await
    );
    click(&b, "#confirm button").await;
    wait_text(&b, ".flash.ok", "initialised").await;
    assert!(text_of(&b, ".flash.ok").await.contains("MANUAL"));

    fill(
        "form[action='/ui/queue/goal'] input[name='description']",
        "a greeting file",
    )
    .await;
    fill("form[action='/ui/queue/goal'] input[name='project']", "web").await;
    fill(
        "form[action='/ui/queue/goal'] input[name='budget_usd']",
        "2.5",
    )
    .await;
    submit("/ui/queue/goal").await;
    wait_text(&b, ".flash.ok", "goal set").await;
    wait_text(&b, ".status", "a greeting file").await;
    assert!(
        text_of(&b, ".status")
            .await
            .contains("spent $0.00 of $2.50 (0%)")
    );
    // Only what the state allows: halted and never started, in MANUAL
    // mode: start and step; no halt, no resume.
    let has = |to: &'static str| {
        let b = b.clone();
        async move {
            !b.find_all(Locator::Css(&format!("form[action='{to}']")))
                .await
                .unwrap()
                .is_empty()
        }
    };
    assert!(has("/ui/queue/start").await && has("/ui/queue/step").await);
    assert!(!has("/ui/queue/halt").await && !has("/ui/queue/resume").await);
    // The settings page edits the goal's project first.
    b.goto(&format!("{}/settings", up.url)).await.unwrap();
    let project = b
        .find(Locator::Css("#settings-form input[name='project']"))
        .await
        .unwrap()
        .attr("value")
        .await
        .unwrap();
    assert_eq!(project.as_deref(), Some("web"));
    b.goto(&format!("{}/queue", up.url)).await.unwrap();

    // A task id with a space is refused, naming the field; nothing is added.
    fill(
        "form[action='/ui/queue/enqueue'] input[name='task_id']",
        "bad id",
    )
    .await;
    fill(
        "form[action='/ui/queue/enqueue'] input[name='intent']",
        "greet",
    )
    .await;
    fill(
        "form[action='/ui/queue/enqueue'] textarea[name='instructions']",
        "write hello.txt",
    )
    .await;
    click(
        &b,
        "form[action='/ui/queue/enqueue'] select[name='lane'] option:nth-child(4)",
    )
    .await;
    submit("/ui/queue/enqueue").await;
    wait_text(&b, ".flash.error", "task id").await;
    // What was typed is back in the form, nothing enqueued.
    wait_text(&b, "#enqueue-kept", "nothing was enqueued").await;
    let kept = b
        .execute(
            "const f = document.querySelector(\"form[action='/ui/queue/enqueue']\"); return ['task_id','intent','instructions','lane'].map(n => f.elements[n].value);",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(
        kept,
        json!(["bad id", "greet", "write hello.txt", "critical"]),
        "every field as typed"
    );
    click(
        &b,
        "form[action='/ui/queue/enqueue'] select[name='lane'] option:nth-child(2)",
    )
    .await;

    fill(
        "form[action='/ui/queue/enqueue'] input[name='task_id']",
        "web1",
    )
    .await;
    fill(
        "form[action='/ui/queue/enqueue'] input[name='intent']",
        "greet",
    )
    .await;
    fill(
        "form[action='/ui/queue/enqueue'] textarea[name='instructions']",
        "write hello.txt",
    )
    .await;
    fill(
        "form[action='/ui/queue/enqueue'] textarea[name='criteria']",
        "file exists: hello.txt\nfile contains: hello.txt :: hi",
    )
    .await;
    click(
        &b,
        "form[action='/ui/queue/enqueue'] select[name='timeout_profile'] option:nth-child(2)",
    )
    .await;
    submit("/ui/queue/enqueue").await;
    wait_text(&b, ".flash.ok", "enqueued web1").await;
    wait_text(&b, "#tasks-pending", "web1").await;
    shot(&b, "queue-setup").await;

    let status = up.api(reqwest::Method::GET, "/queue", Value::Null).await;
    assert_eq!(status["mode"], "MANUAL");
    assert_eq!(status["goal"]["description"], "a greeting file");
    assert_eq!(status["goal"]["project_id"], "web");
    assert_eq!(status["goal"]["budget_usd"], 2.5);
    let t = up
        .api(reqwest::Method::GET, "/tasks/web1", Value::Null)
        .await;
    assert_eq!(t["task"]["role"], "coder");
    assert_eq!(t["task"]["timeout_profile"], "long");
    assert_eq!(
        t["task"]["acceptance_criteria"],
        json!(["file exists: hello.txt", "file contains: hello.txt :: hi"])
    );
    let all = up.api(reqwest::Method::GET, "/tasks", Value::Null).await;
    assert_eq!(
        all.as_array().unwrap().len(),
        1,
        "the refused one was not added: {all}"
    );

    // Its id opens the task's page: what it is, its history; a cancel asks
    // first, and only the confirmation cancels it.
    click(&b, "#task-web1 a[href='/tasks/web1']").await;
    wait_text(&b, "h1", "Task web1").await;
    wait_text(&b, "#task", "greet").await;
    assert!(text_of(&b, "#task-state").await.contains("pending"));
    assert!(
        text_of(&b, "main")
            .await
            .contains("file contains: hello.txt :: hi")
    );
    wait_text(&b, "#history", "ENQUEUE").await;
    assert!(
        b.find_all(Locator::Css("form[action='/ui/tasks/web1/retry']"))
            .await
            .unwrap()
            .is_empty(),
        "no retry for a pending task"
    );
    click(&b, "form[action='/ui/tasks/web1/cancel'] button").await;
    wait_text(&b, "#confirm", "Cancel task web1?").await;
    assert_eq!(up.task_state("web1").await, "pending", "not yet");
    shot(&b, "task-confirm").await;
    click(&b, "#confirm button").await;
    wait_text(&b, ".flash.ok", "web1 is cancelled").await;
    assert_eq!(up.task_state("web1").await, "cancelled");
    // Starting over names what it drops, and only the confirmation drops it.
    b.goto(&format!("{}/queue", up.url)).await.unwrap();
    b.execute("document.getElementById('setup').open = true;", vec![])
        .await
        .unwrap();
    click(&b, "form[action='/ui/queue/init'] input[name='force']").await;
    click(&b, "form[action='/ui/queue/init'] button").await;
    wait_text(&b, "#confirm", "Start over?").await;
    let said = text_of(&b, "#confirm").await;
    assert!(
        said.contains("drops the goal “a greeting file” and its one task (1 cancelled)"),
        "{said}"
    );
    let all = up.api(reqwest::Method::GET, "/tasks", Value::Null).await;
    assert_eq!(all.as_array().unwrap().len(), 1, "not yet");
    click(&b, "#confirm button").await;
    wait_text(&b, ".flash.ok", "initialised").await;
    let all = up.api(reqwest::Method::GET, "/tasks", Value::Null).await;
    assert!(all.as_array().unwrap().is_empty(), "{all}");
    b.close().await.unwrap();
}

/// Under `xo up` with no fleet backend, the Containers page says why it is
/// empty: `fleet.backend` is not "docker", and what to do.
#[tokio::test]
async fn the_containers_page_names_fleet_backend() {
    let up = Up::start(&[]).await;
    let r = up
        .http
        .get(format!("{}/containers", up.url))
        .bearer_auth(&up.token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    let body = r.text().await.unwrap();
    assert!(
        body.contains("fleet.backend = &quot;docker&quot;") && body.contains("is `none`"),
        "{body}"
    );
    assert!(body.contains("xo serve runner --role coder"), "{body}");
}

/// Seed 001's user review queue on the Knowledge page: a document awaiting
/// review is listed first; Accept (with a note) establishes it, the list
/// empties, and the decision is a KNOWLEDGE_REVIEWED audit line.
#[tokio::test]
async fn knowledge_awaiting_review_is_accepted_from_the_page_and_audited() {
    let mut up = Up::start(&[]).await;
    up.post("/queue/init", json!({})).await;
    let dir = up.root.path().join("state/knowledge/lessons");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("vendored-parser.md"),
        "# The vendored parser accepts trailing commas\n\n_Last updated by: internaliser, t1_\n_Status: provisional_\n_Needs user review: yes_\n_Uses: 0_\n\n## Rules\n\n1. The vendored parser accepts trailing commas\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("formatter.md"),
        "# Run the formatter first\n\n_Last updated by: internaliser, t1_\n_Status: provisional_\n_Uses: 0_\n\n## Rules\n\n1. Run the formatter before the tests\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("old.md"),
        "# Old habit\n\n_Status: deprecated_\n\n## Rules\n\n1. Commit without tests\n",
    )
    .unwrap();
    std::fs::write(dir.join("broken.md"), "# Broken\n\n_Status: maybe_\n").unwrap();
    let b = browser(&mut up.procs).await;
    login(&b, &up).await;
    b.goto(&format!("{}/knowledge", up.url)).await.unwrap();
    wait_text(&b, "#needs-review", "lessons/vendored-parser").await;
    assert!(
        !text_of(&b, "#needs-review").await.contains("formatter"),
        "only what waits is listed"
    );
    shot(&b, "knowledge-review").await;
    // A file that does not parse is named with its line, readably.
    let invalid = text_of(&b, "#invalid-docs").await;
    assert!(
        invalid.contains("broken.md")
            && invalid.contains("line 3")
            && invalid.contains("\"maybe\""),
        "{invalid}"
    );
    // A deprecated document offers nothing to deprecate.
    assert!(
        b.find_all(Locator::Css(
            "form[action='/ui/knowledge/lessons/old/deprecate']"
        ))
        .await
        .unwrap()
        .is_empty()
    );
    assert!(
        !b.find_all(Locator::Css(
            "form[action='/ui/knowledge/lessons/formatter/deprecate']"
        ))
        .await
        .unwrap()
        .is_empty()
    );
    b.find(Locator::Css(
        "#needs-review tr[data-doc='lessons/vendored-parser'] input[name='note']",
    ))
    .await
    .unwrap()
    .send_keys("checked against the vendored copy")
    .await
    .unwrap();
    click(
        &b,
        "#needs-review tr[data-doc='lessons/vendored-parser'] form:first-of-type button",
    )
    .await;
    wait_text(
        &b,
        ".flash.ok",
        "accepted lessons/vendored-parser: now established",
    )
    .await;
    assert!(
        b.find_all(Locator::Id("needs-review"))
            .await
            .unwrap()
            .is_empty(),
        "nothing waits any more"
    );
    let doc = up
        .api(
            reqwest::Method::GET,
            "/knowledge/lessons/vendored-parser",
            Value::Null,
        )
        .await;
    assert_eq!(doc["status"], "established");
    assert!(doc.get("needs_user_review").is_none(), "{doc}");
    // Its id opens it, readable: rules and changelog.
    b.goto(&format!("{}/knowledge", up.url)).await.unwrap();
    click(&b, "a[href='/knowledge/lessons/vendored-parser']").await;
    wait_text(
        &b,
        "#doc-rules",
        "The vendored parser accepts trailing commas",
    )
    .await;
    assert!(
        text_of(&b, "main")
            .await
            .contains("accepted in review: checked against the vendored copy")
    );
    let audit = up
        .api(reqwest::Method::GET, "/audit?lines=50", Value::Null)
        .await;
    let line = audit
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["event"] == "KNOWLEDGE_REVIEWED")
        .unwrap_or_else(|| panic!("{audit}"));
    assert_eq!(line["state_before"]["doc"], "lessons/vendored-parser");
    assert_eq!(line["state_after"]["decision"], "accepted");
    assert_eq!(line["state_after"]["by"], "console");
    assert_eq!(
        line["state_after"]["note"],
        "checked against the vendored copy"
    );
    // A second decision on it is refused with the reason, over the API.
    let r = up
        .http
        .post(format!(
            "{}/api/v1/knowledge/lessons/vendored-parser/review",
            up.url
        ))
        .bearer_auth(&up.token)
        .json(&json!({"accept": false, "note": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert!(r.text().await.unwrap().contains("not awaiting review"));
    b.close().await.unwrap();
}

#[tokio::test]
async fn read_only_hides_and_refuses_every_action() {
    let mut up = Up::start(&[("XO__CONSOLE__READ_ONLY", "true")]).await;
    let b = browser(&mut up.procs).await;
    login(&b, &up).await;
    for page in [
        "/",
        "/queue",
        "/audit",
        "/knowledge",
        "/directives",
        "/reviews",
        "/settings",
    ] {
        b.goto(&format!("{}{page}", up.url)).await.unwrap();
        wait_text(&b, "header", "read-only").await;
        let forms = b
            .find_all(Locator::Css("form[method='post']"))
            .await
            .unwrap();
        assert!(
            forms.is_empty(),
            "{page} shows {} action forms",
            forms.len()
        );
        let buttons = b.find_all(Locator::Css("#save, #preview")).await.unwrap();
        assert!(buttons.is_empty(), "{page}");
    }
    // The browser's own POST is refused too (a forged form).
    b.goto(&format!("{}/queue", up.url)).await.unwrap();
    let status = b
        .execute_async(
            "const done = arguments[0]; fetch('/ui/queue/halt', {method: 'POST', headers: {'content-type': 'application/x-www-form-urlencoded'}, body: 'csrf=' + document.querySelector('meta[name=xo-csrf]').content}).then(r => done(r.status));",
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(status, json!(403));
    shot(&b, "read-only").await;
    b.close().await.unwrap();
}

/// A short bounded run of `xo bench console`: every figure is printed and
/// every report reaches every client (no timing is asserted here); a tab
/// of the fleet page in Chromium makes no request per report.
#[test]
fn the_console_bench_runs_and_prints_its_figures() {
    let out = Xo::new()
        .command(&[])
        .args([
            "bench",
            "console",
            "--clients",
            "3",
            "--rate",
            "200",
            "--secs",
            "1",
            "--units",
            "600",
            "--fetches",
            "2",
            "--tab-units",
            "200",
            "--tab-secs",
            "3",
        ])
        .args(["--nats-server", &xo_tests::nats_server_binary()])
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("SSE, 3 clients:       600 events (0 missing)"),
        "{text}"
    );
    assert!(
        text.contains("units known to the supervisor: 610"),
        "{text}"
    );
    for figure in [
        "raw bus, 3 subscribers",
        "API /api/v1/units",
        "fleet page /",
        "fleet page (Chromium, rows batches):",
        "previous script, replayed:",
    ] {
        assert!(text.contains(figure), "{figure}: {text}");
    }
    // Issue 41, item 2: the open fleet page (a page of 100 rows) asks the
    // server for next to nothing beside one request per unit that reported
    // under the previous script.
    assert!(text.contains("100 rows on the page"), "{text}");
    let ratio: f64 = text
        .split("the page / the previous script: ")
        .nth(1)
        .and_then(|t| t.split('×').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no requests ratio: {text}"));
    assert!(ratio < 0.05, "{ratio}: {text}");
}

/// Issue 37, item 3: a unit stuck after escalation needs you, on every
/// page: the header's "Needs you" counts it (live), its list says why with
/// the last evidence and the action that answers it, and the fleet page
/// puts it first.
#[tokio::test]
async fn a_unit_that_needs_you_is_counted_in_the_header_listed_and_first() {
    let mut up = Up::start(&[]).await;
    let b = browser(&mut up.procs).await;
    login(&b, &up).await;
    b.goto(&format!("{}/queue", up.url)).await.unwrap();
    wait_text(&b, "#live", "live").await;
    let send = |unit: &str, turn: u64, since: u64, health: &str| {
        let report = json!({
            "v": 1,
            "unit": {"unit": unit, "role": "coder", "pace": "primary"},
            "status": {"health": health},
            "activity": {"task_id": "T-9", "step": "fix the parser", "turns_since_progress": since},
            "time": {"turn": turn, "seq": turn, "at": 1}
        });
        up.report(&report);
    };
    send("calm-1", 1, 0, "red");
    // A stall steered at turn 7, again at 10 (second notice), at 13 (third:
    // a person is asked): then the unit needs you.
    for turn in [7, 10, 13] {
        send("stuck-1", turn, turn - 1, "green");
    }
    wait_text(&b, "header nav a[href=\"/needs\"]", "Needs you (1)").await;
    shot(&b, "needs-header").await;
    click(&b, "header nav a[href=\"/needs\"]").await;
    wait_text(&b, "table#needs", "stuck-1").await;
    let row = text_of(&b, "table#needs tbody tr").await;
    assert!(row.contains("stuck") && row.contains("stall"), "{row}");
    assert!(row.contains("third notice"), "the last evidence: {row}");
    assert!(row.contains("Open stuck-1"), "the action: {row}");
    shot(&b, "needs-list").await;
    // The fleet: it comes first, before a red unit, with its badge.
    b.goto(&format!("{}/", up.url)).await.unwrap();
    let first = b
        .find(Locator::Css("table[data-live] tbody tr"))
        .await
        .unwrap()
        .attr("data-unit")
        .await
        .unwrap();
    assert_eq!(first.as_deref(), Some("stuck-1"));
    assert!(
        text_of(&b, "#unit-stuck-1")
            .await
            .contains("needs you: stuck")
    );
    // It moves: no longer counted.
    send("stuck-1", 14, 0, "green");
    // (The header counts again at least every 10 s; a hang guard of 60.)
    xo_tests::until(
        "the header stops counting the unit that moved",
        async || (text_of(&b, "header nav a[href=\"/needs\"]").await == "Needs you").then_some(()),
    )
    .await;
}

/// A steering message over the bound is refused in plain words with what
/// was typed back in the form (nothing sent); a form too large to read is
/// refused in plain words too (never the extractor's type names); an
/// unknown severity is named. Then the unit is acknowledged from its page
/// and over the API: said on the page, its fleet row and in `xo units`.
#[tokio::test]
async fn an_oversized_steering_is_refused_in_plain_words_keeping_what_was_typed() {
    let up = Up::start(&[]).await;
    up.report_green("big-1", "coder");
    let token = up.token.clone();
    let page = |r: reqwest::RequestBuilder| {
        let token = token.clone();
        async move {
            let r = r.bearer_auth(&token).send().await.unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        }
    };
    let mut unit_page = (0, String::new());
    let _ = xo_tests::within(xo_tests::HANG_GUARD, async || {
        unit_page = page(up.http.get(format!("{}/units/big-1", up.url))).await;
        (unit_page.0 == 200).then_some(())
    })
    .await;
    assert_eq!(unit_page.0, 200, "{}", unit_page.1);
    let csrf = unit_page
        .1
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .expect("the steer form's csrf")
        .to_string();
    let steer = |message: String, severity: &str| {
        up.http
            .post(format!("{}/ui/units/big-1/steer", up.url))
            .form(&[
                ("csrf", csrf.as_str()),
                ("message", message.as_str()),
                ("severity", severity),
            ])
    };
    let long = format!("KEPT-LONG {}", "x".repeat(5_000));
    let (status, body) = page(steer(long.clone(), "warning")).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("is 5010 characters; at most 4000"),
        "said in plain words: {body}"
    );
    assert!(
        body.contains(&format!(">{long}</textarea>")),
        "what was typed is back in the form"
    );
    assert!(body.contains("it has not been sent"));
    let (status, body) = page(steer("look at the tests".into(), "loud")).await;
    assert_eq!(status, 400);
    assert!(
        body.contains("severity &quot;loud&quot;: use info, warning, urgent or critical"),
        "{body}"
    );
    assert!(body.contains(">look at the tests</textarea>"));
    // Too large to read at all.
    let (status, body) = page(steer("y".repeat(3 << 20), "warning")).await;
    assert_eq!(status, 413, "{body}");
    assert!(
        body.contains("larger than the console takes") && !body.contains("Failed to buffer"),
        "{body}"
    );
    // A message within the bound is sent.
    let (status, body) = page(steer("run the tests".into(), "warning")).await;
    assert!(status == 200 || status == 303, "{status}: {body}");
    assert!(body.contains("steering sent to big-1"), "{body}");

    // Acknowledged from the page: said on it and on its fleet row; one
    // without a why is refused, saying so.
    let ack = |why: &str| {
        up.http
            .post(format!("{}/ui/units/big-1/ack", up.url))
            .form(&[("csrf", csrf.as_str()), ("why", why), ("for", "2h")])
    };
    let (_, body) = page(ack(" ")).await;
    assert!(body.contains("an acknowledgement needs a why"), "{body}");
    let (_, body) = page(ack("watching the registry outage")).await;
    assert!(
        body.contains("big-1 acknowledged until") && body.contains("id=\"ack-now\""),
        "{body}"
    );
    let (_, fleet) = page(up.http.get(format!("{}/", up.url))).await;
    assert!(
        fleet.contains("acked by console (api) until")
            && fleet.contains("watching the registry outage"),
        "{fleet}"
    );
    // Over the API, naming its client: the token's operator (the console
    // token's, `console`) and the client the body names.
    let r = up
        .http
        .post(format!("{}/api/v1/units/big-1/ack", up.url))
        .bearer_auth(&up.token)
        .json(&json!({"why": "paged the owner", "for_ms": 600000, "by": "ana"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["ack"]["by"], "console (api: ana)");
    assert_eq!(v["ack"]["why"], "paged the owner");
    let o = up.cli(&["units"]).output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("acked by console (api: ana) until") && out.contains("paged the owner"),
        "{out}"
    );
}
