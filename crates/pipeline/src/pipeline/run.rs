//! One task's run, from its first prompt to its outcome: resume or
//! rollback, compose, run the agent, detect halts, validate, retry,
//! interrogate, block (DESIGN §5).

use super::*;

impl TaskRun<'_> {
    pub(super) async fn go(&mut self, project: &str) -> Outcome {
        let task = self.task;
        let id = task.task_id.as_str();
        // SUP-6: a resumed task is validated before anything runs; a
        // replayed one starts from its starting commit.
        // `runner.restart_mode = "rollback"`: never resume, always replay.
        let mark = match self.job.record.mark {
            Some(ReplayMark::Resume) if self.p.cfg.restart_mode == RestartMode::Rollback => {
                Some(ReplayMark::RollbackReplay)
            }
            m => m,
        };
        match mark {
            Some(ReplayMark::Resume) => {
                let reply = AgentReply {
                    status: ReplyStatus::Ok,
                    message: "resumed: the previous attempt's artifacts were validated".into(),
                    object: json!({"status": "ok", "message": "resumed"})
                        .as_object()
                        .cloned()
                        .unwrap_or_default(),
                };
                let v = self
                    .checker()
                    .validate(task, &AgentOutput::default(), &reply)
                    .await;
                self.work
                    .event(
                        "Resume",
                        &format!("existing artifacts: {}", v.report().summary),
                    )
                    .await;
                if v.uncertain().is_empty() && task.role != xo_proto::queue::MANAGER_ROLE {
                    match v.accept(reply) {
                        Ok(ok) => {
                            info!(task_id = %id, "resumed task validated without running the agent");
                            return Outcome::Completed(TaskResult::from_validated(
                                ok,
                                &self.output_template(),
                                self.pcfg.supervisor_rules.allow_raw_output,
                                id,
                                "",
                                ("resume".into(), "resume".into()),
                            ));
                        }
                        Err(_) => info!(task_id = %id, "resumed task incomplete; running it again"),
                    }
                }
            }
            Some(ReplayMark::RollbackReplay) => {
                match self.snaps.rollback(&self.ctx.cwd, id).await {
                    Ok(Some(c)) => {
                        // The dead attempt's checkpoint is of work undone now.
                        let _ = tokio::fs::remove_file(
                            self.ctx.cwd.join(crate::driver::command::CHECKPOINT),
                        )
                        .await;
                        info!(task_id = %id, commit = %c, "rolled back to the task's starting commit");
                        self.work
                            .event("Rollback", &format!("working directory reset to {c}"))
                            .await;
                    }
                    Ok(None) => {
                        warn!(task_id = %id, "no starting commit recorded; replaying without rollback")
                    }
                    Err(e) => warn!(task_id = %id, error = %e, "rollback failed; replaying as is"),
                }
            }
            Some(ReplayMark::Continue) | None => {
                // Yielded to a critical task: the work stays; the starting
                // commit recorded by the first attempt is kept (a recorded
                // start is never replaced).
                if mark.is_some() {
                    self.work
                        .event(
                            "Continue",
                            "yielded to a critical task earlier; the agent continues on the work it left",
                        )
                        .await;
                }
                if let Err(e) = self.snaps.record_start(&self.ctx.cwd, id).await {
                    warn!(task_id = %id, error = %e, "starting commit not recorded; a replay cannot roll back");
                }
            }
        }
        let mut prompt = self.compose(project, PromptKind::Prompt, None);
        let mut format_retries = 0u32;
        let mut retries = 0u32;
        let mut last_failures: Option<Vec<String>> = None;
        loop {
            let out = match self.execute(&prompt).await {
                Ok(o) => o,
                Err(e) => return Outcome::Blocked(format!("EXEC_FAILURE: {e}")),
            };
            if out.cancelled {
                return Outcome::Cancelled;
            }
            let parsed = self.parse(&out).await;
            if let Some(h) = detect(&out, parsed.as_ref().ok()) {
                if h.critical() {
                    return Outcome::Blocked(h.reason());
                }
                if self.job.manual {
                    return Outcome::Question(h.detail().to_string());
                }
                retries += 1;
                self.stats.clarifications += 1;
                if retries > self.max {
                    // A question clarifications did not settle waits for
                    // the operator's answer instead of blocking the task.
                    if let crate::halt::Halt::AskedQuestion(q) = &h {
                        return Outcome::Question(q.clone());
                    }
                    return Outcome::Blocked(format!("{} (out of retries)", h.reason()));
                }
                self.work
                    .event(
                        "Clarification",
                        &format!(
                            "{}: {} — retry {retries}/{}",
                            h.code(),
                            h.detail(),
                            self.max
                        ),
                    )
                    .await;
                prompt = self.compose(
                    project,
                    PromptKind::ClarificationPrompt,
                    Some(&Feedback::Clarify {
                        question: h.detail().to_string(),
                    }),
                );
                continue;
            }
            let reply = match parsed {
                Ok(r) => r,
                Err(e) => {
                    format_retries += 1;
                    self.stats.format_retries += 1;
                    let tail: String = {
                        let t = out.stdout.trim();
                        let start = t.len().saturating_sub(2000);
                        let start = (start..=t.len())
                            .find(|i| t.is_char_boundary(*i))
                            .unwrap_or(0);
                        t[start..].to_string()
                    };
                    if format_retries > self.max {
                        self.work.event(
                            "Out of format retries",
                            &format!(
                                "Invalid output format ({e}) after {} retries; the task is blocked",
                                self.max
                            ),
                        ).await;
                        return Outcome::Blocked(format!(
                            "OUTPUT_FORMAT_INVALID: {e} after {} retries",
                            self.max
                        ));
                    }
                    self.work
                        .retry_event(
                            &task.role,
                            id,
                            format_retries,
                            self.max,
                            &format!("Invalid output format ({e})"),
                            &tail,
                        )
                        .await;
                    info!(task_id = %id, retry = format_retries, error = %e, "reply in the wrong format; same inputs again");
                    // Seed 002: exactly the same prompt again.
                    continue;
                }
            };
            if let Some(missing) = self
                .pcfg
                .required_sections
                .iter()
                .find(|s| !reply.message.contains(s.as_str()))
            {
                // SUP-5 fail_on_violation (the project's, else the runner's):
                // the task fails, or waits for the operator.
                let fail = self
                    .pcfg
                    .supervisor_rules
                    .fail_on_violation
                    .unwrap_or(self.p.cfg.fail_on_violation);
                self.work
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
                return if fail {
                    Outcome::Violation("supervisor violation: missing_required_sections".into())
                } else {
                    Outcome::Blocked(format!(
                        "SUPERVISOR_VIOLATION: missing_required_sections: the reply has no {missing:?} section"
                    ))
                };
            }
            let mut v = self.checker().validate(task, &out, &reply).await;
            if v.failed().is_empty()
                && !v.uncertain().is_empty()
                && let Some(o) = self.interrogate(project, &mut v).await
            {
                return o;
            }
            if !v.valid()
                && let Some(o) = self.helper(project, &mut v).await
            {
                return o;
            }
            match v.accept(reply) {
                Ok(ok) => {
                    return Outcome::Completed(TaskResult::from_validated(
                        ok,
                        &self.output_template(),
                        self.pcfg.supervisor_rules.allow_raw_output,
                        id,
                        &out.stdout,
                        self.last_refs.clone(),
                    ));
                }
                Err(mut v) => {
                    retries += 1;
                    self.stats.validation_failures += 1;
                    let failures = v.failure_lines();
                    if retries > self.max {
                        // Out of retries: one last interrogation, then blocked.
                        for c in v.checks.iter_mut().filter(|c| {
                            c.passed == Some(false)
                                && c.quality != crate::validate::MatchQuality::None
                        }) {
                            c.passed = None;
                        }
                        if !v.uncertain().is_empty()
                            && let Some(o) = self.interrogate(project, &mut v).await
                        {
                            return o;
                        }
                        if v.valid() {
                            continue;
                        }
                        let mut report = v.report();
                        report.prompt_ref = Some(self.last_refs.0.clone());
                        report.response_ref = Some(self.last_refs.1.clone());
                        self.stats.failed_validation = Some(report);
                        return Outcome::Blocked(format!(
                            "validation failed after {} retries: {}",
                            self.max,
                            v.failure_lines().join("; ")
                        ));
                    }
                    let strict = last_failures.as_ref() == Some(&failures);
                    self.work
                        .event(
                            if strict {
                                "Fix prompt (strict mode)"
                            } else {
                                "Fix prompt"
                            },
                            &format!("retry {retries}/{}:\n- {}", self.max, failures.join("\n- ")),
                        )
                        .await;
                    prompt = self.compose(
                        project,
                        PromptKind::FixPrompt,
                        Some(&Feedback::Fix {
                            failures: failures.clone(),
                            strict,
                        }),
                    );
                    last_failures = Some(failures);
                }
            }
        }
    }

    fn output_template(&self) -> String {
        if self.pcfg.output_template.is_empty() {
            self.p.cfg.output_template.clone()
        } else {
            self.pcfg.output_template.clone()
        }
    }

    /// Seed 003's helper agent (when `helper_agent` is on): for the failed
    /// criteria no rule decides (free text), one helper run given the files
    /// that exist, asked for a verification command per criterion; a
    /// command that passes ([`Checker::verifies`]) passes its criterion.
    /// `Some` only when the run itself ended the task (stopped, failed).
    async fn helper(&mut self, project: &str, v: &mut Validation) -> Option<Outcome> {
        let on = self
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
        let files = crate::validate::code_discovery(&self.ctx.cwd, 300);
        let prompt = self.compose(
            project,
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
        let checks: Vec<(String, String)> =
            parse_reply(&out.stdout, false, self.pcfg.supervisor_rules.reply_words)
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
                self.work
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
            self.work
                .event("Helper", &format!("{}: {}", c.criterion, c.detail))
                .await;
        }
        None
    }

    /// Asks about each uncertain criterion, at most [`MAX_QUESTIONS`] times;
    /// (strictly: see [`yes_or_no`])
    /// YES passes it, NO fails it, anything else asks again.
    async fn interrogate(&mut self, project: &str, v: &mut Validation) -> Option<Outcome> {
        let pending: Vec<usize> = (0..v.checks.len())
            .filter(|i| v.checks[*i].passed.is_none())
            .collect();
        for i in pending {
            let check: Check = v.checks[i].clone();
            let mut verdict = None;
            for n in 1..=MAX_QUESTIONS {
                let prompt = self.compose(
                    project,
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
                let answer =
                    parse_reply(&out.stdout, false, self.pcfg.supervisor_rules.reply_words)
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
            self.work
                .event("Interrogation", &format!("{}: {}", c.criterion, c.detail))
                .await;
        }
        None
    }
}
