//! The fleet page's tests: its order, filters, badges and role rollups.
use super::*;

/// The fleet table for `units` with the filters and order of `q` (no
/// live view).
fn fleet_body(units: &[UnitSummary], q: &BTreeMap<String, String>, now: u64) -> String {
    fleet_view(units, q, now, |_| None).0.into_string()
}

/// A unit waiting for its provider's usage limit says until when.
#[test]
fn a_unit_at_its_usage_limit_says_until_when() {
    let mut u = unit("limited-1", xo_proto::Health::Green);
    u.ended = true;
    u.waiting_until = Some(1_786_206_068_000);
    let body = fleet_body(&[u], &BTreeMap::new(), 1_000_000);
    assert!(body.contains(">waiting until 16:21Z</span>"), "{body}");
    assert!(
        body.contains("resets at 2026-08-08T16:21:08.000Z"),
        "{body}"
    );
}

/// A unit whose sensor could not read some of its records says how
/// many, beside its state (issue 38).
#[test]
fn a_unit_with_records_not_read_says_how_many() {
    let mut u = unit("odd-1", xo_proto::Health::Green);
    u.unreadable = 3;
    let body = fleet_body(&[u], &BTreeMap::new(), 1_000_000);
    assert!(body.contains(">unreadable: 3 records</span>"), "{body}");
    let whole = fleet_body(
        &[unit("whole-1", xo_proto::Health::Green)],
        &BTreeMap::new(),
        1_000_000,
    );
    assert!(!whole.contains("unreadable"), "{whole}");
}

#[test]
fn the_fleet_is_in_triage_order_sorts_filters_and_flags() {
    use xo_proto::Health::*;
    let now = 1_000_000 + 30_000;
    let mut self_red = unit("hot-2", Green);
    self_red.self_health = Red;
    let mut stale = unit("quiet-4", Green);
    stale.stale = true;
    stale.last_seen = 1;
    let mut steered = unit("Full-5", Amber);
    steered.steering_sent = 60;
    steered.context_fill = 0.93;
    steered.task_id = Some("t-7".into());
    steered.last_steering = Some((xo_proto::AnomalyKind::Context, 1));
    steered.cost_usd = 3.0;
    // Its task ended red minutes ago and it has not reported since:
    // idle, not an alarm.
    let mut done = unit("done-6", Red);
    done.ended = true;
    done.task_id = Some("t-9".into());
    // Red when it went silent: counted stale, as `xo units` calls it.
    let mut gone = unit("gone-7", Red);
    gone.stale = true;
    // Within red: the one looping for 280 turns, steered 4 times, before
    // a blip of 3 turns steered once.
    let mut looper = unit("zz-loop-8", Red);
    looper.steering_sent = 4;
    looper.turns_since_progress = 280;
    let mut blip = unit("aa-blip-9", Red);
    blip.steering_sent = 1;
    blip.turns_since_progress = 3;
    let mut looper2 = looper.clone();
    looper2.unit = "yy-loop-10".into();
    // Acknowledged, it sinks below the reds nobody has acknowledged,
    // its steering count notwithstanding.
    looper.ack = Some(xo_proto::control::Acknowledged {
        by: "ana".into(),
        why: "rebuilding the cache by hand".into(),
        at: 1,
        until: now + 600_000,
        health: Red,
    });
    let units = vec![
        unit("alpha-1", Green),
        stale,
        steered,
        self_red,
        unit("Red-3", Red),
        done,
        gone,
        blip,
        looper,
        looper2,
    ];
    let q = |kv: &[(&str, &str)]| -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    // Red (the XO's or the unit's own; the most steered, then the
    // longest without progress first), then amber, then stale, then the
    // rest, then the idle.
    let body = fleet_body(&units, &q(&[]), now);
    assert_eq!(
        order(&body),
        [
            "yy-loop-10",
            "aa-blip-9",
            "Red-3",
            "hot-2",
            "zz-loop-8",
            "Full-5",
            "gone-7",
            "quiet-4",
            "alpha-1",
            "done-6"
        ]
    );
    assert!(
        body.contains("data-rank=\"4\"") && body.contains(">idle</span>"),
        "{body}"
    );
    assert!(
        body.contains(">acked by ana until ") && body.contains("rebuilding the cache by hand"),
        "{body}"
    );
    assert!(body.contains("title=\"the unit reported itself red\">self: red</span>"));
    // Steered 60 times and still amber: the steering is not working.
    assert!(body.contains("60× <span class=\"badge red\""), "{body}");
    assert!(body.contains(">no effect</span>"));
    assert!(body.contains("<code>t-7</code>"), "the current task");
    // A unit silent for long and steering long ago read as old.
    assert!(
        body.contains("<td class=\"seen\"><small class=\"age old\">17m ago</small>"),
        "{body}"
    );
    assert!(body.contains("context <small class=\"age old\">17m ago</small>"));
    assert!(
        body.contains("<small class=\"age\">30s ago</small>"),
        "a fresh one is not"
    );
    // The badges count by triage bucket and are filter links.
    assert!(
        body.contains("id=\"count-red\" href=\"/?health=red\""),
        "{body}"
    );
    assert!(body.contains("<b>5</b> red</a>"), "{body}");
    assert!(body.contains("<b>1</b> amber</a>") && body.contains("<b>2</b> stale</a>"));
    assert!(body.contains("<b>1</b> idle</a>"));
    let reds = fleet_body(&units, &q(&[("health", "red")]), now);
    assert_eq!(
        order(&reds),
        ["yy-loop-10", "aa-blip-9", "Red-3", "hot-2", "zz-loop-8"]
    );
    let idle = fleet_body(&units, &q(&[("health", "idle")]), now);
    assert_eq!(order(&idle), ["done-6"]);
    assert!(
        reds.contains("class=\"health red on\" id=\"count-red\" href=\"/\""),
        "clicking again clears it"
    );
    // Search is case-insensitive.
    assert_eq!(
        order(&fleet_body(&units, &q(&[("q", "RED")]), now)),
        ["Red-3"]
    );
    assert_eq!(
        order(&fleet_body(&units, &q(&[("q", "full")]), now)),
        ["Full-5"]
    );
    // A header sorts by its column, and again the other way; the
    // filters stay in its link.
    let by_cost = fleet_body(&units, &q(&[("sort", "cost"), ("dir", "desc")]), now);
    assert_eq!(order(&by_cost)[0], "Full-5");
    assert!(by_cost.contains("aria-sort=\"descending\""));
    let by_name = fleet_body(&units, &q(&[("sort", "unit"), ("role", "coder")]), now);
    assert_eq!(
        order(&by_name),
        [
            "Full-5",
            "Red-3",
            "aa-blip-9",
            "alpha-1",
            "done-6",
            "gone-7",
            "hot-2",
            "quiet-4",
            "yy-loop-10",
            "zz-loop-8"
        ]
    );
    assert!(
        by_name.contains("href=\"/?dir=desc&amp;role=coder&amp;sort=unit\""),
        "{by_name}"
    );
    // An unknown column falls back to triage order.
    assert_eq!(
        order(&fleet_body(&units, &q(&[("sort", "bogus")]), now))[0],
        "yy-loop-10"
    );
}
use xo_proto::Health;

#[test]
fn the_fleet_table_filters_and_escapes() {
    let u = |name: &str, role: &str, h: Health| UnitSummary {
        unit: name.into(),
        role: role.into(),
        health: h,
        self_health: h,
        self_note: None,
        stale: false,
        ended: false,
        refused_reports: 0,
        turn: 1,
        seq: 1,
        last_seen: 0,
        task_id: None,
        context_fill: 0.5,
        steering_sent: 0,
        restarts: 0,
        pace: Default::default(),
        turns_since_progress: 2,
        cost_usd: 0.25,
        last_steering: None,
        needs: None,
        waiting_until: None,
        unreadable: 0,
        ack: None,
    };
    let units = vec![
        u("a-1", "coder", Health::Green),
        u("b-1", "<tester>", Health::Red),
    ];
    let mut q = BTreeMap::new();
    let all = fleet_body(&units, &q, 0);
    assert!(all.contains("id=\"unit-a-1\"") && all.contains("id=\"unit-b-1\""));
    assert!(all.contains("&lt;tester&gt;") && !all.contains("<tester>"));
    q.insert("health".into(), "red".into());
    let red = fleet_body(&units, &q, 0);
    assert!(!red.contains("id=\"unit-a-1\"") && red.contains("id=\"unit-b-1\""));
}

/// Issue 41, item 2: the fleet rolls up by role — its units, how many in
/// each bucket, what they spent — each role linking to its rows alone,
/// the table open only when there is more than one role to tell apart.
#[test]
fn the_fleet_rolls_up_by_role() {
    let mk = |name: &str, role: &str, health: xo_proto::Health, cost: f64| {
        let mut u = unit(name, health);
        u.role = role.into();
        u.cost_usd = cost;
        u
    };
    let units = [
        mk("c1", "coder", xo_proto::Health::Red, 1.5),
        mk("c2", "coder", xo_proto::Health::Green, 0.25),
        mk("c3", "coder", xo_proto::Health::Green, 0.25),
        mk("r1", "reviewer", xo_proto::Health::Amber, 2.0),
    ];
    let body = fleet_body(&units, &BTreeMap::new(), 1_000_000);
    let roles = body
        .split("<table id=\"roles\">")
        .nth(1)
        .and_then(|t| t.split("</table>").next())
        .unwrap_or_else(|| panic!("no role table: {body}"));
    let row = |r: &str| {
        roles
            .split(&format!("<tr data-role=\"{r}\">"))
            .nth(1)
            .and_then(|t| t.split("</tr>").next())
            .unwrap_or_else(|| panic!("{r}: {roles}"))
            .to_string()
    };
    let coder = row("coder");
    assert!(
        coder.contains("<a href=\"/?role=coder\">coder</a>"),
        "{coder}"
    );
    // units, red, amber, stale, green, idle, cost.
    let nums: Vec<&str> = coder
        .split("<td class=\"num")
        .skip(1)
        .map(|c| c.split('>').nth(1).unwrap().split('<').next().unwrap())
        .collect();
    assert_eq!(nums, ["3", "1", "0", "0", "2", "0", "$2.00"], "{coder}");
    assert!(row("reviewer").contains("<td class=\"num amber\">1</td>"));
    assert!(body.contains("<details class=\"roles\" open>"), "{body}");
    let one = fleet_body(&units[..1], &BTreeMap::new(), 1_000_000);
    assert!(
        one.contains("<details class=\"roles\"><summary>By role (1)"),
        "{one}"
    );
}

/// A fleet larger than a page is shown a page of rows at a time, in the
/// same order; the counts stay the whole fleet's; another filter or order
/// starts again at page 1; a page past the end shows the last.
#[test]
fn a_large_fleet_is_paged_and_its_counts_stay_whole() {
    use xo_proto::Health::*;
    let units: Vec<UnitSummary> = (0..250)
        .map(|i| unit(&format!("u{i:03}"), if i % 50 == 7 { Red } else { Green }))
        .collect();
    let ids = |body: &str| -> Vec<String> {
        body.split("<tr id=\"unit-")
            .skip(1)
            .map(|r| r.split('"').next().unwrap().to_string())
            .collect()
    };
    let q = |kv: &[(&str, &str)]| -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    let first = fleet_body(&units, &q(&[]), 1_000_000);
    let rows = ids(&first);
    assert_eq!(rows.len(), PER_PAGE, "{first}");
    // Triage order across pages: the five red ones lead page 1.
    assert_eq!(&rows[..5], ["u007", "u057", "u107", "u157", "u207"]);
    assert!(first.contains("rows 1–100 of 250 · page 1 of 3"), "{first}");
    assert!(first.contains("href=\"/?page=2\" rel=\"next\""), "{first}");
    assert!(!first.contains("rel=\"prev\""), "{first}");
    assert!(first.contains("<b>5</b> red"), "{first}");
    assert!(first.contains("<b>245</b> green"), "{first}");
    assert!(
        first.contains("<span id=\"unit-count\">250</span>"),
        "{first}"
    );

    let second = fleet_body(&units, &q(&[("page", "2")]), 1_000_000);
    let rows2 = ids(&second);
    assert_eq!(rows2.len(), PER_PAGE);
    assert!(rows2.iter().all(|r| !rows.contains(r)), "pages overlap");
    assert!(
        second.contains("rows 101–200 of 250 · page 2 of 3"),
        "{second}"
    );
    assert!(second.contains("href=\"/\" rel=\"prev\""), "{second}");
    assert!(second.contains("data-page=\"2\""), "{second}");
    // The filters' and headers' links start again at page 1.
    assert!(!second.contains("page=2&amp;health"), "{second}");
    assert!(second.contains("href=\"/?sort=unit\""), "{second}");

    let past = fleet_body(&units, &q(&[("page", "99")]), 1_000_000);
    assert_eq!(ids(&past).len(), 50);
    assert!(past.contains("rows 201–250 of 250 · page 3 of 3"), "{past}");
    let junk = fleet_body(&units, &q(&[("page", "x")]), 1_000_000);
    assert_eq!(ids(&junk), rows, "an unreadable page is the first");

    // Another page length, kept by the links; bounded.
    let ten = fleet_body(&units, &q(&[("per", "10"), ("page", "3")]), 1_000_000);
    assert_eq!(ids(&ten).len(), 10);
    assert!(ten.contains("rows 21–30 of 250 · page 3 of 25"), "{ten}");
    assert!(
        ten.contains("href=\"/?page=4&amp;per=10\" rel=\"next\""),
        "{ten}"
    );
    assert!(ten.contains("name=\"per\" value=\"10\""), "{ten}");
    let huge = fleet_body(&units, &q(&[("per", "1000000")]), 1_000_000);
    assert_eq!(ids(&huge).len(), 250);
    // Filtered: the pages are of the rows shown.
    let red = fleet_body(&units, &q(&[("health", "red")]), 1_000_000);
    assert_eq!(ids(&red).len(), 5);
    assert!(!red.contains("id=\"pages\""), "{red}");
}
