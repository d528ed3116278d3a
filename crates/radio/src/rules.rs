//! The rules of the radio check, one function each. A rule reads one report
//! and the role's doctrine and returns at most one [`Finding`].

use xo_proto::steering::STEERING_TAG;
use xo_proto::{Action, ActionKind, AnomalyKind, Evidence, Outcome, Pace, SaluteReport, Severity};

use crate::profile::{Doctrine, RoleProfile};
use xo_proto::salute::command_program as program;

/// Actions the rules look at: the last 20 of a report.
pub const WINDOW: usize = 20;

/// An anomaly a rule found, before cooldowns.
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    pub kind: AnomalyKind,
    pub severity: Severity,
    pub message: String,
    pub evidence: Evidence,
}

/// Every rule, in the order their steering is sent.
pub fn evaluate(
    report: &SaluteReport,
    profile: &RoleProfile,
    condensations_at_progress: u32,
) -> Vec<Finding> {
    let d = &profile.doctrine;
    let recent = window(&report.activity.recent);
    // The window's tool actions, on the stack: no allocation per report.
    let mut buf: [&Action; WINDOW] = [&PLACEHOLDER; WINDOW];
    let mut n = 0;
    // Provider outages (rate limits, overload, 5xx) are not the agent's
    // behaviour: they count toward no loop, oscillation or cascade.
    for a in recent
        .iter()
        .filter(|a| a.kind == ActionKind::Tool && !exempt(d, a) && !provider(a))
    {
        buf[n] = a;
        n += 1;
    }
    let tools = &buf[..n];
    [
        pace(report, profile),
        stall(report, d),
        provider_outage(recent),
        repeat_loop(tools, d),
        oscillation(tools),
        cascade(tools, d),
        monologue(recent, d),
        empty(recent, d),
        context(report, d, condensations_at_progress),
    ]
    .into_iter()
    .flatten()
    .map(|mut f| {
        f.message = limit_sentences(&f.message, 3);
        f
    })
    .collect()
}

static PLACEHOLDER: Action = Action {
    kind: ActionKind::Tool,
    tool: None,
    args_hash: None,
    outcome: Outcome::Ok,
    error_type: None,
    output_hash: None,
    turn: 0,
    cmd: None,
    line: None,
};

fn window(recent: &[Action]) -> &[Action] {
    &recent[recent.len().saturating_sub(WINDOW)..]
}

fn exempt(d: &Doctrine, a: &Action) -> bool {
    a.tool
        .as_deref()
        .is_some_and(|t| d.exempt_tools.iter().any(|e| e == t))
}

/// The prefix of the error types sensors give provider outages.
pub const PROVIDER_ERROR: &str = "provider_";

fn provider(a: &Action) -> bool {
    a.outcome == Outcome::Error
        && a.error_type
            .as_deref()
            .is_some_and(|e| e.starts_with(PROVIDER_ERROR))
}

fn same_action(a: &Action, b: &Action) -> bool {
    a.tool == b.tool && a.args_hash == b.args_hash
}

fn tool_name(a: &Action) -> String {
    a.tool.as_deref().unwrap_or("unnamed tool").to_string()
}

/// How a steering names an action: the command as the agent ran it when
/// the report carries it, else the tool.
fn named(a: &Action) -> String {
    match a.cmd.as_deref() {
        Some(c) => format!("`{}`", c.replace('`', "'")),
        None => tool_name(a),
    }
}

/// The output line the action ended with, quoted, when the report has it.
fn said(a: &Action) -> String {
    a.line
        .as_deref()
        .map(|l| format!(": \"{}\"", l.trim_end_matches('.')))
        .unwrap_or_default()
}

fn finding(kind: AnomalyKind, severity: Severity, message: String, evidence: Evidence) -> Finding {
    Finding {
        kind,
        severity,
        message: format!("{STEERING_TAG} {message}"),
        evidence,
    }
}

fn evidence(actions: &[&Action], rule: String, observed: String) -> Evidence {
    let mut tools: Vec<String> = actions
        .iter()
        .filter_map(|a| a.tool.as_deref().map(str::to_string))
        .collect();
    tools.dedup();
    tools.sort();
    tools.dedup();
    Evidence {
        turns: actions.iter().map(|a| a.turn).collect(),
        tools,
        rule,
        observed,
    }
}

/// PACE: contingent → the role's contingent plan; emergency → stop and report.
pub fn pace(report: &SaluteReport, profile: &RoleProfile) -> Option<Finding> {
    let ev = |level: &str| Evidence {
        turns: vec![report.time.turn],
        tools: vec![],
        rule: "pace in (contingent, emergency)".into(),
        observed: level.into(),
    };
    match report.unit.pace {
        Pace::Contingent => Some(finding(
            AnomalyKind::Pace,
            Severity::Warning,
            format!(
                "PACE contingent: your current approach has failed. Role plan: {}.",
                profile.pace_plan.contingent.description.trim_end_matches('.')
            ),
            ev("contingent"),
        )),
        Pace::Emergency => Some(finding(
            AnomalyKind::Pace,
            Severity::Critical,
            "PACE emergency: stop now. Keep your partial results and report what you accomplished and where you got stuck.".into(),
            ev("emergency"),
        )),
        Pace::Primary | Pace::Alternate => None,
    }
}

/// Stall: `turns_since_progress` above the doctrine's maximum (urgent above twice it).
pub fn stall(report: &SaluteReport, d: &Doctrine) -> Option<Finding> {
    let n = report.activity.turns_since_progress;
    let max = d.max_turns_without_progress;
    if n <= max {
        return None;
    }
    let severity = if n > max.saturating_mul(2) {
        Severity::Urgent
    } else {
        Severity::Warning
    };
    let on = match (&report.activity.task_id, &report.activity.step) {
        (Some(t), Some(s)) => format!(" on task {t} (step: {s})"),
        (Some(t), None) => format!(" on task {t}"),
        (None, Some(s)) => format!(" on step: {s}"),
        (None, None) => String::new(),
    };
    let held = stretch_held(report, n);
    Some(finding(
        AnomalyKind::Stall,
        severity,
        format!(
            "Stall: no progress for {n} turns{on}{held}. Reassess: take a different approach, simplify the step, or ask for clarification."
        ),
        Evidence {
            turns: vec![report.time.turn],
            tools: vec![],
            rule: format!("turns_since_progress > {max}"),
            observed: n.to_string(),
        },
    ))
}

/// What a stretch of `n` turns held, from the report's window: its tool
/// calls, how many failed, and the command run most often with one result
/// (`""` when the window holds none of it).
fn stretch_held(report: &SaluteReport, n: u32) -> String {
    let from = report.time.turn.saturating_sub(u64::from(n));
    let acts: Vec<&Action> = window(&report.activity.recent)
        .iter()
        .filter(|a| a.kind == ActionKind::Tool && a.turn > from)
        .collect();
    if acts.is_empty() {
        return String::new();
    }
    let failed = acts.iter().filter(|a| a.outcome == Outcome::Error).count();
    let mut text = format!(
        ": {} tool call{}",
        acts.len(),
        if acts.len() == 1 { "" } else { "s" }
    );
    if failed > 0 {
        text.push_str(&format!(" ({failed} failed)"));
    }
    // The same command with the same result, most often.
    let mut best: Option<(&Action, usize)> = None;
    for a in &acts {
        let same = acts
            .iter()
            .filter(|b| {
                same_action(a, b) && b.output_hash == a.output_hash && b.outcome == a.outcome
            })
            .count();
        if same >= 2 && best.is_none_or(|(_, k)| same > k) {
            best = Some((a, same));
        }
    }
    if let Some((a, k)) = best {
        text.push_str(&format!(", {} {k} times with the same result", named(a)));
    }
    text
}

/// Loop: the same action (tool + args) at the end of the window, repeated
/// with the same error type, or with the same output. A changing output is
/// progress (polling), not a loop.
pub fn repeat_loop(tools: &[&Action], d: &Doctrine) -> Option<Finding> {
    let last = *tools.last()?;
    let run = || tools.iter().rev().take_while(|a| same_action(a, last));
    let errors = run()
        .take_while(|a| a.outcome == Outcome::Error && a.error_type == last.error_type)
        .count();
    let outputs = run()
        .take_while(|a| a.output_hash.is_some() && a.output_hash == last.output_hash)
        .count();
    // Seed 000: the same tool failing with the same error type, whatever
    // its arguments (`make a`, `make b`, `make c` all `build_failed`).
    let same_tool_errors = tools
        .iter()
        .rev()
        .take_while(|a| {
            a.tool == last.tool && a.outcome == Outcome::Error && a.error_type == last.error_type
        })
        .count();
    let tool = tool_name(last);
    // Only a named error class is "the same error" across different
    // arguments: `tool_error` says only that the tool refused (an edit
    // whose old text did not match, tried three ways, is work, not a loop).
    let named_class = last
        .error_type
        .as_deref()
        .is_some_and(|e| e != "tool_error");
    // Replies the harness refused, in a row, whatever they held.
    if last.outcome == Outcome::Error
        && last.error_type.as_deref() == Some("format_error")
        && same_tool_errors >= d.loop_error_repeats as usize
    {
        let n = same_tool_errors;
        return Some(finding(
            AnomalyKind::Loop,
            Severity::Warning,
            format!(
                "Refused: your last {n} replies were refused by your harness{}. Reply exactly as it asks: nothing you sent since ran.",
                said(last)
            ),
            evidence(
                &tools[tools.len() - n..],
                format!("refused replies in a row >= {}", d.loop_error_repeats),
                n.to_string(),
            ),
        ));
    }
    if last.outcome == Outcome::Error
        && named_class
        && errors < d.loop_error_repeats as usize
        && same_tool_errors >= d.loop_error_repeats as usize
    {
        let et = last.error_type.as_deref().unwrap_or("error");
        let n = same_tool_errors;
        let how = match et.strip_prefix("exit_") {
            Some(code) => format!("exited {code} {n} times in a row"),
            None => format!("failed {n} times in a row with the same error ({et})"),
        };
        let last_run = match last.cmd.as_deref() {
            Some(_) => format!(" (the last, {}{})", named(last), said(last)),
            None => String::new(),
        };
        return Some(finding(
            AnomalyKind::Loop,
            Severity::Warning,
            format!(
                "Loop: {tool} {how}, with different arguments{last_run}. Find the cause before trying {tool} again."
            ),
            evidence(
                &tools[tools.len() - n..],
                format!("same tool and error type >= {}", d.loop_error_repeats),
                n.to_string(),
            ),
        ));
    }
    let (n, rule, what) =
        if last.outcome == Outcome::Error && errors >= d.loop_error_repeats as usize {
            let et = last.error_type.as_deref().unwrap_or("error");
            let what = match et.strip_prefix("exit_") {
                Some(code) => format!("it exited {code} each time"),
                None => format!("got the same error ({et})"),
            };
            (
                errors,
                format!("same action and error type >= {}", d.loop_error_repeats),
                what,
            )
        } else if outputs >= d.loop_output_repeats as usize {
            (
                outputs,
                format!("same action and output >= {}", d.loop_output_repeats),
                "got the same output".to_string(),
            )
        } else {
            return same_output_whatever_changes(tools, d);
        };
    let matched = &tools[tools.len() - n..];
    let ran = match last.cmd {
        Some(_) => named(last),
        None => format!("{tool} with the same arguments"),
    };
    Some(finding(
        AnomalyKind::Loop,
        Severity::Warning,
        format!(
            "Loop: you ran {ran} {n} times and {what}{}. Stop repeating it and try a different approach.",
            said(last)
        ),
        evidence(matched, rule, n.to_string()),
    ))
}

/// Loop, the other way round: one program run again and again with
/// different arguments (options, flags, files) and the same non-empty
/// output every time: what the agent changes does not matter to it (a
/// linter's findings whatever the options). Only for actions whose command
/// the report carries (the program is read from it).
fn same_output_whatever_changes(tools: &[&Action], d: &Doctrine) -> Option<Finding> {
    let last = *tools.last()?;
    let prog = program(last.cmd.as_deref()?);
    if prog.is_empty() || last.outcome == Outcome::Empty || last.output_hash.is_none() {
        return None;
    }
    let run: Vec<&&Action> = tools
        .iter()
        .rev()
        .take_while(|a| {
            a.cmd.as_deref().map(program) == Some(prog)
                && a.output_hash == last.output_hash
                && a.outcome == last.outcome
        })
        .collect();
    let variants = {
        let mut args: Vec<_> = run.iter().map(|a| &a.args_hash).collect();
        args.sort();
        args.dedup();
        args.len()
    };
    // Two more than a plain repeat needs: a tool that prints one banner
    // whatever it does (a key tool writing three files) is not stuck; the
    // run that re-ran pylint five ways was.
    let n = run.len();
    let needed = d.loop_output_repeats as usize + 2;
    if n < needed || variants < 2 {
        return None;
    }
    let matched = &tools[tools.len() - n..];
    Some(finding(
        AnomalyKind::Loop,
        Severity::Warning,
        format!(
            "Loop: you ran {prog} {n} times, {variants} different ways, and the output was the same each time{}. What you change does not matter to it: look at what it reports, not at how you run it.",
            said(last)
        ),
        evidence(
            matched,
            format!("same program and output, different arguments >= {needed}"),
            n.to_string(),
        ),
    ))
}

/// Provider outage: the last two actions of the window failed with a
/// provider error (rate limit, overload, 5xx). The advice is to wait and
/// retry the same step, not to change approach.
pub fn provider_outage(recent: &[Action]) -> Option<Finding> {
    let tail: Vec<&Action> = recent.iter().rev().take(2).collect();
    if tail.len() < 2 || !tail.iter().all(|a| provider(a)) {
        return None;
    }
    let class = tail[0].error_type.as_deref().unwrap_or(PROVIDER_ERROR);
    let matched: Vec<&Action> = tail.into_iter().rev().collect();
    Some(finding(
        AnomalyKind::Provider,
        Severity::Warning,
        format!(
            "Provider: the model provider is failing ({class}), not your approach. Wait with backoff and retry the same step; do not change a plan that was working."
        ),
        evidence(
            &matched,
            "provider errors at the end of the window >= 2".into(),
            "2".into(),
        ),
    ))
}

/// Oscillation: A,B,A,B over the last 4 actions, all failing; or A,B,A,B,A,B
/// over the last 6 with each action's observation repeating.
pub fn oscillation(tools: &[&Action]) -> Option<Finding> {
    let alternates = |s: &[&Action]| {
        !same_action(s[0], s[1]) && s.iter().enumerate().all(|(i, a)| same_action(a, s[i % 2]))
    };
    let failing = tools.len() >= 4 && {
        let s = &tools[tools.len() - 4..];
        alternates(s) && s.iter().all(|a| a.outcome == Outcome::Error)
    };
    let repeating = !failing && tools.len() >= 6 && {
        let s = &tools[tools.len() - 6..];
        alternates(s)
            && s.iter().enumerate().all(|(i, a)| {
                a.output_hash.is_some() && (i < 2 || a.output_hash == s[i - 2].output_hash)
            })
    };
    let (s, rule) = if failing {
        (&tools[tools.len() - 4..], "A,B,A,B over 4 failing actions")
    } else if repeating {
        (
            &tools[tools.len() - 6..],
            "A,B,A,B,A,B over 6 actions with repeating observations",
        )
    } else {
        return None;
    };
    let (a, b) = (tool_name(s[0]), tool_name(s[1]));
    Some(finding(
        AnomalyKind::Oscillation,
        Severity::Warning,
        format!(
            "Oscillation: you are alternating between {a} and {b} without progress. Pick one approach, find out why it fails, and fix that."
        ),
        evidence(s, rule.into(), s.len().to_string()),
    ))
}

/// Cascade: at least `cascade_tools` different tools failing within the last
/// `cascade_window` actions.
pub fn cascade(tools: &[&Action], d: &Doctrine) -> Option<Finding> {
    let w = &tools[tools.len().saturating_sub(d.cascade_window as usize)..];
    let distinct = w
        .iter()
        .enumerate()
        .filter(|(i, a)| {
            a.outcome == Outcome::Error
                && !w[..*i]
                    .iter()
                    .any(|b| b.outcome == Outcome::Error && b.tool == a.tool)
        })
        .count();
    if distinct < d.cascade_tools as usize {
        return None;
    }
    let failing: Vec<&Action> = w
        .iter()
        .filter(|a| a.outcome == Outcome::Error)
        .copied()
        .collect();
    let mut names: Vec<String> = failing.iter().map(|a| tool_name(a)).collect();
    names.sort();
    names.dedup();
    // The latest failure, as the agent ran it and with what it got back:
    // the evidence to start from, not only the count.
    let last = failing.last().map_or_else(String::new, |a| {
        format!(" The latest: {}{}.", named(a), said(a))
    });
    Some(finding(
        AnomalyKind::Cascade,
        Severity::Warning,
        format!(
            "Cascade: {} different tools failed in your last {} actions ({}).{last} Stop and verify your working directory, file paths and environment before going on.",
            names.len(),
            w.len(),
            names.join(", ")
        ),
        evidence(
            &failing,
            format!(
                "distinct failing tools >= {} within {}",
                d.cascade_tools, d.cascade_window
            ),
            names.len().to_string(),
        ),
    ))
}

/// The messages at the end of the window, with no tool action between.
fn trailing_messages(recent: &[Action]) -> &[Action] {
    let n = recent
        .iter()
        .rev()
        .take_while(|a| a.kind == ActionKind::Message)
        .count();
    &recent[recent.len() - n..]
}

/// Monologue: identical agent messages in a row with no action between.
pub fn monologue(recent: &[Action], d: &Doctrine) -> Option<Finding> {
    let run = trailing_messages(recent);
    let last = run.last()?;
    if last.outcome == Outcome::Empty || last.output_hash.is_none() {
        return None;
    }
    let n = run
        .iter()
        .rev()
        .take_while(|a| a.outcome != Outcome::Empty && a.output_hash == last.output_hash)
        .count();
    if n < d.monologue_repeats as usize {
        return None;
    }
    let same: Vec<&Action> = run[run.len() - n..].iter().collect();
    Some(finding(
        AnomalyKind::Monologue,
        Severity::Warning,
        format!(
            "Monologue: you sent the same message {} times without acting. Take a concrete action with a tool, or report that you are blocked.",
            same.len()
        ),
        evidence(
            &same,
            format!("identical messages >= {}", d.monologue_repeats),
            same.len().to_string(),
        ),
    ))
}

/// Empty replies: empty messages in a row.
pub fn empty(recent: &[Action], d: &Doctrine) -> Option<Finding> {
    let run = trailing_messages(recent);
    let n = run
        .iter()
        .rev()
        .take_while(|a| a.outcome == Outcome::Empty)
        .count();
    if n < d.empty_repeats as usize {
        return None;
    }
    let empties: Vec<&Action> = run[run.len() - n..].iter().collect();
    Some(finding(
        AnomalyKind::Empty,
        Severity::Warning,
        format!(
            "Empty replies: your last {} replies were empty. Answer with your next concrete step or a status report.",
            empties.len()
        ),
        evidence(
            &empties,
            format!("empty replies >= {}", d.empty_repeats),
            empties.len().to_string(),
        ),
    ))
}

/// How far past the fill an agent compacts itself at (its own watchdog)
/// the XO waits before it steers on the fill: by then the watchdog has not
/// fired (switched off, or overshot by a large result).
pub const WATCHDOG_MARGIN: f64 = 0.05;

/// The fill lines of the context rule for this report: the doctrine's
/// (0.80 warning, 0.90 urgent), moved past the agent's own compaction
/// point when it has one (seed 000: where a watchdog handles context
/// limits, the supervisor does not duplicate it), at most 0.99.
pub fn context_lines(report: &SaluteReport, d: &Doctrine) -> (f64, f64) {
    match report.size.compacts_at {
        Some(c) => (
            d.context_warning.max(c + WATCHDOG_MARGIN).min(0.99),
            d.context_urgent.max(c + 2.0 * WATCHDOG_MARGIN).min(0.99),
        ),
        None => (d.context_warning, d.context_urgent),
    }
}

/// Context: fill above the warning (0.80) or urgent (0.90) line, or repeated
/// condensation without progress.
pub fn context(
    report: &SaluteReport,
    d: &Doctrine,
    condensations_at_progress: u32,
) -> Option<Finding> {
    let fill = report.size.fill();
    let pct = (fill * 100.0).floor();
    let (warning, urgent) = context_lines(report, d);
    let own = report
        .size
        .compacts_at
        .map(|c| format!(" (the agent compacts itself at {c:.2})"))
        .unwrap_or_default();
    let ev = |rule: String, observed: String| Evidence {
        turns: vec![report.time.turn],
        tools: vec![],
        rule,
        observed,
    };
    if fill > urgent {
        return Some(finding(
            AnomalyKind::Context,
            Severity::Urgent,
            format!(
                "Context {pct}% full and nearly exhausted. Finish your immediate step now and report; do not start new work."
            ),
            ev(
                format!("context_fill > {urgent:.2}{own}"),
                format!("{fill:.3}"),
            ),
        ));
    }
    if fill > warning {
        return Some(finding(
            AnomalyKind::Context,
            Severity::Warning,
            format!("Context {pct}% full. Wrap up the current step, summarise, or start fresh."),
            ev(
                format!("context_fill > {warning:.2}{own}"),
                format!("{fill:.3}"),
            ),
        ));
    }
    let condensed = report
        .size
        .condensations
        .saturating_sub(condensations_at_progress);
    if report.activity.turns_since_progress > 0 && condensed >= d.max_condensations_without_progress
    {
        return Some(finding(
            AnomalyKind::Context,
            Severity::Warning,
            format!(
                "Context condensed {condensed} times without progress. Summarise what you know, then take one concrete step."
            ),
            ev(
                format!(
                    "condensations since progress >= {}",
                    d.max_condensations_without_progress
                ),
                condensed.to_string(),
            ),
        ));
    }
    None
}

/// Counts sentences: a `.`, `!` or `?` followed by whitespace or the end.
pub fn count_sentences(text: &str) -> usize {
    let b = text.as_bytes();
    (0..b.len())
        .filter(|&i| {
            matches!(b[i], b'.' | b'!' | b'?')
                && b.get(i + 1).is_none_or(|c| c.is_ascii_whitespace())
        })
        .count()
}

/// Keeps at most `max` sentences, the last one always: a message ends with
/// its advice, and text quoted from a report (a step with full stops of its
/// own) must never push the advice out. Over the limit, the first `max - 1`
/// sentences are kept, then the last.
pub fn limit_sentences(text: &str, max: usize) -> String {
    let b = text.as_bytes();
    let ends: Vec<usize> = (0..b.len())
        .filter(|&i| {
            matches!(b[i], b'.' | b'!' | b'?')
                && b.get(i + 1).is_none_or(|c| c.is_ascii_whitespace())
        })
        .collect();
    // The text after the last terminator counts as a sentence too.
    let tail_open = ends
        .last()
        .is_none_or(|&e| !text[e + 1..].trim().is_empty());
    let total = ends.len() + usize::from(tail_open);
    if total <= max || max == 0 {
        return text.to_string();
    }
    let last_start = if tail_open {
        ends.last().map_or(0, |&e| e + 1)
    } else {
        ends.len().checked_sub(2).map_or(0, |k| ends[k] + 1)
    };
    let head_end = ends.get(max.saturating_sub(2)).map_or(0, |&e| e + 1);
    let head = if max >= 2 {
        text[..head_end].trim_end()
    } else {
        ""
    };
    let last = text[last_start..].trim();
    if head.is_empty() {
        last.to_string()
    } else {
        format!("{head} {last}")
    }
}
