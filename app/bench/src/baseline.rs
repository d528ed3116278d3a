//! The unavoidable work a report costs on one core (the radio check and
//! the MessagePack decode), measured in rounds before and after a soak: the
//! baseline `xo bench radio` sets the supervisor's CPU a report beside.

use std::time::Instant;

use xo_proto::SaluteReport;
use xo_proto::codec::{self, Format};
use xo_radio::{Radio, sample};
use xo_runtime::XoConfig;

use super::util::{max, median, min, verdict};

/// The soak's baseline, µs a report: the median of every round, and of
/// those before and after the soak.
pub(crate) struct SoakBaseline {
    pub(crate) all: f64,
    pub(crate) before: f64,
    pub(crate) after: f64,
}

/// Prints the soak's CPU per report beside the baseline measured before
/// and after it (the median of all their rounds), and its ratio to it.
pub(crate) fn cpu_per_report_line(
    per_report_us: f64,
    before: &Unavoidable,
    after: &Unavoidable,
) -> SoakBaseline {
    let (us_before, us_after) = (before.per_report_us(), after.per_report_us());
    let all: Vec<f64> = us_before.iter().chain(&us_after).copied().collect();
    let b = SoakBaseline {
        all: median(&all),
        before: median(&us_before),
        after: median(&us_after),
    };
    println!(
        "   cpu per report     {per_report_us:>11.2} µs   baseline decode + check {:.2} µs (this run: the median of {} rounds, {:.2} before the soak and {:.2} after, {:.2}–{:.2})   ratio {:.1}   target <= 3: {}",
        b.all,
        all.len(),
        b.before,
        b.after,
        min(&all),
        max(&all),
        per_report_us / b.all,
        verdict(per_report_us <= 3.0 * b.all)
    );
    b
}

/// Rounds of the detector's baseline, before the soak and again after it.
pub(crate) const BASELINE_ROUNDS: usize = 5;

/// A report's unavoidable work on one core, each round's: the radio check
/// (reports/s, a fresh `Radio` a round, so no round sees another's turns)
/// and the MessagePack decode of the same realistic reports.
pub(crate) struct Unavoidable {
    pub(crate) check: Vec<f64>,
    pub(crate) decode: Vec<f64>,
    pub(crate) reports: usize,
    pub(crate) size: usize,
    /// Each round's steering decisions.
    pub(crate) steering: Vec<usize>,
}

impl Unavoidable {
    /// Each round's decode + check, µs a report.
    pub(crate) fn per_report_us(&self) -> Vec<f64> {
        self.check
            .iter()
            .zip(&self.decode)
            .map(|(c, d)| 1e6 / d + 1e6 / c)
            .collect()
    }
}

/// Measures [`Unavoidable`] over `n` realistic reports from 1,000 units.
pub(crate) fn unavoidable(cfg: &XoConfig, n: u64, rounds: usize) -> anyhow::Result<Unavoidable> {
    let units = 1000u64;
    let per_unit = (n / units).max(1);
    let reports: Vec<SaluteReport> = (0..units)
        .flat_map(|u| (1..=per_unit).map(move |t| sample::realistic(u, t)))
        .collect();
    let encoded: Vec<Vec<u8>> = reports
        .iter()
        .map(|r| codec::encode(r, Format::Msgpack))
        .collect::<Result<_, _>>()?;
    let mut u = Unavoidable {
        check: Vec::with_capacity(rounds),
        decode: Vec::with_capacity(rounds),
        reports: reports.len(),
        size: encoded.iter().map(Vec::len).sum::<usize>() / encoded.len().max(1),
        steering: Vec::with_capacity(rounds),
    };
    for _ in 0..rounds.max(1) {
        let mut radio = Radio::new(cfg.roles());
        let begun = Instant::now();
        let mut steering = 0usize;
        for r in &reports {
            steering += std::hint::black_box(radio.check(r)).steering.len();
        }
        u.check
            .push(reports.len() as f64 / begun.elapsed().as_secs_f64());
        u.steering.push(steering);
        let begun = Instant::now();
        for e in &encoded {
            std::hint::black_box(codec::decode::<SaluteReport>(e, None, usize::MAX)?);
        }
        u.decode
            .push(encoded.len() as f64 / begun.elapsed().as_secs_f64());
    }
    Ok(u)
}

#[cfg(test)]
mod tests {
    use super::unavoidable;

    /// The baseline's rounds each measure the same work: a fresh check a
    /// round (one that kept the last round's turns would steer otherwise),
    /// and each round's decode + check is its own two rates'.
    #[test]
    fn each_baseline_round_checks_the_same_reports_afresh() {
        let cfg = xo_runtime::XoConfig::default();
        let u = unavoidable(&cfg, 3000, 3).unwrap();
        assert_eq!((u.check.len(), u.decode.len()), (3, 3));
        assert_eq!(u.reports, 3000);
        assert!(u.steering[0] > 0, "realistic reports steer some");
        assert!(
            u.steering.iter().all(|s| *s == u.steering[0]),
            "{:?}",
            u.steering
        );
        for (i, us) in u.per_report_us().into_iter().enumerate() {
            let expected = 1e6 / u.check[i] + 1e6 / u.decode[i];
            assert!(
                us > 0.0 && (us - expected).abs() < 1e-9,
                "round {i}: {us} against {expected}"
            );
        }
    }
}
