//! A due reviewer's run and what follows it: the pipeline run on its
//! compressed inputs (`execute`), its findings applied to the knowledge
//! store (`apply`), its directives enqueued (`directive`).

use super::*;

impl Reviews {
    /// Runs the reviewer through the pipeline and parses its findings
    /// strictly. `Err` is a finished run (skipped or discarded).
    pub(super) async fn execute(
        &mut self,
        r: Reviewer,
        why: &'static str,
        pipeline: Pipeline,
        log: &[ReviewRun],
    ) -> Result<(Findings, ReviewRun, Vec<TaskRecord>), ReviewRun> {
        let status = self.call(&q::GetStatus {}).await.unwrap_or_default();
        let tasks = self.all_tasks().await.unwrap_or_default();
        let docs = self.call(&ListDocs::default()).await.unwrap_or_default();
        let bootstrap = docs.docs.is_empty();
        let knowledge = self
            .call(&Select {
                about: Default::default(),
                milestone: None,
                budget_tokens: None,
            })
            .await
            .unwrap_or_default();
        let instructions = self.inputs(r, &status, &tasks, &docs, log, bootstrap);
        self.runs += 1;
        let mut task = Task::new(
            format!("review-{}-{}", r.name().replace('_', "-"), self.runs),
            format!("{} review", r.name()),
            instructions,
            r.name(),
        );
        task.project = Some(self.cfg.review.project.clone());
        task.expected_json_schema = Some(flat_schema(r));
        let job = Job {
            task_list: None,
            record: TaskRecord::running(task, 1),
            goal: Some(status.goal.description.clone()),
            manual: false,
            knowledge: knowledge.section,
            directives: Vec::new(),
            settings: Default::default(),
        };
        let (tx, mut rx) = mpsc::unbounded_channel::<Turn>();
        let turns = Turns::new(tx);
        // The model's turns are traced in this run's trace.
        turns.start_task(TaskTag {
            task_id: format!("review-{}", r.name()),
            span: tracing::Span::current(),
        });
        let mut run = self.base(r, why, ReviewOutcome::Ran, String::new());
        run.bootstrap = bootstrap;
        let Some(mut driver) = self.driver.take() else {
            run.outcome = ReviewOutcome::Skipped;
            run.summary = "no model configured (review.model.model)".into();
            return Err(run);
        };
        info!(
            reviewer = r.name(),
            trigger = why,
            bootstrap,
            "review running"
        );
        let outcome = pipeline.run(&mut driver, &job, turns.clone(), None).await;
        // The run's span is not held past the run.
        turns.end_task();
        self.driver = Some(driver);
        while let Ok(Turn { event: ev, .. }) = rx.try_recv() {
            run.tokens_in += ev.tokens_in;
            run.tokens_out += ev.tokens_out;
            run.cost_usd = xo_proto::finite::add(run.cost_usd, ev.cost_usd);
        }
        if matches!(outcome, Outcome::Completed(_)) && self.down.take().is_some() {
            info!("the review model answers again");
        }
        let result = match outcome {
            Outcome::Completed(res) => res
                .reply()
                .get("output")
                .cloned()
                .ok_or_else(|| "the reply has no output".to_string())
                .and_then(|o| parse_findings(r, &o).map_err(|e| e.to_string())),
            Outcome::Blocked(reason) | Outcome::Violation(reason) => {
                run.outcome = ReviewOutcome::Skipped;
                run.summary = format!("model unreachable or reply unusable: {reason}");
                if reason.starts_with("EXEC_FAILURE") {
                    self.model_failed(&reason);
                }
                warn!(reviewer = r.name(), reason = %run.summary, "review skipped; work continues");
                return Err(run);
            }
            Outcome::Question(_) | Outcome::Cancelled => {
                Err("the reviewer asked instead of reviewing".into())
            }
        };
        match result {
            Ok(f) => {
                run.summary = f.summary.clone();
                Ok((f, run, tasks))
            }
            Err(e) => {
                warn!(reviewer = r.name(), error = %e, "malformed review reply discarded");
                run.outcome = ReviewOutcome::Discarded;
                run.summary = e;
                Err(run)
            }
        }
    }

    /// Applies validated findings: knowledge documents under the reviewer's
    /// authorship, directives in their lanes, the assessor's verdict, and
    /// convergence. Returns the finished run.
    pub(super) async fn apply(
        &mut self,
        r: Reviewer,
        findings: Findings,
        mut run: ReviewRun,
        tasks: &[TaskRecord],
    ) -> ReviewRun {
        let last_done = tasks
            .iter()
            .filter(|t| t.state == TaskState::Completed)
            .max_by_key(|t| t.updated_at)
            .map(|t| t.task.task_id.clone());
        let mut to_review = Vec::new();
        for (c, d) in &findings.documents {
            let put = PutDoc {
                doc: d.to_doc(*c),
                author: r.author(),
                task: last_done.clone(),
            };
            match typed::call(&self.bus, &self.subjects, &put, Duration::from_secs(5)).await {
                Ok(doc) => {
                    run.documents += 1;
                    if doc.needs_user_review {
                        to_review.push(doc.id());
                    }
                }
                Err(e) => {
                    warn!(reviewer = r.name(), doc = %d.name, error = %e, "review document refused")
                }
            }
        }
        if !to_review.is_empty() {
            self.review_alert(r, &to_review).await;
        }
        for d in &findings.directives {
            if self.directive(r, d, &mut run).await {
                run.directives += 1;
            }
        }
        if let Some(v) = findings.verdict {
            run.verdict = Some(v.as_str().into());
            match v {
                Verdict::MajorDrift => {
                    warn!(summary = %findings.summary, "assessor: major drift; halting for the operator");
                    let _ = self
                        .call(&q::Halt {
                            by: Default::default(),
                            reason: format!("assessor: major drift: {}", findings.summary),
                        })
                        .await;
                }
                Verdict::MinorDrift => {
                    for (r2, why2) in self.sched.signal(Signal::MinorDrift) {
                        if r2 != Reviewer::Assessor {
                            Box::pin(self.run(r2, why2)).await;
                        }
                    }
                }
                Verdict::Aligned => {}
            }
        }
        // Convergence: findings barely changed since the last run.
        let keys = findings.keys();
        if let Some(prev) = self.last.get(&r)
            && r != Reviewer::Assessor
            && self.sched.interval(r) > 0
            && similarity(prev, &keys) >= self.cfg.review.convergence_similarity
        {
            self.sched.converging(r);
            run.converging = true;
            info!(
                reviewer = r.name(),
                interval = self.sched.interval(r),
                "reviewer converging; its interval doubles"
            );
        }
        self.last.insert(r, keys);
        info!(
            reviewer = r.name(),
            directives = run.directives,
            documents = run.documents,
            cost_usd = run.cost_usd,
            "review done"
        );
        run
    }

    /// Announces a directive and enqueues it in the lane it belongs to;
    /// true once enqueued.
    async fn directive(&mut self, r: Reviewer, d: &DirectiveOut, run: &mut ReviewRun) -> bool {
        let id = format!(
            "dir-{}-{}-{}",
            r.name().replace('_', "-"),
            self.runs,
            run.directives + 1
        );
        let directive = Directive {
            v: xo_proto::PROTOCOL_VERSION,
            id: id.clone(),
            kind: d.kind,
            source: r.name().into(),
            description: d.description.clone(),
            rationale: d.rationale.clone(),
            priority: d.priority,
            files: d.files.clone(),
            at: self.clock.now_ms(),
        };
        if let Err(e) = typed::publish(
            &self.bus,
            &self.subjects.directive(r.name()),
            &directive,
            self.format,
        )
        .await
        {
            warn!(error = %e, "directive not announced");
        }
        let mut t = Task::new(
            id.clone(),
            if d.rationale.is_empty() {
                d.description.clone()
            } else {
                format!("{} (why: {})", d.description, d.rationale)
            },
            format!(
                "Directive from the {} supervisor ({:?}, {:?}): {}\nRationale: {}\nFiles: {}",
                r.name(),
                d.kind,
                d.priority,
                d.description,
                d.rationale,
                d.files.join(", ")
            ),
            self.cfg.review.directive_role.clone(),
        );
        t.lane = directive.lane();
        t.directive = Some(id);
        t.project = Some(self.cfg.review.project.clone());
        self.call(&q::Enqueue::new(vec![t])).await.is_some()
    }

    /// Compressed inputs (seed 001: summarised state, not the full context).
    fn inputs(
        &self,
        r: Reviewer,
        status: &q::QueueStatus,
        tasks: &[TaskRecord],
        docs: &DocList,
        log: &[ReviewRun],
        bootstrap: bool,
    ) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(s, "{}\n", remit(r));
        if bootstrap {
            s.push_str("BOOTSTRAP: the knowledge store is empty. Establish baselines (initial documents describing what exists) instead of comparing against documents.\n\n");
        }
        let _ = writeln!(s, "Goal: {}", status.goal.description);
        let mut milestones: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
        for t in tasks {
            if let Some(m) = &t.task.milestone {
                let e = milestones.entry(m).or_default();
                e.1 += 1;
                if t.state == TaskState::Completed {
                    e.0 += 1;
                }
            }
        }
        if !milestones.is_empty() {
            let ms: Vec<String> = milestones
                .iter()
                .map(|(m, (d, n))| format!("{m} ({d}/{n} done)"))
                .collect();
            let _ = writeln!(s, "Milestones: {}", ms.join(", "));
        }
        let mut done: Vec<&TaskRecord> = tasks
            .iter()
            .filter(|t| t.state == TaskState::Completed)
            .collect();
        done.sort_by_key(|t| t.updated_at);
        s.push_str("\nDone (most recent last):\n");
        for t in done.iter().rev().take(20).rev() {
            let summary = t.report.as_ref().map(|r| r.summary.as_str()).unwrap_or("");
            let _ = writeln!(s, "- {}: {} — {}", t.task.task_id, t.task.intent, summary);
        }
        s.push_str("\nPlanned:\n");
        for t in tasks
            .iter()
            .filter(|t| t.state == TaskState::Pending)
            .take(20)
        {
            let _ = writeln!(s, "- {}: {}", t.task.task_id, t.task.intent);
        }
        if !self.feedback.is_empty() {
            s.push_str("\nRecent validation feedback:\n");
            for f in &self.feedback {
                let _ = writeln!(s, "- {f}");
            }
        }
        s.push_str("\nKnowledge store:\n");
        for d in &docs.docs {
            let _ = writeln!(s, "- {} ({}): {}", d.id, d.status.as_str(), d.title);
        }
        if r == Reviewer::Assessor {
            s.push_str("\nReviewers' run log (most recent last):\n");
            for l in log.iter().rev().take(10).rev() {
                let _ = writeln!(
                    s,
                    "- {} after {} tasks: {} ({} directives)",
                    l.reviewer, l.task_count, l.summary, l.directives
                );
            }
        }
        s
    }
}
