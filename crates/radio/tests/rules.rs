//! Every rule pinned at and around its threshold, plus cooldowns and health.

use xo_proto::{Action, AnomalyKind, Assessor, Health, Outcome, Pace, SaluteReport, Severity};
use xo_radio::rules::count_sentences;
use xo_radio::{Doctrine, Microcosm, Radio, RoleProfile, Roles};

fn report(turn: u64) -> SaluteReport {
    SaluteReport::new("u1", "coder", turn, turn)
}

fn with_actions(turn: u64, actions: Vec<Action>) -> SaluteReport {
    let mut r = report(turn);
    r.activity.recent = actions;
    r
}

fn kinds(radio: &mut Radio, r: &SaluteReport) -> Vec<AnomalyKind> {
    radio.check(r).steering.iter().map(|s| s.kind).collect()
}

fn fresh(r: &SaluteReport) -> Vec<AnomalyKind> {
    kinds(&mut Radio::default(), r)
}

fn err(tool: &str, args: &str, et: &str, turn: u64) -> Action {
    Action::tool(tool, args, Outcome::Error, turn).with_error(et)
}

fn ok(tool: &str, args: &str, out: &str, turn: u64) -> Action {
    Action::tool(tool, args, Outcome::Ok, turn).with_output(out)
}

#[test]
fn normal_operation_steers_nothing_and_is_green() {
    let mut radio = Radio::default();
    for turn in 1..=30 {
        let mut r = with_actions(
            turn,
            vec![
                ok("read", &format!("f{turn}"), &format!("o{turn}"), turn),
                Action::message(Some(&format!("m{turn}")), Outcome::Ok, turn),
            ],
        );
        r.activity.turns_since_progress = (turn % 3) as u32;
        r.size.context_fill = 0.5;
        let a = radio.check(&r);
        assert!(a.steering.is_empty(), "turn {turn}: {:?}", a.steering);
        assert_eq!(a.health, Health::Green);
        assert!(!a.corrected);
    }
}

#[test]
fn stall_fires_only_above_the_maximum() {
    let max = Doctrine::default().max_turns_without_progress;
    let mut r = report(10);
    r.activity.turns_since_progress = max;
    assert!(fresh(&r).is_empty(), "at the maximum is not a stall");
    r.activity.turns_since_progress = max + 1;
    r.activity.task_id = Some("T-9".into());
    r.activity.step = Some("compile".into());
    let a = Radio::default().check(&r);
    assert_eq!(a.steering.len(), 1);
    let s = &a.steering[0];
    assert_eq!(
        (s.kind, s.severity),
        (AnomalyKind::Stall, Severity::Warning)
    );
    assert!(
        s.message.contains("T-9") && s.message.contains("compile"),
        "{}",
        s.message
    );
    assert_eq!(s.evidence.rule, format!("turns_since_progress > {max}"));
    r.activity.turns_since_progress = 2 * max + 1;
    assert_eq!(
        Radio::default().check(&r).steering[0].severity,
        Severity::Urgent
    );
}

#[test]
fn loop_same_error_three_times_but_not_two() {
    let two = with_actions(
        3,
        vec![
            ok("ls", "x", "o", 1),
            err("sh", "a", "enoent", 2),
            err("sh", "a", "enoent", 3),
        ],
    );
    assert!(fresh(&two).is_empty());
    let three = with_actions(
        4,
        vec![
            err("sh", "a", "enoent", 2),
            err("sh", "a", "enoent", 3),
            err("sh", "a", "enoent", 4),
        ],
    );
    let a = Radio::default().check(&three);
    assert_eq!(a.steering.len(), 1);
    assert_eq!(a.steering[0].kind, AnomalyKind::Loop);
    assert_eq!(a.steering[0].evidence.turns, vec![2, 3, 4]);
    assert!(a.steering[0].message.contains("enoent"));
}

#[test]
fn loop_is_the_same_tool_and_error_type_whatever_the_arguments() {
    // Seed 000: `make a`, `make b`, `make c` all failing with build_failed.
    let args = with_actions(
        4,
        vec![
            err("make", "a", "build_failed", 2),
            err("make", "b", "build_failed", 3),
            err("make", "c", "build_failed", 4),
        ],
    );
    let a = Radio::default().check(&args);
    assert_eq!(a.steering.len(), 1, "{:?}", a.steering);
    assert_eq!(a.steering[0].kind, AnomalyKind::Loop);
    assert!(
        a.steering[0].message.contains("make failed 3 times")
            && a.steering[0].message.contains("build_failed"),
        "{}",
        a.steering[0].message
    );
    assert_eq!(a.steering[0].evidence.turns, [2, 3, 4]);
    // Two are not yet a loop; another tool between breaks the run.
    let two = with_actions(
        4,
        vec![
            err("make", "b", "build_failed", 3),
            err("make", "c", "build_failed", 4),
        ],
    );
    assert!(!fresh(&two).contains(&AnomalyKind::Loop));
    let broken = with_actions(
        5,
        vec![
            err("make", "a", "build_failed", 2),
            err("make", "b", "build_failed", 3),
            ok("read", "x", "o", 4),
            err("make", "c", "build_failed", 5),
        ],
    );
    assert!(!fresh(&broken).contains(&AnomalyKind::Loop));
    let types = with_actions(
        4,
        vec![
            err("sh", "a", "e1", 2),
            err("sh", "a", "e2", 3),
            err("sh", "a", "e1", 4),
        ],
    );
    assert!(!fresh(&types).contains(&AnomalyKind::Loop));
}

#[test]
fn loop_same_output_three_times_but_not_two() {
    // Seed 000: 3+ identical calls. Identical successful calls (same
    // arguments, same output: not polling) fire at 3 like failing ones.
    let two: Vec<Action> = (1..=2).map(|t| ok("curl", "u", "same", t)).collect();
    assert!(fresh(&with_actions(2, two)).is_empty());
    let three: Vec<Action> = (1..=3).map(|t| ok("curl", "u", "same", t)).collect();
    assert_eq!(fresh(&with_actions(3, three)), vec![AnomalyKind::Loop]);
    // Another output in between breaks the run.
    let broken = vec![
        ok("curl", "u", "same", 1),
        ok("curl", "u", "other", 2),
        ok("curl", "u", "same", 3),
    ];
    assert!(fresh(&with_actions(3, broken)).is_empty());
}

#[test]
fn polling_with_a_changing_output_is_not_a_loop() {
    let polls: Vec<Action> = (1..=12)
        .map(|t| ok("status", "job-1", &format!("progress {t}"), t))
        .collect();
    assert!(fresh(&with_actions(12, polls)).is_empty());
}

#[test]
fn exempt_tools_never_loop_or_cascade() {
    let mut roles = Roles::default();
    let mut p = RoleProfile::default();
    p.doctrine.exempt_tools = vec!["wait".into()];
    roles.by_name.insert("coder".into(), p);
    let mut radio = Radio::new(roles);
    let waits: Vec<Action> = (1..=6).map(|t| ok("wait", "5s", "same", t)).collect();
    assert!(kinds(&mut radio, &with_actions(6, waits.clone())).is_empty());
    let mut other = with_actions(7, waits);
    other.unit.role = "reviewer".into();
    other.unit.unit = "u2".into();
    assert_eq!(
        kinds(&mut radio, &other),
        vec![AnomalyKind::Loop],
        "other roles are not exempt"
    );
}

#[test]
fn oscillation_over_four_failures() {
    let three = with_actions(
        3,
        vec![
            err("a", "1", "x", 1),
            err("b", "1", "y", 2),
            err("a", "1", "x", 3),
        ],
    );
    assert!(fresh(&three).is_empty());
    let four = with_actions(
        4,
        vec![
            err("a", "1", "x", 1),
            err("b", "1", "y", 2),
            err("a", "1", "x", 3),
            err("b", "1", "y", 4),
        ],
    );
    let a = Radio::default().check(&four);
    assert_eq!(
        a.steering.iter().map(|s| s.kind).collect::<Vec<_>>(),
        vec![AnomalyKind::Oscillation]
    );
    assert!(a.steering[0].message.contains("a and b"));
    let one_ok = with_actions(
        4,
        vec![
            err("a", "1", "x", 1),
            ok("b", "1", "y", 2),
            err("a", "1", "x", 3),
            err("b", "1", "y", 4),
        ],
    );
    assert!(!fresh(&one_ok).contains(&AnomalyKind::Oscillation));
}

#[test]
fn oscillation_over_six_repeating_observations() {
    let obs = |n: u64| -> Vec<Action> {
        (1..=n)
            .map(|t| {
                if t % 2 == 1 {
                    ok("a", "1", "oa", t)
                } else {
                    ok("b", "1", "ob", t)
                }
            })
            .collect()
    };
    assert!(fresh(&with_actions(5, obs(5))).is_empty());
    assert_eq!(
        fresh(&with_actions(6, obs(6))),
        vec![AnomalyKind::Oscillation]
    );
    let mut changing = obs(6);
    changing[4] = ok("a", "1", "new", 5);
    assert!(
        fresh(&with_actions(6, changing)).is_empty(),
        "a changing observation is progress"
    );
}

#[test]
fn cascade_three_different_tools_within_five() {
    let two = with_actions(
        5,
        vec![
            err("a", "1", "x", 1),
            err("b", "1", "x", 2),
            ok("c", "1", "o", 3),
        ],
    );
    assert!(fresh(&two).is_empty());
    let three = with_actions(
        5,
        vec![
            err("a", "1", "x", 1),
            ok("d", "1", "o", 2),
            err("b", "1", "x", 3),
            err("c", "1", "x", 4),
            ok("e", "1", "o", 5),
        ],
    );
    let a = Radio::default().check(&three);
    assert_eq!(
        a.steering.iter().map(|s| s.kind).collect::<Vec<_>>(),
        vec![AnomalyKind::Cascade]
    );
    assert!(a.steering[0].message.contains("working directory"));
    assert_eq!(a.steering[0].evidence.tools, vec!["a", "b", "c"]);
    // The evidence, not only the count: the latest failure as it was run
    // and what it got back, when the report carries them.
    assert!(
        a.steering[0].message.contains(" The latest: c."),
        "{}",
        a.steering[0].message
    );
    let mut said = three.clone();
    said.activity.recent[3] = err("c", "1", "x", 4).with_evidence(
        Some("python t.py"),
        Some("ModuleNotFoundError: No module named 'numpy'"),
    );
    let a = Radio::default().check(&said);
    assert!(
        a.steering[0].message.contains(
            " The latest: `python t.py`: \"ModuleNotFoundError: No module named 'numpy'\"."
        ),
        "{}",
        a.steering[0].message
    );
    let spread = with_actions(
        6,
        vec![
            err("a", "1", "x", 1),
            ok("d", "1", "o", 2),
            ok("e", "2", "o", 3),
            err("b", "1", "x", 4),
            err("c", "1", "x", 5),
            ok("f", "1", "o", 6),
        ],
    );
    assert!(
        fresh(&spread).is_empty(),
        "the first failure is outside the last five"
    );
}

#[test]
fn monologue_three_identical_messages_with_no_action_between() {
    let m = |t| Action::message(Some("same"), Outcome::Ok, t);
    assert!(fresh(&with_actions(2, vec![m(1), m(2)])).is_empty());
    assert_eq!(
        fresh(&with_actions(3, vec![m(1), m(2), m(3)])),
        vec![AnomalyKind::Monologue]
    );
    let broken = with_actions(3, vec![m(1), ok("ls", "1", "o", 2), m(3), m(4)]);
    assert!(
        fresh(&broken).is_empty(),
        "an action between breaks the run"
    );
}

#[test]
fn empty_replies_three_in_a_row() {
    let e = |t| Action::message(None, Outcome::Empty, t);
    assert!(fresh(&with_actions(2, vec![e(1), e(2)])).is_empty());
    assert_eq!(
        fresh(&with_actions(3, vec![e(1), e(2), e(3)])),
        vec![AnomalyKind::Empty]
    );
}

#[test]
fn context_warning_above_080_urgent_above_090() {
    let at = |fill: f64| {
        let mut r = report(1);
        r.size.context_fill = fill;
        Radio::default()
            .check(&r)
            .steering
            .first()
            .map(|s| (s.kind, s.severity))
    };
    assert_eq!(at(0.80), None);
    assert_eq!(at(0.81), Some((AnomalyKind::Context, Severity::Warning)));
    assert_eq!(at(0.90), Some((AnomalyKind::Context, Severity::Warning)));
    assert_eq!(at(0.91), Some((AnomalyKind::Context, Severity::Urgent)));
    let mut r = report(1);
    r.size.context_tokens = 95;
    r.size.context_limit = 100;
    assert_eq!(
        Radio::default().check(&r).steering[0].severity,
        Severity::Urgent,
        "fill from tokens"
    );
}

#[test]
fn repeated_condensation_without_progress() {
    let mut radio = Radio::default();
    let mut r = report(1);
    r.size.condensations = 1;
    assert!(kinds(&mut radio, &r).is_empty());
    let mut r = report(2);
    r.size.condensations = 2;
    r.activity.turns_since_progress = 1;
    assert!(
        kinds(&mut radio, &r).is_empty(),
        "one condensation since progress"
    );
    let mut r = report(3);
    r.size.condensations = 3;
    r.activity.turns_since_progress = 2;
    assert_eq!(kinds(&mut radio, &r), vec![AnomalyKind::Context]);
}

#[test]
fn pace_contingent_quotes_the_role_plan_and_emergency_is_critical() {
    let mut roles = Roles::default();
    let mut p = RoleProfile::default();
    p.pace_plan.contingent.description = "hand the task to the reviewer role".into();
    roles.by_name.insert("coder".into(), p);
    let mut radio = Radio::new(roles);
    let mut r = report(1);
    r.unit.pace = Pace::Alternate;
    assert!(kinds(&mut radio, &r).is_empty());
    let mut r = report(2);
    r.unit.pace = Pace::Contingent;
    let a = radio.check(&r);
    assert_eq!(a.steering[0].kind, AnomalyKind::Pace);
    assert_eq!(a.steering[0].severity, Severity::Warning);
    assert!(
        a.steering[0]
            .message
            .contains("hand the task to the reviewer role")
    );
    let mut r = report(3);
    r.unit.pace = Pace::Emergency;
    let a = radio.check(&r);
    assert_eq!(a.steering[0].severity, Severity::Critical);
    assert!(a.steering[0].message.contains("stop"));
    assert_eq!(a.health, Health::Red);
}

#[test]
fn cooldown_holds_the_same_kind_for_three_turns_then_fires_again() {
    let mut radio = Radio::default();
    let stalled = |turn| {
        let mut r = report(turn);
        r.activity.turns_since_progress = 6;
        r
    };
    assert_eq!(kinds(&mut radio, &stalled(10)), vec![AnomalyKind::Stall]);
    for turn in [11, 12] {
        let a = radio.check(&stalled(turn));
        assert!(a.steering.is_empty(), "turn {turn} is in cooldown");
        assert_eq!(a.suppressed, vec![AnomalyKind::Stall]);
        assert_eq!(
            a.health,
            Health::Amber,
            "a suppressed anomaly still counts for health"
        );
    }
    assert_eq!(kinds(&mut radio, &stalled(13)), vec![AnomalyKind::Stall]);
}

#[test]
fn cooldowns_are_per_kind_and_escalation_passes() {
    let mut radio = Radio::default();
    let mut r = report(1);
    r.activity.turns_since_progress = 6;
    assert_eq!(kinds(&mut radio, &r), vec![AnomalyKind::Stall]);
    let mut r = report(2);
    r.activity.turns_since_progress = 7;
    r.size.context_fill = 0.85;
    assert_eq!(
        kinds(&mut radio, &r),
        vec![AnomalyKind::Context],
        "different kinds cool down apart"
    );
    let mut r = report(3);
    r.size.context_fill = 0.95;
    let a = radio.check(&r);
    assert_eq!(a.steering.len(), 1, "urgent passes a warning's cooldown");
    assert_eq!(a.steering[0].severity, Severity::Urgent);
}

#[test]
fn emergency_is_never_under_cooldown() {
    let mut radio = Radio::default();
    for turn in 1..=4 {
        let mut r = report(turn);
        r.unit.pace = Pace::Emergency;
        assert_eq!(
            kinds(&mut radio, &r),
            vec![AnomalyKind::Pace],
            "turn {turn}"
        );
    }
}

#[test]
fn cooldown_length_comes_from_the_role() {
    let mut roles = Roles::default();
    roles.default.doctrine.cooldown_turns = 1;
    let mut radio = Radio::new(roles);
    for turn in 1..=3 {
        let mut r = report(turn);
        r.activity.turns_since_progress = 9;
        assert_eq!(kinds(&mut radio, &r), vec![AnomalyKind::Stall]);
    }
}

#[test]
fn duplicate_and_old_seqs_are_ignored() {
    let mut radio = Radio::default();
    let mut r = report(5);
    r.activity.turns_since_progress = 9;
    assert_eq!(radio.check(&r).steering.len(), 1);
    let a = radio.check(&r);
    assert!(a.duplicate && a.steering.is_empty());
    let mut old = r.clone();
    old.time.seq = 4;
    assert!(radio.check(&old).duplicate);
}

#[test]
fn health_is_corrected_when_self_assessment_differs() {
    let mut r = report(1);
    r.size.context_fill = 0.95;
    r.status.health = Health::Green;
    let a = Radio::default().check(&r);
    assert_eq!(a.health, Health::Red);
    assert!(a.corrected);
    r.status.health = Health::Red;
    assert!(!Radio::default().check(&r).corrected);
}

#[test]
fn every_message_is_tagged_and_at_most_three_sentences() {
    let mut r = with_actions(
        5,
        vec![
            err("a", "1", "x", 1),
            err("b", "1", "x", 2),
            err("c", "1", "x", 3),
            err("c", "1", "x", 4),
            err("c", "1", "x", 5),
        ],
    );
    r.activity.turns_since_progress = 20;
    r.activity.task_id = Some("T-1. Extra. Sentences. Here".into());
    r.size.context_fill = 0.95;
    r.unit.pace = Pace::Contingent;
    let a = Radio::default().check(&r);
    assert!(a.steering.len() >= 5, "{:?}", a.steering);
    for s in &a.steering {
        assert!(s.message.starts_with("[SUPERVISOR] "), "{}", s.message);
        let n = count_sentences(&s.message);
        assert!((1..=3).contains(&n), "{n} sentences: {}", s.message);
    }
}

#[test]
fn microcosm_updates_its_own_report() {
    let mut m = Microcosm::new(RoleProfile::default());
    let mut r = report(1);
    r.size.context_fill = 0.85;
    let s = m.turn(&mut r);
    assert_eq!(s.len(), 1);
    assert_eq!(r.status.health, Health::Amber);
    assert_eq!(r.status.assessed_by, Assessor::Xo);
}

#[test]
fn stale_steering_names_the_silence() {
    let s = Radio::stale("u9", 31_000, 30_000, 4, 1000);
    assert_eq!(s.kind, AnomalyKind::Stale);
    assert!(s.message.starts_with("[SUPERVISOR]") && s.message.contains("31 s"));
    assert!(count_sentences(&s.message) <= 3);
}

#[test]
fn provider_outages_are_not_loops_and_get_their_own_advice() {
    // A rate-limited agent retrying the same call: no loop, no cascade.
    let limited = with_actions(
        5,
        vec![
            err("bash", "a", "provider_rate_limit", 2),
            err("edit", "b", "provider_overloaded", 3),
            err("read", "c", "provider_error", 4),
            err("bash", "a", "provider_rate_limit", 5),
        ],
    );
    let a = Radio::default().check(&limited);
    let k: Vec<AnomalyKind> = a.steering.iter().map(|s| s.kind).collect();
    assert_eq!(k, [AnomalyKind::Provider]);
    assert!(a.steering[0].message.contains("provider_rate_limit"));
    assert!(a.steering[0].message.contains("retry the same step"));
    // One provider error at the end is not yet an outage; the same calls
    // failing on their own are a loop as before.
    let once = with_actions(
        3,
        vec![
            ok("bash", "a", "o", 2),
            err("bash", "a", "provider_error", 3),
        ],
    );
    assert!(fresh(&once).is_empty());
    let own = with_actions(
        4,
        vec![
            err("bash", "a", "exit_1", 2),
            err("bash", "a", "exit_1", 3),
            err("bash", "a", "exit_1", 4),
        ],
    );
    assert_eq!(fresh(&own), [AnomalyKind::Loop]);
}

#[test]
fn a_rule_switched_off_for_a_role_steers_nothing() {
    let mut r = report(10);
    r.activity.turns_since_progress = 20;
    let on = RoleProfile::default();
    let mut off = RoleProfile::default();
    off.doctrine.disabled_rules = vec![AnomalyKind::Stall];
    let a = xo_radio::check_unit(&mut Default::default(), &on, &r);
    assert!(a.steering.iter().any(|s| s.kind == AnomalyKind::Stall));
    assert_ne!(a.health, Health::Green);
    let b = xo_radio::check_unit(&mut Default::default(), &off, &r);
    assert!(
        b.steering.iter().all(|s| s.kind != AnomalyKind::Stall),
        "{:?}",
        b.steering
    );
    assert_eq!(b.health, Health::Green);
}

/// A step quoted from the report with full stops of its own never pushes
/// the stall's advice out of the message.
#[test]
fn steering_keeps_its_advice_whatever_the_step_says() {
    let mut r = report(10);
    r.activity.turns_since_progress = 20;
    r.activity.task_id = Some("T-1".into());
    r.activity.step = Some("Run the tests. Fix the parser. Run them again. Commit.".into());
    let mut radio = Radio::new(Roles::default());
    let a = radio.check(&r);
    let stall = a
        .steering
        .iter()
        .find(|s| s.kind == AnomalyKind::Stall)
        .expect("a stall");
    assert!(
        stall
            .message
            .contains("Reassess: take a different approach"),
        "{}",
        stall.message
    );
    assert!(
        stall.message.starts_with("[SUPERVISOR] Stall")
            || stall.message.contains("Stall: no progress"),
        "{}",
        stall.message
    );
}

#[test]
fn the_limiter_keeps_the_first_sentences_and_the_last() {
    use xo_radio::rules::limit_sentences;
    assert_eq!(limit_sentences("A. B. C. D. Advice.", 3), "A. B. Advice.");
    assert_eq!(limit_sentences("A. B. Advice", 3), "A. B. Advice");
    assert_eq!(
        limit_sentences("A. B. C. Advice without a stop", 3),
        "A. B. Advice without a stop"
    );
    assert_eq!(limit_sentences("Only advice.", 1), "Only advice.");
    assert_eq!(limit_sentences("A. B. Advice.", 1), "Advice.");
}

#[test]
fn progress_between_reports_resets_the_condensation_baseline() {
    // Reports every 3 turns; the agent made progress at turn 5, between
    // the reports of turns 3 and 6, so turn 6 shows 1 turn since progress.
    let mut radio = Radio::default();
    let mut r = report(3);
    r.activity.turns_since_progress = 0;
    assert!(kinds(&mut radio, &r).is_empty());
    let mut r = report(6);
    r.size.condensations = 2;
    r.activity.turns_since_progress = 1;
    assert!(
        kinds(&mut radio, &r).is_empty(),
        "the condensations came before the progress at turn 5"
    );
    // No progress since: turn 9 shows 4 turns without, two more condensations.
    let mut r = report(9);
    r.size.condensations = 4;
    r.activity.turns_since_progress = 4;
    assert_eq!(kinds(&mut radio, &r), vec![AnomalyKind::Context]);
}

#[test]
fn a_restarted_unit_is_told_from_a_duplicate_by_its_epoch() {
    let mut radio = Radio::default();
    let at = |turn: u64, epoch: u64| {
        let mut r = with_actions(
            turn,
            vec![
                err("build", "x", "compile_error", turn),
                err("build", "x", "compile_error", turn),
                err("build", "x", "compile_error", turn),
            ],
        );
        r.time.epoch = epoch;
        r
    };
    let first = radio.check(&at(5, 100));
    assert!(!first.duplicate && !first.restarted);
    assert_eq!(first.steering.len(), 1, "the loop is steered");
    assert!(radio.check(&at(5, 100)).duplicate, "the same seq again");
    // The process restarted: seq 2 in a higher epoch is new, and the
    // restarted agent is steered again (its cooldowns start over).
    let again = radio.check(&at(2, 200));
    assert!(!again.duplicate && again.restarted);
    assert_eq!(again.steering.len(), 1);
    // A late report of the old life is a duplicate.
    assert!(radio.check(&at(9, 100)).duplicate);
    assert!(!radio.check(&at(3, 200)).duplicate);
}

#[test]
fn a_restart_with_its_clock_behind_is_a_restart_and_far_behind_is_refused() {
    use xo_radio::MAX_CLOCK_SKEW_MS;
    let mut radio = Radio::default();
    let at = |turn: u64, epoch: u64| {
        let mut r = report(turn);
        r.time.epoch = epoch;
        r
    };
    let start = 1_780_000_000_000;
    for turn in 1..=5 {
        assert!(!radio.check(&at(turn, start)).duplicate);
    }
    // Restarted on a host whose clock is 5 s behind: its epoch is lower,
    // and it is heard (it once was ignored for good, its heartbeats
    // keeping it green).
    let behind = start - 5_000;
    let a = radio.check(&at(1, behind));
    assert!(!a.duplicate && a.restarted && !a.refused_epoch, "{a:?}");
    assert!(!radio.check(&at(2, behind)).duplicate);
    // A late report of the life before is old news, not a restart back.
    let late = radio.check(&at(6, start));
    assert!(late.duplicate && late.refused_epoch && !late.restarted);
    assert!(!radio.check(&at(3, behind)).duplicate);
    // Further behind than the skew allows: refused, and said to be for
    // its epoch (not a seq seen again).
    let far = radio.check(&at(1, behind - MAX_CLOCK_SKEW_MS - 1));
    assert!(far.duplicate && far.refused_epoch, "{far:?}");
    let again = radio.check(&at(3, behind));
    assert!(
        again.duplicate && !again.refused_epoch,
        "the same seq again"
    );
}

#[test]
fn an_epoch_from_the_future_is_told_by_the_wall_clock() {
    use xo_radio::{MAX_EPOCH_AHEAD_MS, epoch_ahead};
    let now = 1_780_000_000_000;
    assert!(!epoch_ahead(now, now));
    // A supervisor ten minutes behind its units hears them.
    assert!(!epoch_ahead(now + 10 * 60_000, now));
    assert!(!epoch_ahead(now + MAX_EPOCH_AHEAD_MS, now));
    assert!(epoch_ahead(now + MAX_EPOCH_AHEAD_MS + 1, now));
    assert!(epoch_ahead(u64::MAX, now));
}

#[test]
fn an_ended_session_is_assessed_but_never_steered() {
    let max = Doctrine::default().max_turns_without_progress;
    let mut r = report(20);
    r.activity.turns_since_progress = max + 1;
    r.status.ended = true;
    let mut radio = Radio::default();
    let a = radio.check(&r);
    assert!(a.steering.is_empty(), "{:?}", a.steering);
    assert_eq!(a.health, Health::Amber, "the finding is in its health");
    // It goes on: steered as any other, with no cooldown left by the end.
    let mut r = report(21);
    r.activity.turns_since_progress = max + 2;
    assert_eq!(kinds(&mut radio, &r), vec![AnomalyKind::Stall]);
}

#[test]
fn an_anomaly_the_unit_steered_itself_is_under_cooldown_at_the_xo() {
    let stalled = |turn| {
        let mut r = report(turn);
        r.activity.turns_since_progress = 6;
        r
    };
    // The runner's own check gave the stall at turn 9; its report at turn 10
    // says so: the XO does not steer it again until the cooldown is over.
    let mut radio = Radio::default();
    let mut r = stalled(10);
    r.status.self_steered = vec![xo_proto::SelfSteered {
        kind: AnomalyKind::Stall,
        severity: Severity::Warning,
        turn: 9,
    }];
    let a = radio.check(&r);
    assert!(a.steering.is_empty(), "{:?}", a.steering);
    assert_eq!(a.suppressed, vec![AnomalyKind::Stall]);
    assert_eq!(
        a.health,
        Health::Amber,
        "the anomaly still counts for health"
    );
    assert!(radio.check(&stalled(11)).steering.is_empty());
    assert_eq!(kinds(&mut radio, &stalled(12)), vec![AnomalyKind::Stall]);
    // Without the line, the XO steers it.
    assert_eq!(fresh(&stalled(10)), vec![AnomalyKind::Stall]);
    // Another kind given is no cover; a turn ahead of the report is ignored.
    let mut other = stalled(10);
    other.status.self_steered = vec![
        xo_proto::SelfSteered {
            kind: AnomalyKind::Loop,
            severity: Severity::Warning,
            turn: 9,
        },
        xo_proto::SelfSteered {
            kind: AnomalyKind::Stall,
            severity: Severity::Warning,
            turn: 50,
        },
    ];
    assert_eq!(fresh(&other), vec![AnomalyKind::Stall]);
}

/// Issue 37, item 2: a 660-turn session once got 87 stall steerings, one
/// every ~3 turns. One stretch (the turns since the last progress) now
/// gets the rule's steering, a second notice, a last one that says a person
/// was asked, and nothing more; the unit needs you until it moves.
#[test]
fn a_long_stretch_is_steered_three_times_then_the_unit_needs_you_until_it_moves() {
    let mut radio = Radio::default();
    let stalled = |turn: u64, since: u64| {
        let mut r = report(turn);
        r.activity.turns_since_progress = since as u32;
        r.activity.task_id = Some("T-1".into());
        r
    };
    // Progress at turn 1, then none for 600 turns.
    let mut given = Vec::new();
    let mut needs_from = None;
    for turn in 1..=600u64 {
        let a = radio.check(&stalled(turn, turn - 1));
        given.extend(
            a.steering
                .iter()
                .map(|s| (turn, s.message.clone(), s.severity)),
        );
        if needs_from.is_none() && a.needs.is_some() {
            needs_from = Some(turn);
        }
        if let Some(n) = &a.needs {
            assert_eq!(n.reason, xo_proto::NeedsReason::Stuck);
            assert_eq!(n.stretch_from, 1);
            assert_eq!(n.kind, Some(AnomalyKind::Stall));
        }
    }
    assert_eq!(given.len(), 3, "{given:#?}");
    assert!(
        given[0]
            .1
            .starts_with("[SUPERVISOR] Stall: no progress for"),
        "{}",
        given[0].1
    );
    assert!(
        given[1].1.contains("Stall, second notice:"),
        "{}",
        given[1].1
    );
    assert_eq!(given[1].2, Severity::Urgent);
    assert!(
        given[2].1.contains("Stall, third notice:") && given[2].1.contains("asked a person"),
        "{}",
        given[2].1
    );
    for (_, m, _) in &given {
        assert!(count_sentences(m) <= 3, "{m}");
    }
    assert_eq!(
        needs_from,
        Some(given[2].0),
        "needs you from the last steering on"
    );
    // It moves: no longer needs you; a new stretch is steered again.
    let a = radio.check(&stalled(601, 0));
    assert!(a.needs.is_none());
    let later: Vec<_> = (602..=620u64)
        .flat_map(|t| radio.check(&stalled(t, t - 601)).steering)
        .collect();
    assert_eq!(later.len(), 3, "a new stretch starts over: {later:#?}");
    assert!(!later[0].message.contains("notice"), "{}", later[0].message);
}

/// The same for a loop: the agent re-runs one failing command for ever.
#[test]
fn a_loop_that_goes_on_is_escalated_not_repeated() {
    let mut radio = Radio::default();
    let mut steered = 0;
    for turn in 1..=200u64 {
        let actions = (turn.saturating_sub(5)..=turn)
            .map(|t| err("pytest", "tests/x.py", "exit_1", t))
            .collect();
        let mut r = with_actions(turn, actions);
        r.activity.turns_since_progress = (turn - 1) as u32;
        let a = radio.check(&r);
        steered += a
            .steering
            .iter()
            .filter(|s| s.kind == AnomalyKind::Loop)
            .count();
    }
    assert_eq!(steered, 3);
}

/// Whoever gives them, one stretch gets three steerings of a kind: a unit
/// whose own check (microcosm) gave the loop three times in a stretch gets
/// none from the XO in it, and needs you.
#[test]
fn steering_the_unit_gave_itself_counts_toward_the_stretch() {
    let mut radio = Radio::default();
    let mut xo_steered = 0;
    let mut needs = None;
    for turn in 1..=60u64 {
        let actions = (turn.saturating_sub(5).max(1)..=turn)
            .map(|t| err("build", "x", "compile_error", t))
            .collect();
        let mut r = with_actions(turn, actions);
        r.activity.turns_since_progress = (turn - 1) as u32;
        // The runner steered itself at turns 3, 6 and 9 (its reports say
        // so, as the runner sends them: with the turn's report).
        if [3, 6, 9].contains(&turn) {
            r.status.self_steered = vec![xo_proto::SelfSteered {
                kind: AnomalyKind::Loop,
                severity: Severity::Warning,
                turn,
            }];
        }
        let a = radio.check(&r);
        xo_steered += a
            .steering
            .iter()
            .filter(|s| s.kind == AnomalyKind::Loop)
            .count();
        if needs.is_none() {
            needs = a.needs.map(|n| (turn, n.reason, n.kind));
        }
    }
    assert_eq!(
        xo_steered, 0,
        "the stretch's loop steering was the unit's own"
    );
    assert_eq!(
        needs,
        Some((9, xo_proto::NeedsReason::Stuck, Some(AnomalyKind::Loop)))
    );
}

/// Issue 37, item 3: a unit that says it waits for a person (its hook saw a
/// permission prompt) needs you with that reason and is not steered, even
/// stalled; a report without it clears it; a different reason is a new
/// need; the stuck need of escalation is not cleared by a report that
/// says nothing (only by progress).
#[test]
fn a_unit_waiting_for_a_person_needs_you_by_its_own_account_and_is_not_steered() {
    use xo_proto::{NeedsReason, UnitNeeds};
    let mut radio = Radio::default();
    let stalled = |turn: u64, needs: Option<UnitNeeds>| {
        let mut r = report(turn);
        r.activity.turns_since_progress = turn as u32;
        r.status.needs = needs;
        r
    };
    let permission = UnitNeeds {
        reason: NeedsReason::Permission,
        detail: "permission for Bash: cargo publish".into(),
    };
    // Waiting for 40 turns' worth of stall: needs you, never steered.
    for turn in 1..=40 {
        let a = radio.check(&stalled(turn, Some(permission.clone())));
        assert!(a.steering.is_empty(), "turn {turn}: {:?}", a.steering);
        let n = a.needs.expect("needs you");
        assert_eq!(n.reason, NeedsReason::Permission);
        assert_eq!(n.detail, "permission for Bash: cargo publish");
        assert_eq!(n.turn, 1, "set once, at the turn it began");
    }
    // Another reason: a new need from that turn.
    let question = UnitNeeds {
        reason: NeedsReason::Question,
        detail: "which port?".into(),
    };
    let a = radio.check(&stalled(41, Some(question)));
    let n = a.needs.unwrap();
    assert_eq!((n.reason, n.turn), (NeedsReason::Question, 41));
    // It moved: cleared, and steered again as any unit.
    let a = radio.check(&stalled(42, None));
    assert!(a.needs.is_none());
    assert!(
        !a.steering.is_empty(),
        "a stalled unit that no longer waits is steered"
    );
}

/// Issue 38: a unit whose sensor could not read some of its records
/// (`status.unreadable`) is not steered on what it did — its picture is
/// known to be wrong — but its context, read from its usage, still is;
/// once its reports read whole again it is steered as any unit.
#[test]
fn a_unit_whose_records_were_not_all_read_is_not_steered_on_them() {
    let mut radio = Radio::default();
    let stalled = |turn: u64, unreadable: u64, fill: f64| {
        let mut r = report(turn);
        r.activity.turns_since_progress = turn as u32;
        r.status.unreadable = unreadable;
        r.size.context_fill = fill;
        r
    };
    for turn in 1..=40 {
        let a = radio.check(&stalled(turn, 3, 0.5));
        assert!(a.steering.is_empty(), "turn {turn}: {:?}", a.steering);
    }
    // Its context is still its own.
    assert_eq!(
        kinds(&mut radio, &stalled(41, 3, 0.95)),
        [AnomalyKind::Context]
    );
    // Read whole again (a fresh unit's reports): the stall is steered.
    let mut radio = Radio::default();
    assert!(kinds(&mut radio, &stalled(40, 0, 0.5)).contains(&AnomalyKind::Stall));
}
