//! Stage 4, validate and interrogate: a reply in the right format checked
//! against the task (its required sections, its acceptance criteria and
//! artifacts, seed 003), uncertain criteria asked about, free-text ones
//! given to the helper agent when it is on; then the task completes, gets
//! a fix prompt within its retries, or is blocked on what failed.

use super::*;

/// At most this many questions per uncertain criterion (seed 003).
pub const MAX_QUESTIONS: u32 = 4;

/// What a judged reply leads to.
pub(super) enum Judged {
    /// The task ended (completed, blocked, a violation, stopped).
    Done(Outcome),
    /// The agent runs again on this fix prompt.
    Fix(ComposedPrompt),
}

impl TaskRun<'_> {
    /// Judges the agent's `reply` (its run's output `out`).
    pub(super) async fn judge(&mut self, out: &AgentOutput, reply: AgentReply) -> Judged {
        let task = self.task;
        let id = task.task_id.as_str();
        if let Some(missing) = self
            .prep
            .pcfg
            .required_sections
            .iter()
            .find(|s| !reply.message.contains(s.as_str()))
        {
            return Judged::Done(self.violation(missing.clone()).await);
        }
        let mut v = self.checker().validate(task, out, &reply).await;
        if v.failed().is_empty()
            && !v.uncertain().is_empty()
            && let Some(o) = self.interrogate(&mut v).await
        {
            return Judged::Done(o);
        }
        if !v.valid()
            && let Some(o) = self.helper(&mut v).await
        {
            return Judged::Done(o);
        }
        let mut v = match v.accept(reply.clone()) {
            Ok(ok) => return Judged::Done(self.completed(ok, &out.stdout)),
            Err(v) => v,
        };
        self.retries += 1;
        self.stats.validation_failures += 1;
        let failures = v.failure_lines();
        if self.retries > self.prep.max {
            // Out of retries: one last interrogation, then blocked.
            for c in v.checks.iter_mut().filter(|c| {
                c.passed == Some(false) && c.quality != crate::validate::MatchQuality::None
            }) {
                c.passed = None;
            }
            if !v.uncertain().is_empty()
                && let Some(o) = self.interrogate(&mut v).await
            {
                return Judged::Done(o);
            }
            let v = match v.accept(reply) {
                Ok(ok) => return Judged::Done(self.completed(ok, &out.stdout)),
                Err(v) => v,
            };
            let mut report = v.report();
            report.prompt_ref = Some(self.last_refs.0.clone());
            report.response_ref = Some(self.last_refs.1.clone());
            self.stats.failed_validation = Some(report);
            return Judged::Done(Outcome::Blocked(format!(
                "validation failed after {} retries: {}",
                self.prep.max,
                v.failure_lines().join("; ")
            )));
        }
        let strict = self.last_failures.as_ref() == Some(&failures);
        self.prep
            .work
            .event(
                if strict {
                    "Fix prompt (strict mode)"
                } else {
                    "Fix prompt"
                },
                &format!(
                    "retry {}/{}:\n- {}",
                    self.retries,
                    self.prep.max,
                    failures.join("\n- ")
                ),
            )
            .await;
        info!(task_id = %id, retry = self.retries, "validation failed; a fix prompt");
        let prompt = self.compose(
            PromptKind::FixPrompt,
            Some(&Feedback::Fix {
                failures: failures.clone(),
                strict,
            }),
        );
        self.last_failures = Some(failures);
        Judged::Fix(prompt)
    }

    /// The completed task's result, formatted by its output template.
    fn completed(&self, ok: Validated, raw: &str) -> Outcome {
        Outcome::Completed(TaskResult::from_validated(
            ok,
            &self.output_template(),
            self.prep.pcfg.supervisor_rules.allow_raw_output,
            &self.task.task_id,
            raw,
            self.last_refs.clone(),
        ))
    }

    /// A reply without a required section (SUP-5 `fail_on_violation`, the
    /// project's, else the runner's): the task fails, or waits for the
    /// operator.
    async fn violation(&self, missing: String) -> Outcome {
        let fail = self
            .prep
            .pcfg
            .supervisor_rules
            .fail_on_violation
            .unwrap_or(self.p.cfg.fail_on_violation);
        self.prep
            .work
            .event(
                "Violation",
                &format!(
                    "missing required section {missing:?}: the task {}",
                    if fail {
                        "fails"
                    } else {
                        "is blocked for the operator (fail_on_violation = false)"
                    }
                ),
            )
            .await;
        if fail {
            Outcome::Violation("supervisor violation: missing_required_sections".into())
        } else {
            Outcome::Blocked(format!(
                "SUPERVISOR_VIOLATION: missing_required_sections: the reply has no {missing:?} section"
            ))
        }
    }

    pub(super) fn output_template(&self) -> String {
        if self.prep.pcfg.output_template.is_empty() {
            self.p.cfg.output_template.clone()
        } else {
            self.prep.pcfg.output_template.clone()
        }
    }

    /// Seed 003's helper agent (when `helper_agent` is on): for the failed
    /// criteria no rule decides (free text), one helper run given the files
    /// that exist, asked for a verification command per criterion; a
    /// command that passes ([`Checker::verifies`]) passes its criterion.
    /// `Some` only when the run itself ended the task (stopped, failed).
    async fn helper(&mut self, v: &mut Validation) -> Option<Outcome> {
        let on = self
            .prep
            .pcfg
            .supervisor_rules
            .helper_agent
            .unwrap_or(self.p.cfg.helper_agent);
        let open: Vec<usize> = (0..v.checks.len())
            .filter(|i| {
                v.checks[*i].passed == Some(false)
                    && matches!(
                        Criterion::parse(&v.checks[*i].criterion),
                        Criterion::FreeText(_)
                    )
            })
            .collect();
        if !on || open.is_empty() {
            return None;
        }
        let files = crate::validate::code_discovery(&self.prep.ctx.cwd, 300);
        let prompt = self.compose(
            PromptKind::HelperPrompt,
            Some(&Feedback::Helper {
                failures: open
                    .iter()
                    .map(|i| {
                        let c = &v.checks[*i];
                        format!("{} ({})", c.criterion, c.detail)
                    })
                    .collect(),
                files,
            }),
        );
        let out = match self.execute(&prompt).await {
            Ok(o) => o,
            Err(e) => return Some(Outcome::Blocked(format!("EXEC_FAILURE: {e}"))),
        };
        if out.cancelled {
            return Some(Outcome::Cancelled);
        }
        let checks: Vec<(String, String)> = parse_reply(
            &out.stdout,
            false,
            self.prep.pcfg.supervisor_rules.reply_words,
        )
        .ok()
        .and_then(|(r, _)| r.object.get("output")?.get("checks")?.as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|c| {
            Some((
                c.get("criterion")?.as_str()?.to_string(),
                c.get("command")?.as_str()?.to_string(),
            ))
        })
        .collect();
        let empty = match tempfile::tempdir() {
            Ok(d) => d,
            Err(e) => {
                warn!(error = %e, "helper: no empty folder to check its commands against; its verdicts are not taken");
                return None;
            }
        };
        for i in open {
            let criterion = v.checks[i].criterion.clone();
            let Some((_, cmd)) = checks.iter().find(|(c, _)| c.trim() == criterion.trim()) else {
                self.prep
                    .work
                    .event(
                        "Helper",
                        &format!("{criterion}: no command given; still not met"),
                    )
                    .await;
                continue;
            };
            let verdict = self.checker().verifies(cmd, empty.path()).await;
            let c = &mut v.checks[i];
            match verdict {
                Ok(()) => {
                    c.passed = Some(true);
                    c.quality = crate::validate::MatchQuality::Medium;
                    c.detail = format!("verified by the helper agent: `{cmd}` exits 0");
                }
                Err(why) => {
                    c.detail = format!(
                        "{}; the helper's `{cmd}` does not verify it: {why}",
                        c.detail
                    );
                }
            }
            self.prep
                .work
                .event("Helper", &format!("{}: {}", c.criterion, c.detail))
                .await;
        }
        None
    }

    /// Asks about each uncertain criterion, at most [`MAX_QUESTIONS`] times;
    /// (strictly: see [`yes_or_no`])
    /// YES passes it, NO fails it, anything else asks again.
    async fn interrogate(&mut self, v: &mut Validation) -> Option<Outcome> {
        let pending: Vec<usize> = (0..v.checks.len())
            .filter(|i| v.checks[*i].passed.is_none())
            .collect();
        for i in pending {
            let check: Check = v.checks[i].clone();
            let mut verdict = None;
            for n in 1..=MAX_QUESTIONS {
                let prompt = self.compose(
                    PromptKind::InterrogationPrompt,
                    Some(&Feedback::Interrogate {
                        criterion: check.criterion.clone(),
                        number: n,
                        hints: check.hints.clone(),
                    }),
                );
                let out = match self.execute(&prompt).await {
                    Ok(o) => o,
                    Err(e) => return Some(Outcome::Blocked(format!("EXEC_FAILURE: {e}"))),
                };
                if out.cancelled {
                    return Some(Outcome::Cancelled);
                }
                let answer = parse_reply(
                    &out.stdout,
                    false,
                    self.prep.pcfg.supervisor_rules.reply_words,
                )
                .ok()
                .map(|(r, _)| r.message);
                if let Some(yes) = answer.as_deref().and_then(yes_or_no) {
                    verdict = Some((yes, answer.unwrap_or_default()));
                    break;
                }
            }
            let c = &mut v.checks[i];
            match verdict {
                Some((yes, msg)) => {
                    c.passed = Some(yes);
                    c.detail = format!(
                        "{} by interrogation: {}",
                        if yes { "confirmed" } else { "denied" },
                        msg.chars().take(300).collect::<String>()
                    );
                }
                None => {
                    c.passed = Some(false);
                    c.detail = format!("no clear answer after {MAX_QUESTIONS} questions");
                }
            }
            self.prep
                .work
                .event("Interrogation", &format!("{}: {}", c.criterion, c.detail))
                .await;
        }
        None
    }
}

/// An interrogation answer's verdict: its first word is exactly YES or NO
/// (any case, then punctuation, space or the end). "Not sure", "None",
/// "Nope" or "Yesterday…" are no answer, and the question is asked again.
pub fn yes_or_no(answer: &str) -> Option<bool> {
    let word: String = answer
        .trim_start()
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    match word.to_ascii_lowercase().as_str() {
        "yes" => Some(true),
        "no" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod yes_or_no_tests {
    use super::yes_or_no;

    #[test]
    fn only_a_plain_yes_or_no_is_an_answer() {
        for (a, v) in [
            ("YES: greet.txt says hello", Some(true)),
            ("yes", Some(true)),
            ("  Yes. The file exists.", Some(true)),
            ("NO - the test fails", Some(false)),
            ("No, it is missing", Some(false)),
            ("Not sure", None),
            ("None of the files match", None),
            ("Nope", None),
            ("Yesterday it passed", None),
            ("", None),
            ("I think YES", None),
        ] {
            assert_eq!(yes_or_no(a), v, "{a:?}");
        }
    }
}
