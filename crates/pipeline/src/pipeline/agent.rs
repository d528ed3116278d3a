//! Stage 3, run the agent: one run of the agent on a composed prompt,
//! logged both ways, its halts detected (seed 003) and its reply parsed
//! (seed 002). A reply in the right format goes on to be validated; a
//! halt asks for clarification or ends the task; a reply in the wrong
//! format is asked for again with exactly the same prompt.

use super::*;

/// What one run of the agent led to.
pub(super) enum Ran {
    /// A reply in the right format, to validate.
    Reply(AgentOutput, AgentReply),
    /// Run again on this prompt: a clarification, or the same prompt
    /// after a reply in the wrong format.
    Again(ComposedPrompt),
    /// The task ended (a critical halt, out of retries, a question for
    /// the operator, stopped).
    Ended(Outcome),
}

impl TaskRun<'_> {
    /// Runs the agent on `prompt` and reads what it did.
    pub(super) async fn attempt(&mut self, prompt: &ComposedPrompt) -> Ran {
        let out = match self.execute(prompt).await {
            Ok(o) => o,
            Err(e) => return Ran::Ended(Outcome::Blocked(format!("EXEC_FAILURE: {e}"))),
        };
        if out.cancelled {
            return Ran::Ended(Outcome::Cancelled);
        }
        let parsed = self.parse(&out).await;
        if let Some(h) = detect(&out, parsed.as_ref().ok()) {
            return self.halted(h).await;
        }
        match parsed {
            Ok(reply) => Ran::Reply(out, reply),
            Err(e) => self.misformatted(prompt, &out, e).await,
        }
    }

    /// A halt the agent reported or the run showed: critical ones end the
    /// task; in MANUAL mode the operator answers; else a clarification
    /// prompt, within the retries.
    async fn halted(&mut self, h: crate::halt::Halt) -> Ran {
        if h.critical() {
            return Ran::Ended(Outcome::Blocked(h.reason()));
        }
        if self.job.manual {
            return Ran::Ended(Outcome::Question(h.detail().to_string()));
        }
        self.retries += 1;
        self.stats.clarifications += 1;
        if self.retries > self.prep.max {
            // A question clarifications did not settle waits for the
            // operator's answer instead of blocking the task.
            if let crate::halt::Halt::AskedQuestion(q) = &h {
                return Ran::Ended(Outcome::Question(q.clone()));
            }
            return Ran::Ended(Outcome::Blocked(format!("{} (out of retries)", h.reason())));
        }
        self.prep
            .work
            .event(
                "Clarification",
                &format!(
                    "{}: {} — retry {}/{}",
                    h.code(),
                    h.detail(),
                    self.retries,
                    self.prep.max
                ),
            )
            .await;
        Ran::Again(self.compose(
            PromptKind::ClarificationPrompt,
            Some(&Feedback::Clarify {
                question: h.detail().to_string(),
            }),
        ))
    }

    /// A reply in the wrong format: the same prompt again (seed 002),
    /// within the retries; then `OUTPUT_FORMAT_INVALID`, a critical halt.
    async fn misformatted(
        &mut self,
        prompt: &ComposedPrompt,
        out: &AgentOutput,
        e: FormatError,
    ) -> Ran {
        self.stats.format_retries += 1;
        let (id, max, n) = (&self.task.task_id, self.prep.max, self.stats.format_retries);
        if n > max {
            self.prep
                .work
                .event(
                    "Out of format retries",
                    &format!(
                        "Invalid output format ({e}) after {max} retries; the task is blocked"
                    ),
                )
                .await;
            return Ran::Ended(Outcome::Blocked(format!(
                "OUTPUT_FORMAT_INVALID: {e} after {max} retries"
            )));
        }
        let tail = {
            let t = out.stdout.trim();
            let start = t.len().saturating_sub(2000);
            let start = (start..=t.len())
                .find(|i| t.is_char_boundary(*i))
                .unwrap_or(0);
            &t[start..]
        };
        self.prep
            .work
            .retry_event(
                &self.task.role,
                id,
                n,
                max,
                &format!("Invalid output format ({e})"),
                tail,
            )
            .await;
        info!(task_id = %id, retry = n, error = %e, "reply in the wrong format; same inputs again");
        Ran::Again(prompt.clone())
    }

    /// One agent run, logged both ways.
    pub(super) async fn execute(
        &mut self,
        prompt: &ComposedPrompt,
    ) -> Result<AgentOutput, PipelineError> {
        self.iteration += 1;
        let ctx = &self.prep.ctx;
        let meta = json!({
            "unit": self.p.unit,
            "attempt": self.job.record.attempt,
            "working_directory": ctx.cwd.display().to_string(),
            "agent_mode": ctx.mode().unwrap_or("auto"),
            "prompt_length": prompt.text().len(),
            "at": xo_proto::now_ms(),
        });
        let pref = self
            .prep
            .log
            .append(&PromptEntry {
                task_id: &self.task.task_id,
                iteration: self.iteration,
                kind: prompt.kind().as_str(),
                content: prompt.text(),
                metadata: meta,
            })
            .await
            .unwrap_or_else(|e| {
                warn!(task_id = %self.task.task_id, error = %e, "prompt log not written");
                String::new()
            });
        let out = self.driver.run(prompt, ctx).await?;
        let meta = json!({
            "unit": self.p.unit,
            "exit_code": out.exit_code,
            "timed_out": out.timed_out,
            "cancelled": out.cancelled,
            "truncated": out.truncated,
            "elapsed_ms": out.elapsed_ms,
            "turns": out.turns,
            "tokens_in": out.tokens_in,
            "tokens_out": out.tokens_out,
            "stderr": out.stderr.chars().take(4000).collect::<String>(),
            "at": xo_proto::now_ms(),
        });
        let rref = self
            .prep
            .log
            .append(&PromptEntry {
                task_id: &self.task.task_id,
                iteration: self.iteration,
                kind: "RESPONSE",
                content: &out.stdout,
                metadata: meta,
            })
            .await
            .unwrap_or_else(|e| {
                warn!(task_id = %self.task.task_id, error = %e, "prompt log not written (response)");
                String::new()
            });
        self.stats.exchange = Some(xo_proto::queue::Exchange {
            prompt: xo_proto::queue::Exchange::bounded(prompt.text(), &pref),
            response: xo_proto::queue::Exchange::bounded(&out.stdout, &rref),
        });
        self.last_refs = (pref, rref);
        Ok(out)
    }

    /// The reply in the agent's output (SUP-7: minor violations
    /// auto-corrected and said); with format validation off, its last line.
    async fn parse(&self, out: &AgentOutput) -> Result<AgentReply, FormatError> {
        let manager = self.task.role == xo_proto::queue::MANAGER_ROLE;
        let rules = &self.prep.pcfg.supervisor_rules;
        match parse_reply(&out.stdout, manager, rules.reply_words) {
            Ok((r, fixes)) => {
                for f in fixes {
                    info!(task_id = %self.task.task_id, correction = %f.0, "reply auto-corrected");
                    self.prep.work.event("Violation auto-corrected", &f.0).await;
                }
                Ok(r)
            }
            Err(_) if !rules.require_format_validation => {
                let last = out
                    .stdout
                    .lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("");
                Ok(AgentReply {
                    status: ReplyStatus::Ok,
                    message: last.to_string(),
                    object: serde_json::Map::new(),
                })
            }
            Err(e) => Err(e),
        }
    }
}
