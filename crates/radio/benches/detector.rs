//! Detector throughput on realistic reports (20-action window), against the
//! cost of decoding the same report from MessagePack, measured in the same run.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::hint::black_box;
use xo_proto::codec::{self, Format};
use xo_radio::{Radio, sample};

fn detector(c: &mut Criterion) {
    let reports: Vec<_> = (0..1000u64)
        .flat_map(|u| (1..=10u64).map(move |t| sample::realistic(u, t)))
        .collect();
    let encoded: Vec<Vec<u8>> = reports
        .iter()
        .map(|r| codec::encode(r, Format::Msgpack).expect("encodes"))
        .collect();
    let mut g = c.benchmark_group("radio");
    g.throughput(Throughput::Elements(reports.len() as u64));
    g.bench_function("check_10k_reports", |b| {
        b.iter(|| {
            let mut radio = Radio::default();
            let mut n = 0usize;
            for r in &reports {
                n += radio.check(black_box(r)).steering.len();
            }
            black_box(n)
        })
    });
    let worst: Vec<_> = (0..1000u64)
        .flat_map(|u| (1..=10u64).map(move |t| sample::anomalous(u, t)))
        .collect();
    g.bench_function("check_10k_anomalous_reports", |b| {
        b.iter(|| {
            let mut radio = Radio::default();
            let mut n = 0usize;
            for r in &worst {
                n += radio.check(black_box(r)).steering.len();
            }
            black_box(n)
        })
    });
    g.bench_function("baseline_decode_10k_reports", |b| {
        b.iter(|| {
            for e in &encoded {
                let r: xo_proto::SaluteReport =
                    codec::decode(black_box(e), None, usize::MAX).expect("decodes");
                black_box(r);
            }
        })
    });
    g.finish();
}

criterion_group!(benches, detector);
criterion_main!(benches);
