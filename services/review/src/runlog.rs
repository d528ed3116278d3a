//! The reviewers' run log (`<data>/<project>/reviews.jsonl`, one
//! [`ReviewRun`] a line, also published on `xo.event.review.<reviewer>`)
//! and the budgets read from it.

use std::path::{Path, PathBuf};

use tracing::warn;
use xo_proto::knowledge::ReviewRun;
use xo_runtime::XoConfig;
use xo_runtime::config::ReviewConfig;

/// The run log: `<data>/<project>/reviews.jsonl`.
pub fn run_log_path(cfg: &XoConfig) -> PathBuf {
    cfg.data_dir()
        .join(&cfg.review.project)
        .join("reviews.jsonl")
}

/// Reads the run log. A missing file is an empty log; a line that does not
/// parse is logged with its number and left out (it counts toward no budget).
pub async fn read_run_log(path: &Path) -> Vec<ReviewRun> {
    let text = match tokio::fs::read_to_string(path).await {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => {
            warn!(path = %path.display(), error = %e, "review run log unreadable; budgets read as unspent");
            return Vec::new();
        }
    };
    parse_run_log(path, &text)
}

/// The run log's lines (see [`read_run_log`]).
pub fn parse_run_log(path: &Path, text: &str) -> Vec<ReviewRun> {
    let mut runs = Vec::new();
    for (i, line) in text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
    {
        match serde_json::from_str(line) {
            Ok(r) => runs.push(r),
            Err(e) => {
                warn!(path = %path.display(), line = i + 1, error = %e, "review run log line does not parse; left out")
            }
        }
    }
    runs
}

/// Appends one run as a JSON line.
pub async fn append(path: &Path, run: &ReviewRun) -> std::io::Result<()> {
    xo_runtime::jsonl::append(path, run).await
}

/// Spent today (UTC) and on the project, in USD.
pub fn spent(log: &[ReviewRun], now_ms: u64) -> (f64, f64) {
    let day = now_ms / 86_400_000;
    let today = log
        .iter()
        .filter(|r| r.at / 86_400_000 == day)
        .map(|r| r.cost_usd)
        .sum();
    let total = log.iter().map(|r| r.cost_usd).sum();
    (today, total)
}

/// A review budget with no room left for a run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BudgetSpent {
    /// `review.daily_budget_usd`, today's runs (UTC).
    #[error("daily budget spent (${spent:.4} of ${budget:.2})")]
    Daily { spent: f64, budget: f64 },
    /// `review.project_budget_usd`, every run.
    #[error("project budget spent (${spent:.4} of ${budget:.2})")]
    Project { spent: f64, budget: f64 },
}

/// Whether the daily and project budgets leave room for a run; `Err` says
/// which is spent.
pub fn within_budget(
    cfg: &ReviewConfig,
    log: &[ReviewRun],
    now_ms: u64,
) -> Result<(), BudgetSpent> {
    let (today, total) = spent(log, now_ms);
    if cfg.daily_budget_usd > 0.0 && today >= cfg.daily_budget_usd {
        return Err(BudgetSpent::Daily {
            spent: today,
            budget: cfg.daily_budget_usd,
        });
    }
    if cfg.project_budget_usd > 0.0 && total >= cfg.project_budget_usd {
        return Err(BudgetSpent::Project {
            spent: total,
            budget: cfg.project_budget_usd,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(at: u64, cost: f64) -> ReviewRun {
        ReviewRun {
            v: 1,
            reviewer: "code_style".into(),
            project: "p".into(),
            task_count: 0,
            trigger: "interval".into(),
            outcome: xo_proto::knowledge::ReviewOutcome::Ran,
            summary: String::new(),
            directives: 0,
            documents: 0,
            verdict: None,
            converging: false,
            bootstrap: false,
            tokens_in: 0,
            tokens_out: 0,
            cost_usd: cost,
            at,
        }
    }

    #[test]
    fn budget_sums() {
        let run = sample;
        let day = 86_400_000u64;
        let log = [
            run(day * 10 + 5, 0.5),
            run(day * 11 + 1, 0.25),
            run(day * 11 + 2, 0.25),
        ];
        assert_eq!(spent(&log, day * 11 + 100), (0.5, 1.0));
        let mut cfg = ReviewConfig {
            daily_budget_usd: 0.5,
            ..Default::default()
        };
        assert!(
            within_budget(&cfg, &log, day * 11 + 100)
                .unwrap_err()
                .to_string()
                .contains("daily budget")
        );
        assert_eq!(
            within_budget(&cfg, &log, day * 11 + 100),
            Err(BudgetSpent::Daily {
                spent: 0.5,
                budget: 0.5
            })
        );
        cfg.daily_budget_usd = 0.0;
        cfg.project_budget_usd = 2.0;
        assert!(within_budget(&cfg, &log, day * 11 + 100).is_ok());
        cfg.project_budget_usd = 1.0;
        assert!(
            within_budget(&cfg, &log, day * 11 + 100)
                .unwrap_err()
                .to_string()
                .contains("project budget")
        );
        assert!(matches!(
            within_budget(&cfg, &log, day * 11 + 100),
            Err(BudgetSpent::Project { budget: 1.0, .. })
        ));
    }

    #[tokio::test]
    async fn run_log_round_trip_keeps_good_lines_around_a_bad_one() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("p").join("reviews.jsonl");
        assert!(read_run_log(&path).await.is_empty());
        let mut a = sample(1, 0.25);
        a.reviewer = "design".into();
        append(&path, &a).await.unwrap();
        tokio::fs::write(
            &path,
            format!(
                "{}not json\n",
                tokio::fs::read_to_string(&path).await.unwrap()
            ),
        )
        .await
        .unwrap();
        append(&path, &sample(2, 0.5)).await.unwrap();
        let log = read_run_log(&path).await;
        assert_eq!(log.len(), 2);
        assert_eq!(log[0].reviewer, "design");
        assert_eq!(log[1].cost_usd, 0.5);
    }
}
