//! A prepared task's run (DESIGN §5): where its replay starts
//! (`prepare`), then the agent run on a composed prompt
//! (`agent`) and its reply judged
//! (`judge`), again on a clarification, the same prompt or
//! a fix prompt, until the task ends. This file holds that order and the
//! state the stages share.

use super::*;
use agent::Ran;
use judge::Judged;

/// One task's run over a [`Prepared`] task.
pub(super) struct TaskRun<'a> {
    pub(super) p: &'a Pipeline,
    pub(super) driver: &'a mut Driver,
    pub(super) job: &'a Job,
    pub(super) task: &'a Task,
    pub(super) prep: &'a Prepared,
    /// Agent runs so far.
    pub(super) iteration: u32,
    /// Clarifications and fix prompts so far (one budget, seed 003).
    pub(super) retries: u32,
    /// The failures the last fix prompt named (the same again: strict mode).
    pub(super) last_failures: Option<Vec<String>>,
    pub(super) stats: RunStats,
    /// The prompt log's references to the last prompt and reply.
    pub(super) last_refs: (String, String),
}

impl<'a> TaskRun<'a> {
    pub(super) fn new(
        p: &'a Pipeline,
        driver: &'a mut Driver,
        job: &'a Job,
        prep: &'a Prepared,
    ) -> Self {
        Self {
            p,
            driver,
            job,
            task: &job.record.task,
            prep,
            iteration: 0,
            retries: 0,
            last_failures: None,
            stats: RunStats::default(),
            last_refs: (String::new(), String::new()),
        }
    }

    /// Runs the task to its outcome.
    pub(super) async fn go(&mut self) -> Outcome {
        if let Some(o) = self.start().await {
            return o;
        }
        let mut prompt = self.compose(PromptKind::Prompt, None);
        loop {
            prompt = match self.attempt(&prompt).await {
                Ran::Ended(o) => return o,
                Ran::Again(p) => p,
                Ran::Reply(out, reply) => match self.judge(&out, reply).await {
                    Judged::Done(o) => return o,
                    Judged::Fix(p) => p,
                },
            };
        }
    }

    /// The validator, over the task's working directory.
    pub(super) fn checker(&self) -> Checker<'_> {
        let ctx = &self.prep.ctx;
        Checker {
            sandbox: &self.p.sandbox,
            cwd: &ctx.cwd,
            env: &ctx.env,
            timeout: ctx.timeout,
            max_output: ctx.max_output,
            confine: ctx.confine.as_ref(),
        }
    }

    /// A prompt of `kind` for this task (SUP-1: the only way one is made).
    pub(super) fn compose(&self, kind: PromptKind, feedback: Option<&Feedback>) -> ComposedPrompt {
        let (rec, pcfg) = (&self.job.record, &self.prep.pcfg);
        let role_t = pcfg
            .role_templates
            .get(&self.task.role)
            .or_else(|| self.p.cfg.role_templates.get(&self.task.role))
            .map(String::as_str)
            .unwrap_or("");
        let templates = Templates {
            global: &self.p.global_template,
            project: &pcfg.input_template,
            role: role_t,
        };
        let ctx = Context {
            knowledge: &self.job.knowledge,
            directives: &self.job.directives,
            snapshot: Snapshot {
                project_id: self.prep.project.clone(),
                sandbox_root: self.prep.ctx.cwd.display().to_string(),
                // Smart context: a plain fix does not need the goal.
                goal: self.job.goal.clone().filter(|_| {
                    crate::compose::TaskType::detect(self.task) != crate::compose::TaskType::Fix
                }),
                attempt: rec.attempt,
                replay: rec.mark,
                question: rec.question.clone().filter(|_| rec.answer.is_some()),
                answer: rec.answer.clone(),
            },
            required_sections: &pcfg.required_sections,
            task_list: self.job.task_list.as_deref(),
        };
        compose(kind, &templates, self.task, &ctx, feedback)
    }
}
