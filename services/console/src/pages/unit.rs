//! A unit's page: its latest report, the steering with its evidence, the
//! report history's charts, and the steering form.

use super::*;

/// One steering on the timeline: when, what, its evidence (the rule, the
/// value observed, the turns and tools), and how many times in a row the
/// same steering was sent (`×N`, turns first to last).
pub(crate) fn steering_item(
    s: &xo_proto::Steering,
    repeats: usize,
    first_turn: u64,
    now: u64,
) -> String {
    let e = &s.evidence;
    let mut evidence = Vec::new();
    if !e.rule.is_empty() {
        evidence.push(format!(
            "<code>{}</code>{}",
            esc(&e.rule),
            if e.observed.is_empty() {
                String::new()
            } else {
                format!(", observed <b>{}</b>", esc(&e.observed))
            }
        ));
    }
    if !e.turns.is_empty() {
        let turns: Vec<String> = e.turns.iter().map(u64::to_string).collect();
        evidence.push(format!("turns {}", esc(&turns.join(", "))));
    }
    if !e.tools.is_empty() {
        evidence.push(format!("tools {}", esc(&e.tools.join(", "))));
    }
    format!(
        "<li class=\"steer {sev}\"><span class=\"when\">turn {turns} · {age}</span> <b>{kind}</b>{times} <span class=\"sev\">{sev}</span> <span class=\"src\">{src}</span><p>{msg}</p>{ev}</li>",
        sev = esc(&s.severity.to_string()),
        turns = if repeats > 1 {
            format!("{first_turn}–{}", s.turn)
        } else {
            s.turn.to_string()
        },
        times = if repeats > 1 {
            format!(" <span class=\"badge repeat\">×{repeats}</span>")
        } else {
            String::new()
        },
        age = age(now, s.at),
        kind = esc(&s.kind.to_string()),
        src = esc(&wire(&s.source)),
        msg = esc(&s.message),
        ev = if evidence.is_empty() {
            String::new()
        } else {
            format!(
                "<p class=\"evidence\">evidence: {}</p>",
                evidence.join(" · ")
            )
        },
    )
}

/// The timeline's items, newest first, a run of the same steering (kind
/// and message) collapsed into one with its count.
/// Each item says what followed it (of a run, its last), read from the
/// unit's report points and whether it was handed to a person: the words
/// of `xo units UNIT`.
pub(crate) fn steering_timeline(
    steering: &[xo_proto::Steering],
    now: u64,
    history: &[xo_proto::control::ReportPoint],
    needs: Option<&xo_proto::NeedsYou>,
) -> String {
    let mut out = String::new();
    let mut i = steering.len();
    while i > 0 {
        let last = &steering[i - 1];
        let mut j = i - 1;
        while j > 0 && steering[j - 1].kind == last.kind && steering[j - 1].message == last.message
        {
            j -= 1;
        }
        let item = steering_item(last, i - j, steering[j].turn, now);
        let then = xo_proto::control::followed(steering, i - 1, history, needs);
        let class = match then {
            xo_proto::control::Followed::Progress(_) => "ok",
            xo_proto::control::Followed::Escalated(_)
            | xo_proto::control::Followed::NoChange(_) => "bad",
            _ => "open",
        };
        out.push_str(item.strip_suffix("</li>").unwrap_or(&item));
        out.push_str(&format!(
            "<p class=\"followed {class}\">then: {}</p></li>",
            esc(&then.to_string())
        ));
        i = j;
    }
    out
}

/// A small line chart (inline SVG, no script): `values` oldest first, the
/// axis from 0 to `max` (0: the largest value), the last value named.
pub(crate) fn chart(title: &str, values: &[f64], max: f64, show: impl Fn(f64) -> String) -> String {
    const W: f64 = 220.0;
    const H: f64 = 48.0;
    let top = if max > 0.0 {
        max
    } else {
        values.iter().cloned().fold(0.0, f64::max).max(1e-9)
    };
    let step = W / (values.len().max(2) - 1) as f64;
    let points: Vec<String> = values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let y = H - (v / top).clamp(0.0, 1.0) * (H - 2.0) - 1.0;
            format!("{:.1},{:.1}", i as f64 * step, y)
        })
        .collect();
    let last = values.last().copied().unwrap_or_default();
    format!(
        "<figure class=\"chart\" data-chart=\"{t}\"><svg viewBox=\"0 0 {W} {H}\" width=\"{W}\" height=\"{H}\" role=\"img\" aria-label=\"{t}\"><polyline fill=\"none\" stroke=\"currentColor\" stroke-width=\"1.5\" points=\"{p}\"/></svg><figcaption>{t}: <b>{v}</b> <small>(max {m})</small></figcaption></figure>",
        t = esc(title),
        p = points.join(" "),
        v = esc(&show(last)),
        m = esc(&show(values.iter().cloned().fold(0.0, f64::max))),
    )
}

pub(crate) async fn unit(
    State(c): State<Shared>,
    Path(unit): Path<String>,
    Query(q): Q,
) -> Response {
    let title = format!("Unit {unit}");
    let f = frame(&c, &title, "/", &q);
    if let Err(e) = xo_proto::validate_token("unit", &unit) {
        return bad_request(&f, &e.to_string());
    }
    let d = match c.call(&ShowUnit { unit: unit.clone() }).await {
        Ok(d) => d,
        Err(e) => return down(&f, &e),
    };
    let n = now();
    let mut body = format!(
        "<div class=\"scroll\"><table id=\"units\" data-live=\"unit\" data-unit=\"{u}\"><thead><tr>{heads}</tr></thead><tbody>{row}</tbody></table></div>",
        u = esc(&unit),
        heads = FLEET_COLUMNS
            .iter()
            .map(|(_, t)| format!("<th>{t}</th>"))
            .collect::<String>(),
        row = unit_row(&d.summary, n)
    );
    if let Some(r) = &d.report {
        let actions: String = r
            .activity
            .recent
            .iter()
            .rev()
            .map(|a| {
                format!(
                    "<li><span class=\"when\">turn {}</span> {} <span class=\"outcome {o}\">{o}</span>{}</li>",
                    a.turn,
                    esc(&match (&a.kind, &a.tool) {
                        (xo_proto::ActionKind::Tool, Some(t)) => t.to_string(),
                        (xo_proto::ActionKind::Tool, None) => "tool".into(),
                        (xo_proto::ActionKind::Message, _) => "message".into(),
                    }),
                    a.error_type
                        .as_deref()
                        .map(|e| format!(" <code>{}</code>", esc(e)))
                        .unwrap_or_default(),
                    o = esc(&wire(&a.outcome)),
                )
            })
            .collect();
        body.push_str(&format!(
            "<section class=\"report\" id=\"latest-report\"><h2>Latest report</h2><p>turn {} · seq {} · step <b>{}</b> — {}</p><p>tokens {} in / {} out · {} turns without progress · ${:.4}{note}</p>{acts}</section>",
            r.time.turn,
            r.time.seq,
            esc(r.activity.step.as_deref().unwrap_or("—")),
            esc(r.activity.summary.as_deref().unwrap_or("")),
            r.equipment.tokens_in,
            r.equipment.tokens_out,
            r.activity.turns_since_progress,
            r.equipment.cost_usd,
            note = r
                .status
                .note
                .as_deref()
                .map(|n| format!(" · its note: “{}”", esc(n)))
                .unwrap_or_default(),
            acts = if actions.is_empty() {
                String::new()
            } else {
                format!("<h3>Recent actions (newest first)</h3><ol class=\"actions\" id=\"recent-actions\">{actions}</ol>")
            },
        ));
    }
    if d.history.len() >= 2 {
        let fill: Vec<f64> = d.history.iter().map(|p| p.context_fill).collect();
        let cost: Vec<f64> = d.history.iter().map(|p| p.cost_usd).collect();
        let tsp: Vec<f64> = d
            .history
            .iter()
            .map(|p| f64::from(p.turns_since_progress))
            .collect();
        let (first, last) = (d.history[0].turn, d.history[d.history.len() - 1].turn);
        body.push_str(&format!(
            "<section class=\"charts\" id=\"history\"><h2>Last {n} reports <small>turns {first}–{last}</small></h2><div class=\"chart-row\">{a}{b}{c}</div></section>",
            n = d.history.len(),
            a = chart("context fill", &fill, 1.0, |v| format!("{:.0}%", v * 100.0)),
            b = chart("cost", &cost, 0.0, |v| format!("${v:.4}")),
            c = chart("turns without progress", &tsp, 0.0, |v| format!("{v:.0}")),
        ));
    }
    body.push_str("<section><h2>Timeline</h2><ol id=\"timeline\" class=\"timeline\" reversed>");
    body.push_str(&steering_timeline(
        &d.recent_steering,
        n,
        &d.history,
        d.summary.needs.as_ref(),
    ));
    body.push_str("</ol>");
    if d.recent_steering.is_empty() {
        body.push_str("<p class=\"empty\">No steering yet.</p>");
    }
    body.push_str("</section>");
    if !f.read_only {
        // A steering typed before a login ended comes back (never sent).
        let kept_message = q
            .get(&format!("{KEEP}message"))
            .map(String::as_str)
            .unwrap_or("");
        let kept_severity = q
            .get(&format!("{KEEP}severity"))
            .map(String::as_str)
            .unwrap_or("warning");
        body.push_str(&format!(
            "<section><h2>Steer</h2><form method=\"post\" action=\"/ui/units/{u}/steer\" id=\"steer-form\" class=\"stack\">\
<input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
{kept_note}<label>Message (sent as <code>[SUPERVISOR]</code> steering on <code>xo.steer.{u}</code>; at most {max} characters)<textarea name=\"message\" rows=\"3\" required>{kept}</textarea></label>\
<label>Severity <select name=\"severity\">{options}</select></label>\
<button type=\"submit\">Send steering</button></form></section>\
<section><h2>Acknowledge</h2><p class=\"summary\">{ack_now}Seen, and in hand: the unit sinks below those of its colour nobody has acknowledged, until the time is up or it gets worse.</p><form method=\"post\" action=\"/ui/units/{u}/ack\" id=\"ack-form\" class=\"stack\">\
<input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
<label>Why (what is being done about it) <input name=\"why\" required maxlength=\"500\"></label>\
<label>For <select name=\"for\"><option value=\"30m\">30 minutes</option><option value=\"2h\">2 hours</option><option value=\"8h\">8 hours</option><option value=\"24h\">a day</option></select></label>\
<button type=\"submit\">Acknowledge</button></form></section>",
            u = esc(&unit),
            csrf = esc(&f.csrf),
            kept = esc(kept_message),
            max = xo_proto::control::MAX_STEERING_CHARS,
            ack_now = d
                .summary
                .ack
                .as_ref()
                .map(|a| format!(
                    "<b id=\"ack-now\">Acknowledged by {} until {}Z: {}.</b> ",
                    esc(&a.by),
                    xo_runtime::clock::hh_mm(a.until),
                    esc(&a.why)
                ))
                .unwrap_or_default(),
            kept_note = if kept_message.is_empty() {
                ""
            } else {
                "<p class=\"flash ok\" id=\"kept-note\">What you typed is back in the form; it has not been sent.</p>"
            },
            options = ["info", "warning", "urgent", "critical"]
                .iter()
                .map(|s| format!(
                    "<option{}>{s}</option>",
                    if *s == kept_severity { " selected" } else { "" }
                ))
                .collect::<String>(),
        ));
    }
    ok_page(&f, &body)
}

pub(crate) async fn ui_steer(
    State(c): State<Shared>,
    Path(unit): Path<String>,
    UiForm(form): UiForm,
) -> Response {
    let to = format!("/units/{}", enc(&unit));
    let get = |k: &str| field(&form, k).unwrap_or_default();
    let (message, severity_text) = (get("message"), get("severity"));
    // Refused (by this check or the XO's): the page again, what was typed
    // back in the form, nothing sent.
    let refused = |why: String| {
        let q = kept_refusal(&form, why);
        let (c, unit) = (c.clone(), unit.clone());
        async move { refused_page(self::unit(State(c), Path(unit), Query(q)).await) }
    };
    let severity: Severity = match serde_json::from_value(Value::String(severity_text.clone())) {
        Ok(s) => s,
        Err(_) => {
            return refused(format!(
                "severity {severity_text:?}: use info, warning, urgent or critical"
            ))
            .await;
        }
    };
    let req = SteerUnit {
        unit: unit.clone(),
        message: message.clone(),
        severity,
        by: crate::auth::who().by(None),
    };
    if let Err(why) = req.check() {
        return refused(why.to_string()).await;
    }
    match c.call(&req).await {
        Ok(s) => back(
            &to,
            Ok(format!(
                "{} steering sent to {} at its turn {}: its agent sees it on its next turn",
                s.severity, s.unit, s.turn
            )),
        ),
        Err(e) => refused(e.message).await,
    }
}

pub(crate) async fn ui_ack(
    State(c): State<Shared>,
    Path(unit): Path<String>,
    UiForm(form): UiForm,
) -> Response {
    let to = format!("/units/{}", enc(&unit));
    let for_ms = match field(&form, "for").filter(|f| !f.is_empty()) {
        None => xo_proto::control::ACK_DEFAULT_MS,
        Some(f) => match parse_ms(&f) {
            Some(ms) => ms,
            None => {
                return back(
                    &to,
                    Err(format!("for {f:?}: a duration such as 30m, 2h or 24h")),
                );
            }
        },
    };
    let req = xo_proto::control::AckUnit {
        unit,
        by: crate::auth::who().by(None),
        why: field(&form, "why").unwrap_or_default().trim().to_string(),
        for_ms,
    };
    if let Err(why) = req.check() {
        return back(&to, Err(why.to_string()));
    }
    let r = c
        .call(&req)
        .await
        .map(|s| match s.ack {
            Some(a) => format!(
                "{} acknowledged until {}Z: {}",
                s.unit,
                xo_runtime::clock::hh_mm(a.until),
                a.why
            ),
            None => format!("{} acknowledged", s.unit),
        })
        .map_err(|e| e.message);
    back(&to, r)
}
