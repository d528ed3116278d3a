//! The pages' unit tests: rendering, forms, settings, the fleet's order.
use super::*;
use xo_proto::settings::{SettingKey, Settings};

fn unit(name: &str, health: xo_proto::Health) -> UnitSummary {
    UnitSummary {
        unit: name.into(),
        role: "coder".into(),
        health,
        self_health: xo_proto::Health::Green,
        self_note: None,
        stale: false,
        ended: false,
        refused_reports: 0,
        turn: 1,
        seq: 1,
        last_seen: 1_000_000,
        task_id: None,
        context_fill: 0.5,
        steering_sent: 0,
        restarts: 0,
        pace: Default::default(),
        turns_since_progress: 0,
        cost_usd: 0.0,
        last_steering: None,
        needs: None,
        waiting_until: None,
        unreadable: 0,
        ack: None,
    }
}

/// The "Needs you" page answers each reason with what answers it: a
/// watched session's prompt or question in its own terminal (never a
/// link to a queue task that is its session id), a watch's cap, the
/// goal's budget, a blocked task's answer.
#[test]
fn each_reason_is_answered_where_it_can_be() {
    use xo_proto::{NeedsReason as R, NeedsYou};
    let needing = |name: &str, reason: R, detail: &str, task: Option<&str>| {
        let mut u = unit(name, xo_proto::Health::Green);
        u.task_id = task.map(String::from);
        u.needs = Some(NeedsYou {
            reason,
            turn: 3,
            stretch_from: 1,
            since: 1_000,
            kind: None,
            detail: detail.into(),
        });
        u
    };
    let units = vec![
        needing(
            "w-perm",
            R::Permission,
            "permission for Bash: rm -rf x",
            Some("s-1"),
        ),
        needing("w-ask", R::Question, "which port?", Some("s-2")),
        needing(
            "w-cap",
            R::Budget,
            "11000 tokens of the session's max_tokens 10000 spent",
            Some("s-3"),
        ),
        needing(
            "r-goal",
            R::Budget,
            "the goal's budget is spent",
            Some("T-9"),
        ),
        needing("r-blocked", R::Answer, "needs a password", Some("T-4")),
    ];
    let body = needs::needs_body(&units, 2_000).into_string();
    let row = |id: &str| {
        body.split(&format!("<tr data-unit=\"{id}\">"))
            .nth(1)
            .and_then(|r| r.split("</tr>").next())
            .unwrap_or_else(|| panic!("{id}: {body}"))
            .to_string()
    };
    assert!(
        row("w-perm").contains("in the session's own terminal"),
        "{}",
        row("w-perm")
    );
    assert!(!row("w-perm").contains("/tasks/"), "{}", row("w-perm"));
    assert!(row("w-ask").contains("Reply in the session's own terminal"));
    assert!(!row("w-ask").contains("/tasks/s-2"), "{}", row("w-ask"));
    assert!(row("w-cap").contains("Raise the watch's cap"));
    assert!(row("r-goal").contains("href=\"/settings\""));
    assert!(row("r-blocked").contains("href=\"/tasks/T-4\""));
}

fn order(body: &str) -> Vec<String> {
    body.split("<tr id=\"unit-")
        .skip(1)
        .map(|r| r.split('"').next().unwrap().to_string())
        .collect()
}

#[test]
fn the_timeline_shows_evidence_and_collapses_repeats() {
    use xo_proto::{AnomalyKind, Severity, Steering};
    let mk = |kind: AnomalyKind, turn: u64, msg: &str| Steering {
        v: 1,
        unit: "u1".into(),
        id: format!("u1-{turn}"),
        kind,
        severity: Severity::Urgent,
        message: msg.into(),
        turn,
        at: 0,
        evidence: xo_proto::Evidence {
            rule: "context_fill > 0.90".into(),
            observed: "0.930".into(),
            turns: vec![turn],
            tools: Vec::new(),
        },
        source: xo_proto::SteeringSource::Xo,
    };
    let list = vec![
        mk(AnomalyKind::Stall, 3, "stalled"),
        mk(AnomalyKind::Context, 10, "compact"),
        mk(AnomalyKind::Context, 11, "compact"),
        mk(AnomalyKind::Context, 12, "compact"),
    ];
    // Reports to turn 14: progress at 5 (after the stall steering), none
    // after the compaction steering of 12.
    let history: Vec<xo_proto::control::ReportPoint> = (1..=14u64)
        .map(|turn| xo_proto::control::ReportPoint {
            turn,
            turns_since_progress: if turn < 5 {
                turn as u32
            } else {
                (turn - 5) as u32
            },
            ..Default::default()
        })
        .collect();
    let html = steering_timeline(&list, 0, &history, None).into_string();
    assert_eq!(html.matches("<li").count(), 2, "{html}");
    assert!(
        html.contains("then: progress within 2 turns") && html.contains("then: too soon to say"),
        "what followed each, of a run its last: {html}"
    );
    let first = html.split("<li").nth(1).unwrap();
    assert!(
        first.contains("turn 10–12") && first.contains("×3"),
        "{first}"
    );
    assert!(
        first.contains("evidence: <code>context_fill &gt; 0.90</code>, observed <b>0.930</b>"),
        "{first}"
    );
    let second = html.split("<li").nth(2).unwrap();
    assert!(
        second.contains("turn 3 ") && !second.contains("×"),
        "{second}"
    );
}

#[test]
fn an_audit_line_shows_what_changed_and_who() {
    let before = serde_json::json!({"supervisor": {"iteration": 0, "status": "RUNNING"},
        "task": {"state": "running", "claimant": "coder-1", "reason": null}, "last_updated": "a"});
    let after = serde_json::json!({"supervisor": {"iteration": 1, "status": "RUNNING"},
        "task": {"state": "completed", "claimant": null}, "last_updated": "b"});
    let d = audit_diff(&before, &after).into_string();
    assert!(
        d.contains("<code>task.state</code>: running → <b>completed</b>"),
        "{d}"
    );
    assert!(
        d.contains("<code>supervisor.iteration</code>: 0 → <b>1</b>"),
        "{d}"
    );
    assert!(
        d.contains("<code>task.claimant</code>: coder-1 → <b>—</b>"),
        "{d}"
    );
    assert!(
        !d.contains("supervisor.status") && !d.contains("last_updated"),
        "{d}"
    );
    assert_eq!(audit_diff(&before, &before).into_string(), "");
    let e = |after: Value| xo_proto::queue::AuditEvent {
        v: 1,
        seq: 1,
        event: xo_proto::queue::EventName::Unknown,
        task_id: None,
        at: 0,
        state_before: before.clone(),
        state_after: after,
        validation_report: None,
        prompt_ref: None,
        response_ref: None,
        prompt: None,
        response: None,
        prev: String::new(),
    };
    assert_eq!(
        audit_actor(&e(after.clone())),
        "coder-1",
        "the holder, from before"
    );
    assert_eq!(audit_actor(&e(serde_json::json!({"by": "alice"}))), "alice");
}

#[test]
fn a_role_xo_toml_does_not_name_shows_the_default_roles_values() {
    let mut v = view();
    v.defaults.insert(
        "roles.default.doctrine.loop_error_repeats".into(),
        Value::from(3),
    );
    v.settings
        .values
        .insert("roles.devops.doctrine.cascade_tools".into(), Value::from(5));
    assert_eq!(
        default_of(&v, "roles.devops.doctrine.loop_error_repeats"),
        Some(&Value::from(3))
    );
    assert_eq!(default_of(&v, "roles.devops.doctrine.cascade_tools"), None);
    let f = settings_frame();
    let row = setting_row(
        &f,
        &v,
        "roles.devops.doctrine.loop_error_repeats",
        "integer",
        "",
        &[],
        &FormChange::default(),
    )
    .into_string();
    assert!(
        row.contains("value=\"3\"") && row.contains("the default role's"),
        "{row}"
    );
    // Shown and sent back unchanged: not a change (the bricked page
    // sent every one of them).
    let (set, unset) = form_change(
        &v,
        &pairs(&[("set:roles.devops.doctrine.loop_error_repeats", "3")]),
    )
    .unwrap();
    assert!(set.is_empty() && unset.is_empty(), "{set:?}");
}

#[test]
fn durations_read_and_type_in_human_units() {
    assert_eq!(human_ms(1_800_000), "30m");
    assert_eq!(human_ms(7_200_000), "2h");
    assert_eq!(human_ms(90_000), "90s");
    assert_eq!(human_ms(1_500), "1500ms");
    for (t, ms) in [
        ("30m", 1_800_000),
        ("2h", 7_200_000),
        ("90s", 90_000),
        ("1500ms", 1_500),
        (" 250 ", 250),
    ] {
        assert_eq!(parse_ms(t), Some(ms), "{t}");
    }
    assert_eq!(parse_ms("soon"), None);
    assert_eq!(parse_ms("-5m"), None);
    // Through the form: a duration in words is saved in milliseconds,
    // a wrong one is named.
    let v = view();
    let mut v2 = v.clone();
    v2.keys.push(SettingKey {
        key: "runner.timeouts.standard_ms".into(),
        kind: "integer".into(),
        help: String::new(),
        choices: Vec::new(),
    });
    let (set, _) = form_change(&v2, &pairs(&[("set:runner.timeouts.standard_ms", "45m")])).unwrap();
    assert_eq!(set["runner.timeouts.standard_ms"], Value::from(2_700_000));
    let e = form_change(&v2, &pairs(&[("set:runner.timeouts.standard_ms", "soon")])).unwrap_err();
    assert!(e.contains("is not a duration"), "{e}");
}

/// The settings of a default `xo.toml`, as the settings page gets them.
fn default_settings() -> (xo_runtime::XoConfig, SettingsView) {
    let cfg = xo_runtime::XoConfig::default();
    let v = SettingsView {
        settings: xo_proto::settings::Settings::default(),
        defaults: xo_runtime::settings::defaults(&cfg),
        keys: xo_runtime::settings::keys(),
    };
    (cfg, v)
}

fn settings_frame() -> Frame<'static> {
    Frame {
        title: "t",
        active: "/settings",
        csrf: "c".into(),
        read_only: false,
        now: 1_795_000_000_000,
        flash: None,
    }
}

/// A refused form names every field that is wrong (not the first), and
/// the page it comes back as shows each as it was typed, with its error.
#[test]
fn a_refused_settings_form_names_every_error_and_keeps_every_edit() {
    let (cfg, v) = default_settings();
    let form = pairs(&[
        ("set:runner.max_retries", "999"),
        ("set:runner.timeouts.long_ms", "soon"),
        ("set:review.model.base_url", "not a url"),
        ("set:roles.default.doctrine.loop_error_repeats", "many"),
        ("set:runner.global_template", "KEEP-ME: small steps"),
    ]);
    let mut change = read_form(&v, &form);
    check_change(&cfg, &v, &mut change);
    let keys: Vec<&str> = change.errors.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "review.model.base_url",
            "roles.default.doctrine.loop_error_repeats",
            "runner.max_retries",
            "runner.timeouts.long_ms",
        ],
        "{:?}",
        change.errors
    );
    assert!(change.errors["runner.max_retries"].contains("1 to 20"));
    // The good edit is still in the change, shown with the others.
    assert!(change.set.contains_key("runner.global_template"));
    assert!(!change.set.contains_key("runner.max_retries"));
    let f = settings_frame();
    let mut shown = v.clone();
    shown.settings.values.extend(change.set.clone());
    let html = settings_body(
        &f,
        &shown,
        "default",
        &["default".into()],
        maud::html! {},
        &change,
    )
    .into_string();
    for typed in ["999", "soon", "not a url", "many", "KEEP-ME: small steps"] {
        let as_text = maud::html! { (typed) }.into_string();
        assert!(html.contains(&as_text), "{typed} not kept on the page");
    }
    assert_eq!(html.matches("class=\"field-error\"").count(), 4);
    assert!(html.contains("id=\"field-runner-max_retries\""));
    // Each error names its key once: in the list at the top, not again
    // in its reason, and not in the reason beside its field.
    let top = refusal(&change, false).into_string();
    for (key, why) in &change.errors {
        assert_eq!(top.matches(key.as_str()).count(), 1, "{key}: {top}");
        assert!(!why.contains(key.as_str()), "{key} said again: {why}");
    }
    assert!(top.contains("4 things to fix"), "{top}");
}

/// Every key an operator may set has its field on the page (seed 004:
/// the project's timeout profile a selector), each control labelled by
/// its key.
#[test]
fn every_settable_key_has_a_labelled_field() {
    let (_, v) = default_settings();
    let f = settings_frame();
    let html = settings_body(
        &f,
        &v,
        "web",
        &["default".into()],
        maud::html! {},
        &FormChange::default(),
    )
    .into_string();
    for k in &v.keys {
        let key = k
            .key
            .replace("<role>", "default")
            .replace("<project>", "web");
        assert_eq!(
            html.matches(&format!("data-setting=\"{key}\"")).count(),
            1,
            "{key} has one field"
        );
    }
    let profile = html
        .split("data-setting=\"projects.web.timeout_profile\"")
        .nth(1)
        .and_then(|rest| rest.split("</div></div>").next())
        .unwrap_or_default();
    assert!(profile.contains("<select"), "{profile}");
    for p in ["standard", "long", "extended"] {
        assert!(
            profile.contains(&format!("<option>{p}</option>"))
                || profile.contains(&format!("<option selected>{p}</option>")),
            "{p}: {profile}"
        );
    }
    // Every visible control of the form has an id a label points to
    // (a list's boxes sit in their own labels).
    let html = html
        .split("id=\"settings-form\"")
        .nth(1)
        .and_then(|f| f.split("</form>").next())
        .unwrap_or_default();
    let controls = html.matches("<textarea ").count()
        + html.matches("<select ").count()
        + html.matches("<input ").count()
        - html.matches("<input type=\"hidden\"").count()
        - html.matches("name=\"list:").count()
        + html.matches("type=\"hidden\" name=\"list:").count()
        - html.matches("name=\"unset\"").count();
    let labelled = html.matches("<label for=\"input-").count();
    assert_eq!(controls, labelled, "every control labelled");
    for id in html
        .split("<label for=\"")
        .skip(1)
        .map(|r| r.split('"').next().unwrap())
    {
        assert_eq!(html.matches(&format!("id=\"{id}\"")).count(), 1, "{id}");
    }
}

/// A long log entry keeps its start and end, cut on characters, and
/// says how much is left out.
#[test]
fn long_log_text_is_elided_in_the_middle() {
    assert_eq!(elide("short", 10), "short");
    let text = "é".repeat(100); // 200 bytes, 2 a character
    let out = elide(&text, 51);
    assert!(
        out.starts_with(&"é".repeat(12)) && out.ends_with(&"é".repeat(12)),
        "{out}"
    );
    assert!(out.contains("150 bytes elided"), "{out}");
}

/// The throughput chart's interval: at most 24 bars whatever the span.
#[test]
fn chart_intervals_make_at_most_24_bars() {
    let m = 60_000;
    assert_eq!(interval(0), m);
    assert_eq!(interval(23 * m), m);
    assert_eq!(interval(30 * m), 5 * m);
    assert_eq!(interval(23 * 60 * m), 60 * m);
    assert_eq!(interval(72 * 60 * m), 360 * m);
    for span in [m, 7 * m, 100 * m, 1000 * m, 10_000 * m] {
        assert!(span / interval(span) < 24, "{span}");
    }
    // Stacked bars: one rect per non-zero value, each with its series.
    let svg = bars(
        "c",
        "t",
        &["a".into(), "b".into()],
        &[
            ("loop".into(), vec![1.0, 0.0]),
            ("stall".into(), vec![2.0, 3.0]),
        ],
    )
    .into_string();
    assert_eq!(svg.matches("<rect class=\"bar\"").count(), 3);
    assert!(
        svg.contains("loop <b>1</b>") && svg.contains("stall <b>5</b>"),
        "{svg}"
    );
}

/// Issue 41, item 3: the charts mark settings changes (from the audit:
/// version and who) and the minutes with steering, where they fall on the
/// time axis, each with what a pointer over it says; a mark outside the
/// chart's span is not drawn.
#[test]
fn charts_mark_settings_changes_and_steering_where_they_fall() {
    use super::charts::{MarkKind, bars_marked, marks_of, spend};
    use xo_proto::control::SteeringMinute;
    use xo_proto::queue::{AuditEvent, EventName};
    let m = 60_000u64;
    let t0 = 1_795_350_000_000 - 1_795_350_000_000 % m;
    let line = |event: EventName, at: u64, after: serde_json::Value| AuditEvent {
        v: 1,
        seq: 1,
        event,
        task_id: None,
        at,
        state_before: serde_json::Value::Null,
        state_after: after,
        validation_report: None,
        prompt_ref: None,
        response_ref: None,
        prompt: None,
        response: None,
        prev: String::new(),
    };
    let audit = vec![
        line(
            EventName::SettingsChanged,
            t0 + 2 * m + 5,
            serde_json::json!({"version": 3, "by": "ana"}),
        ),
        line(EventName::Enqueue, t0 + 3 * m, serde_json::json!({})),
        line(
            EventName::SettingsChanged,
            t0 - 90 * m,
            serde_json::json!({"version": 2, "by": "bo"}),
        ),
    ];
    let minutes = vec![SteeringMinute {
        minute: t0 + m,
        by_kind: [("loop".to_string(), 2u64)].into(),
    }];
    let marks = marks_of(&audit, &minutes);
    assert_eq!(marks.len(), 3, "{marks:?}");
    assert_eq!(marks[2].kind, MarkKind::Settings);
    assert_eq!(marks[2].label, "settings version 3 by ana");
    assert_eq!(marks[1].label, "steering: 2 loop");
    // Four one-minute slots from t0: the old change falls outside.
    let starts: Vec<u64> = (0..4).map(|i| t0 + i * m).collect();
    let labels: Vec<String> = starts.iter().map(|t| t.to_string()).collect();
    let svg = bars_marked(
        "c",
        "t",
        &labels,
        &[("completed".into(), vec![1.0, 0.0, 2.0, 0.0])],
        Some((&starts, m, &marks)),
    )
    .into_string();
    assert_eq!(svg.matches("data-mark=\"settings\"").count(), 1, "{svg}");
    assert_eq!(svg.matches("data-mark=\"steering\"").count(), 1, "{svg}");
    assert!(svg.contains("settings version 3 by ana</title>"), "{svg}");
    assert!(svg.contains("settings changed <b>1</b>"), "{svg}");
    // The spend line marks what falls within its span only.
    let line_svg = spend("s", &[(t0, 0.5)], t0 + 4 * m, 0.5, 0.0, &marks).into_string();
    assert_eq!(line_svg.matches("class=\"mark ").count(), 2, "{line_svg}");
}

#[test]
fn a_directive_names_its_source() {
    let mut t = Task::new(
        "dir-code-style-3-1",
        "tidy",
        "Directive from the code_style supervisor (Cleanup, Low): tidy\nRationale: x",
        "coder",
    );
    assert_eq!(directive_source(&t), "code_style");
    t.instructions = "do it".into();
    assert_eq!(directive_source(&t), "—");
}

fn view() -> SettingsView {
    let mut defaults = BTreeMap::new();
    defaults.insert("supervisor.enabled".to_string(), Value::Bool(true));
    defaults.insert("runner.max_retries".to_string(), Value::from(3));
    defaults.insert("runner.global_template".to_string(), Value::from(""));
    SettingsView {
        settings: Settings::default(),
        defaults,
        keys: xo_runtime::settings::keys()
            .into_iter()
            .chain([SettingKey {
                key: "x".into(),
                kind: "string".into(),
                help: String::new(),
                choices: vec![],
            }])
            .collect(),
    }
}

fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
    p.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

#[test]
fn a_form_sends_only_what_changed_typed_by_kind() {
    let v = view();
    let (set, unset) = form_change(
        &v,
        &pairs(&[
            ("set:supervisor.enabled", "false"),
            ("set:runner.max_retries", "3"),
            ("set:runner.global_template", "Be brief.\r\nAlways."),
            ("list:roles.coder.doctrine.disabled_rules", ""),
            ("list:roles.coder.doctrine.disabled_rules", "stall"),
            ("set:roles.coder.doctrine.loop_error_repeats", "5"),
        ]),
    )
    .unwrap();
    assert!(unset.is_empty());
    assert_eq!(set["supervisor.enabled"], Value::Bool(false));
    assert!(
        !set.contains_key("runner.max_retries"),
        "unchanged values are not sent"
    );
    assert_eq!(set["runner.global_template"], "Be brief.\nAlways.");
    assert_eq!(
        set["roles.coder.doctrine.disabled_rules"],
        serde_json::json!(["stall"])
    );
    assert_eq!(
        set["roles.coder.doctrine.loop_error_repeats"],
        Value::from(5)
    );
    // A checked box comes after its hidden "false": the last value wins.
    let (set, _) = form_change(
        &v,
        &pairs(&[
            ("set:supervisor.enabled", "false"),
            ("set:supervisor.enabled", "true"),
        ]),
    )
    .unwrap();
    assert!(set.is_empty());
    let e = form_change(&v, &pairs(&[("set:runner.max_retries", "many")])).unwrap_err();
    assert!(e.contains("runner.max_retries"), "{e}");
    // Issue 24's bricked page: a role's thresholds rendered empty came
    // back as "" and every Save failed. An emptied number is no value:
    // nothing to change, or back to xo.toml where it was set.
    let mut v2 = view();
    v2.settings
        .values
        .insert("runner.max_retries".into(), Value::from(5));
    let (set, unset) = form_change(
        &v2,
        &pairs(&[
            ("set:roles.devops.doctrine.loop_error_repeats", ""),
            ("set:runner.max_retries", " "),
            ("set:supervisor.enabled", "false"),
        ]),
    )
    .unwrap();
    assert_eq!(unset, ["runner.max_retries"]);
    assert_eq!(set.len(), 1, "{set:?}");
    assert_eq!(set["supervisor.enabled"], Value::Bool(false));
}

#[test]
fn query_values_are_percent_encoded() {
    assert_eq!(enc("a b&c=d/é"), "a%20b%26c%3Dd%2F%C3%A9");
}

mod fleet;

/// The templates escape every value: a unit's name and an agent's words
/// reach the page as text, in content and in attributes.
#[test]
fn what_an_agent_wrote_is_text_on_the_page() {
    use xo_proto::{NeedsReason as R, NeedsYou};
    let mut u = unit("u\"><script>x()</script>", xo_proto::Health::Red);
    u.task_id = Some("T\"onclick=\"y()".into());
    u.needs = Some(NeedsYou {
        reason: R::Answer,
        turn: 3,
        stretch_from: 1,
        since: 1_000,
        kind: None,
        detail: "<img src=x onerror=alert(1)> & more".into(),
    });
    u.self_health = xo_proto::Health::Red;
    u.health = xo_proto::Health::Amber;
    u.self_note = Some("</small><script>z()</script>".into());
    // The fleet's row, as the page and the live script get it.
    let row = unit_row(&u, 2_000).into_string();
    assert!(!row.contains("<script>"), "{row}");
    assert!(!row.contains("\"onclick"), "{row}");
    assert!(
        row.contains("&lt;/small&gt;&lt;script&gt;z()&lt;/script&gt;"),
        "{row}"
    );
    // A task's patch: a file name and its lines are text.
    let diff = xo_proto::queue::TaskDiff {
        branch: "xo/t1".into(),
        base: "a".repeat(40),
        commit: "b".repeat(40),
        files: vec![xo_proto::queue::FileChange {
            path: "<img src=x onerror=a()>.rs".into(),
            status: "A".into(),
            added: Some(1),
            removed: Some(0),
        }],
        patch: "+<script>evil()</script>\n".into(),
        truncated: false,
        merged: Some("main at <b>".into()),
    };
    let shown = diff_section(&diff).into_string();
    assert!(!shown.contains("<script>") && !shown.contains("<img") && !shown.contains("<b>"));
    assert!(
        shown.contains("<span class=\"add\">+&lt;script&gt;evil()&lt;/script&gt;</span>"),
        "{shown}"
    );
    let body = needs::needs_body(&[u], 2_000).into_string();
    assert!(!body.contains("<script>"), "{body}");
    assert!(!body.contains("<img"), "{body}");
    assert!(!body.contains("\"onclick"), "{body}");
    assert!(
        body.contains("&lt;img src=x onerror=alert(1)&gt; &amp; more"),
        "{body}"
    );
    assert!(
        body.contains("data-unit=\"u&quot;&gt;&lt;script&gt;x()&lt;/script&gt;\""),
        "{body}"
    );
    let f = Frame {
        title: "<b>t</b>",
        active: "/needs",
        csrf: "c\"x".into(),
        read_only: false,
        now: 1_795_000_000_000,
        flash: Some((false, "<i>no</i>".into())),
    };
    // The body as its own template made it (escaped there, checked above).
    let page = crate::html::page(&f, maud::PreEscaped(body.clone()));
    assert!(page.starts_with("<!DOCTYPE html>"), "{page}");
    assert!(
        page.contains("<title>&lt;b&gt;t&lt;/b&gt; · XO</title>"),
        "{page}"
    );
    assert!(page.contains("content=\"c&quot;x\""), "{page}");
    assert!(page.contains("&lt;i&gt;no&lt;/i&gt;"), "{page}");
    assert!(
        page.contains("<a href=\"/needs\" class=\"active\">Needs you</a>"),
        "{page}"
    );
    let form =
        crate::html::post_form(&f, "/ui/x\"y", maud::html! {}, "<go>", "danger").into_string();
    assert!(form.contains("action=\"/ui/x&quot;y\""), "{form}");
    assert!(form.contains("&lt;go&gt;</button>"), "{form}");
}

/// The login page names where the token is (a path, in code) and keeps
/// what was typed as text.
#[test]
fn the_login_page_names_the_token_file_and_keeps_typed_text_as_text() {
    let at = maud::html! { code { ".xo/<x>/console.token" } };
    let page = login::login_form(
        "/units/u1",
        &[("message".into(), "</pre><script>x()</script>".into())],
        "",
        &at,
    );
    assert!(
        page.contains("<code>.xo/&lt;x&gt;/console.token</code>"),
        "{page}"
    );
    assert!(!page.contains("<script>"), "{page}");
    assert!(page.contains("name=\"keep.message\""), "{page}");
    assert!(page.contains("name=\"next\" value=\"/units/u1\""), "{page}");
}
