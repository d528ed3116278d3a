//! Stage 5, settle: how the task ended said to everyone who needs it.
//! The outcome as the supervision leaves it (a budget spent, a yield),
//! the unit's wait for a person, the knowledge it carried marked used,
//! its span's outcome, the runner event, and the outcome delivered to the
//! queue (retried while the queue does not answer). Its work is already
//! committed and merged ([`Prepared::run`](super::prepare::Prepared::run), its tree moved into the run).

use std::time::Duration;

use tracing::{error, info, warn};
use xo_bus::Bus;
use xo_bus::typed::{self, CallError};
use xo_pipeline::{Outcome, RunStats};
use xo_proto::Subjects;
use xo_proto::queue as q;

use super::prepare::Prepared;
use super::supervise::Stop;
use crate::lease::Held;
use crate::worker::{Worker, WorkerState};

/// Settles the task `t` that ran to `ran`, its agent stopped for `stop`
/// if it was.
pub async fn settle(
    w: &Worker,
    st: &mut WorkerState,
    t: Prepared,
    ran: (Outcome, RunStats),
    stop: Option<Stop>,
) {
    let (outcome, stats) = ran;
    let (bus, subjects, id) = (&w.bus, &st.subjects, &t.held.task_id);
    let usage = t.meter.usage();
    let outcome = match (outcome, &stop) {
        (Outcome::Completed(r), _) => Outcome::Completed(r),
        // The agent's own failure (its timeout among them) is what
        // happened, whatever the budget says after it.
        (Outcome::Blocked(r), _) if r.starts_with("EXEC_FAILURE") => Outcome::Blocked(r),
        (_, Some(Stop::Budget(reason))) => {
            warn!(reason = %reason, "task budget exhausted; the agent was stopped");
            Outcome::Blocked(reason.clone())
        }
        (o, _) => o,
    };
    // Stopped to yield (not by shutdown, a halt or a lost lease): the
    // task goes back to the queue at once, its work kept.
    let yielded = match &stop {
        Some(Stop::Yield(critical)) if matches!(outcome, Outcome::Cancelled) => {
            Some(critical.clone())
        }
        _ => None,
    };
    // The unit waits for a person until its next task: its task asks
    // the operator a question, or its agent could not run.
    if let Some(needs) = waits_for(id, &outcome) {
        st.turns.wait(needs);
    }
    st.turns.end_task();
    if let Outcome::Completed(r) = &outcome
        && !t.selection.docs.is_empty()
    {
        // The knowledge lifecycle: clean tasks establish the documents they carried.
        let uses = xo_proto::knowledge::RecordUses {
            docs: t.selection.docs.clone(),
            clean: r.clean(),
            task: Some(id.clone()),
        };
        if let Err(e) = typed::call(bus, subjects, &uses, Duration::from_secs(3)).await {
            warn!(error = %e, "knowledge uses not recorded");
        }
    }
    let ended_as = if yielded.is_some() {
        q::RunnerOutcome::Yielded
    } else {
        ended(&outcome)
    };
    let span = tracing::Span::current();
    let tokens = st.turns.tokens_in_out();
    span.record("gen_ai.usage.input_tokens", tokens.input as i64);
    span.record("gen_ai.usage.output_tokens", tokens.output as i64);
    span.record("xo.outcome", ended_as.as_str());
    let ev = q::RunnerEvent {
        v: xo_proto::PROTOCOL_VERSION,
        unit: w.opts.unit.clone(),
        task_id: id.clone(),
        outcome: ended_as,
        attempt: t.job.record.attempt,
        agent_runs: stats.agent_runs,
        format_retries: stats.format_retries,
        validation_failures: stats.validation_failures,
        clarifications: stats.clarifications,
        knowledge: t.selection.docs.clone(),
        at: w.clock.now_ms(),
    };
    if let Err(e) = typed::publish(
        bus,
        &subjects.runner_event(&w.opts.unit),
        &ev,
        w.cfg.wire.format,
    )
    .await
    {
        warn!(error = %e, "runner event not published");
    }
    let yielded = yielded.map(|critical| Yielded {
        critical,
        checkpoint: t.meter.checkpoint.as_ref().is_some_and(|p| p.exists()),
    });
    let ended = Ended {
        outcome,
        yielded,
        usage,
        failed_validation: stats.failed_validation,
        exchange: stats.exchange,
        diff: stats.diff,
    };
    deliver(bus, subjects, &t.held, ended).await;
}

/// Blocks the task, or (with a question) leaves it awaiting the operator.
async fn block(
    bus: &Bus,
    subjects: &Subjects,
    mut req: q::Block,
    timeout: Duration,
) -> Result<(), CallError> {
    if req.question.is_none() {
        req.cause = Some(q::BlockCause::of_reason(&req.reason));
    }
    typed::call(bus, subjects, &req, timeout).await.map(|_| ())
}

/// A task stopped to be given back for a critical one.
struct Yielded {
    critical: String,
    /// The agent's checkpoint file exists.
    checkpoint: bool,
}

/// How a task ended here, for the queue.
struct Ended {
    outcome: Outcome,
    yielded: Option<Yielded>,
    usage: q::Usage,
    /// The validation it was blocked on, if that is why.
    failed_validation: Option<q::ValidationReport>,
    /// The last prompt and reply, for the audit line.
    exchange: Option<q::Exchange>,
    /// What it changed on its branch (worktree isolation).
    diff: Option<q::TaskDiff>,
}

/// Sends the outcome to the queue (or gives the task back, `yielded`),
/// retrying while the queue is unreachable.
async fn deliver(bus: &Bus, subjects: &Subjects, held: &Held, ended: Ended) {
    let Ended {
        outcome,
        yielded,
        usage,
        failed_validation,
        exchange,
        diff,
    } = ended;
    let timeout = Duration::from_secs(10);
    let mut delays = xo_runtime::retry::outcome();
    for attempt in 1.. {
        let res: Result<(), CallError> = match (&outcome, &yielded) {
            (_, Some(y)) => {
                info!(critical = %y.critical, checkpoint = y.checkpoint, "task given back for the critical task");
                let req = q::Yield {
                    task_id: held.task_id.clone(),
                    token: held.token.clone(),
                    claimant: held.unit.clone(),
                    checkpoint: y.checkpoint,
                    note: if y.checkpoint {
                        "agent stopped at its checkpoint; its artifacts are validated on resume"
                            .into()
                    } else {
                        "agent stopped; the work it left stays for the next attempt".into()
                    },
                    usage,
                };
                typed::call(bus, subjects, &req, timeout).await.map(|_| ())
            }
            (Outcome::Completed(r), None) => {
                info!(summary = %r.report().summary, "task completed");
                typed::call(
                    bus,
                    subjects,
                    &q::Complete {
                        task_id: held.task_id.clone(),
                        token: held.token.clone(),
                        claimant: held.unit.clone(),
                        report: r.report().clone(),
                        manager_reply: Some(serde_json::Value::Object(r.reply().clone())),
                        usage,
                        exchange: exchange.clone(),
                        diff: diff.clone(),
                    },
                    timeout,
                )
                .await
                .map(|_| ())
            }
            (Outcome::Blocked(reason) | Outcome::Violation(reason), None) => {
                warn!(reason = %reason, "task blocked");
                let req = q::Block {
                    task_id: held.task_id.clone(),
                    token: held.token.clone(),
                    claimant: held.unit.clone(),
                    reason: reason.clone(),
                    question: None,
                    cause: None,
                    usage,
                    report: failed_validation.clone(),
                    exchange: exchange.clone(),
                };
                block(bus, subjects, req, timeout).await
            }
            (Outcome::Question(q), None) => {
                info!(question = %q, "task awaits the operator's answer");
                let req = q::Block {
                    task_id: held.task_id.clone(),
                    token: held.token.clone(),
                    claimant: held.unit.clone(),
                    reason: q::ASKED_QUESTION.into(),
                    question: Some(q.clone()),
                    cause: None,
                    usage,
                    report: None,
                    exchange: exchange.clone(),
                };
                block(bus, subjects, req, timeout).await
            }
            (Outcome::Cancelled, None) => {
                info!("task stopped; the queue replays it when the lease lapses");
                return;
            }
        };
        match res {
            Ok(()) => return,
            // The queue refused (lease lost, task cancelled): nothing to retry.
            Err(CallError::Service(e)) => {
                warn!(error = %e, "the queue refused the outcome");
                return;
            }
            Err(e) => {
                let Some(wait) = delays.next() else {
                    error!(attempts = attempt, error = %e, "outcome not delivered; the lease will lapse and the task be replayed");
                    return;
                };
                warn!(attempt, error = %e, "outcome not delivered; retrying");
                tokio::time::sleep(wait).await;
            }
        }
    }
}

/// What the unit waits for after `outcome` of task `id`: an operator's
/// answer to the task's question (`answer`), or a person to look at an
/// agent that could not run (`error`, an `EXEC_FAILURE`). Other outcomes
/// are the queue's to handle.
fn waits_for(id: &str, outcome: &Outcome) -> Option<xo_proto::UnitNeeds> {
    let (reason, detail) = match outcome {
        Outcome::Question(q) => (xo_proto::NeedsReason::Answer, format!("{id} asks: {q}")),
        Outcome::Blocked(r) if r.starts_with("EXEC_FAILURE") => {
            (xo_proto::NeedsReason::Error, format!("{id}: {r}"))
        }
        _ => return None,
    };
    Some(xo_proto::UnitNeeds {
        reason,
        detail: xo_pipeline::driver::waiting::short(&detail),
    })
}

/// The runner event's name for an outcome.
fn ended(o: &Outcome) -> q::RunnerOutcome {
    match o {
        Outcome::Completed(_) => q::RunnerOutcome::Completed,
        Outcome::Blocked(_) => q::RunnerOutcome::Blocked,
        Outcome::Question(_) => q::RunnerOutcome::AwaitingResponse,
        Outcome::Violation(_) => q::RunnerOutcome::Violation,
        Outcome::Cancelled => q::RunnerOutcome::Cancelled,
    }
}
