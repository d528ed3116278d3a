//! `xo bench pipeline`: the supervised pipeline's own cost per task, the
//! agent left out — compose the prompt, parse the reply, validate 20
//! criteria against real files, apply the output template — next to a
//! baseline measured in the same run: reading the same files and
//! concatenating the same prompt text by hand.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use xo_pipeline::compose::{Context as PromptContext, PromptKind, Snapshot, Templates, compose};
use xo_pipeline::driver::AgentOutput;
use xo_pipeline::halt::parse_reply;
use xo_pipeline::sandbox::Sandbox;
use xo_pipeline::validate::{Checker, format_output};
use xo_proto::queue::Task;
use xo_runtime::XoConfig;

#[derive(Debug, clap::Args)]
pub struct PipelineArgs {
    /// Tasks measured.
    #[arg(long, default_value_t = 5_000)]
    pub tasks: usize,
    #[arg(long)]
    pub json: bool,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

pub async fn run(_cfg: &XoConfig, args: PipelineArgs) -> anyhow::Result<ExitCode> {
    let dir = super::util::tempfile_dir::Dir::new("pipeline")?;
    let sandbox = Sandbox::open(&dir.0).context("bench sandbox")?;
    let project = sandbox.project_dir("bench").context("bench project")?;
    let mut task = Task::new(
        "bench-1",
        "implement the parser module",
        "Write src/parser.rs with a tokenizer and a recursive-descent parser; keep the public API small.",
        "coder",
    );
    for i in 0..10 {
        let p = project.join(format!("src/f{i}.rs"));
        std::fs::create_dir_all(p.parent().unwrap_or(&project))?;
        std::fs::write(&p, format!("pub fn f{i}() -> u32 {{ {i} }}\n").repeat(20))?;
        task.acceptance_criteria
            .push(format!("file exists: src/f{i}.rs"));
        task.acceptance_criteria.push(if i % 2 == 0 {
            format!("file contains: src/f{i}.rs :: pub fn f{i}()")
        } else {
            format!("output contains: step {i} done")
        });
    }
    let global = "You are part of a supervised fleet. Follow the reply format exactly.".repeat(4);
    let project_t = "Project rules: Rust 2024, no unsafe, tests for every change.".repeat(4);
    let role_t = "Role: coder. Small diffs, run the tests.".repeat(4);
    let stdout: String = (0..10)
        .map(|i| format!("step {i} done\n"))
        .collect::<String>()
        + "{\"status\": \"ok\", \"message\": \"parser written\"}";
    let out = AgentOutput {
        stdout: stdout.clone(),
        exit_code: Some(0),
        ..Default::default()
    };
    let env = xo_pipeline::proc::allowed_env(&["PATH".into()], &[]);
    let checker = Checker {
        sandbox: &sandbox,
        cwd: &project,
        env: &env,
        timeout: Duration::from_secs(60),
        max_output: 1 << 20,
        confine: None,
    };
    let templates = Templates {
        global: &global,
        project: &project_t,
        role: &role_t,
    };
    let mut samples = Vec::with_capacity(args.tasks);
    let mut passed = 0usize;
    for _ in 0..args.tasks {
        let t0 = Instant::now();
        let ctx = PromptContext {
            snapshot: Snapshot {
                project_id: "bench".into(),
                sandbox_root: project.display().to_string(),
                goal: Some("a parser".into()),
                attempt: 1,
                ..Default::default()
            },
            ..Default::default()
        };
        let prompt = compose(PromptKind::Prompt, &templates, &task, &ctx, None);
        let (reply, _) = parse_reply(&out.stdout, false, xo_pipeline::project::ReplyWords::Strict)
            .map_err(|e| anyhow::anyhow!(e))?;
        let v = checker.validate(&task, &out, &reply).await;
        if let Ok(ok) = v.accept(reply) {
            let f = format_output(
                "[{task_id}] {status}: {message}",
                &ok,
                &task.task_id,
                &out.stdout,
            );
            std::hint::black_box((&prompt, &f));
            passed += 1;
        }
        samples.push(t0.elapsed());
    }
    anyhow::ensure!(
        passed == args.tasks,
        "validation failed in the bench ({passed}/{})",
        args.tasks
    );
    // Baseline: the unavoidable work — read the files the criteria name and
    // concatenate the prompt's text.
    let mut base = Vec::with_capacity(args.tasks);
    for _ in 0..args.tasks {
        let t0 = Instant::now();
        let mut text = String::new();
        for s in [&global, &project_t, &role_t, &task.instructions] {
            text.push_str(s);
            text.push_str("\n\n");
        }
        for c in &task.acceptance_criteria {
            text.push_str(c);
            text.push('\n');
        }
        for i in 0..10 {
            let body = std::fs::read_to_string(project.join(format!("src/f{i}.rs")))?;
            std::hint::black_box(body.len());
        }
        std::hint::black_box(&text);
        base.push(t0.elapsed());
    }
    samples.sort();
    base.sort();
    let mean = |v: &[Duration]| v.iter().sum::<Duration>() / v.len() as u32;
    let (m, p50, p99) = (
        mean(&samples),
        percentile(&samples, 0.5),
        percentile(&samples, 0.99),
    );
    let bm = mean(&base);
    let ratio = m.as_secs_f64() / bm.as_secs_f64();
    let met = m < Duration::from_millis(1);
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "tasks": args.tasks, "criteria": task.acceptance_criteria.len(),
                "mean_us": m.as_secs_f64() * 1e6, "p50_us": p50.as_secs_f64() * 1e6,
                "p99_us": p99.as_secs_f64() * 1e6, "baseline_mean_us": bm.as_secs_f64() * 1e6,
                "ratio": ratio, "target_met": met,
            })
        );
    } else {
        println!(
            "pipeline overhead per task (compose + parse + validate {} criteria + format), {} tasks:",
            task.acceptance_criteria.len(),
            args.tasks
        );
        println!(
            "  mean {:.1} µs   p50 {:.1} µs   p99 {:.1} µs   target < 1 ms: {}",
            m.as_secs_f64() * 1e6,
            p50.as_secs_f64() * 1e6,
            p99.as_secs_f64() * 1e6,
            if met { "met" } else { "NOT met" }
        );
        println!(
            "  baseline (read the 10 files + concatenate the prompt): mean {:.1} µs; pipeline ÷ baseline = {ratio:.2}",
            bm.as_secs_f64() * 1e6
        );
    }
    Ok(if met {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
