//! What the radio and sharded benches share: the raw NATS baseline's
//! counter, paced publishing with its flow control, and the latency figures
//! next to raw request/reply.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use xo_bus::{Bus, Headers, typed};
use xo_proto::codec::{self, CONTENT_TYPE, Format};
use xo_proto::{Pace, Steering};
use xo_radio::sample;

use super::util::{pct, us, verdict};

/// Counts what arrives on `bench.raw.*` (the raw NATS baseline's
/// subscriber), until the task is aborted.
pub(super) async fn raw_counter(
    bus: &Bus,
) -> anyhow::Result<(Arc<AtomicU64>, tokio::task::JoinHandle<()>)> {
    let got = Arc::new(AtomicU64::new(0));
    let mut sub = bus.subscribe("bench.raw.*").await?;
    bus.flush().await?;
    let g = got.clone();
    let counter = tokio::spawn(async move {
        while sub.next().await.is_some() {
            g.fetch_add(1, Ordering::Relaxed);
        }
    });
    Ok((got, counter))
}

/// Sorts both, prints p50 and p99 of each under `title` and the p99 ratio
/// with its verdict; returns the ratio.
pub(super) fn print_latency(title: &str, steer: &mut [Duration], raw: &mut [Duration]) -> f64 {
    raw.sort();
    steer.sort();
    let ratio = us(pct(steer, 0.99)) / us(pct(raw, 0.99));
    println!("{title}");
    println!(
        "   report -> steering p50 {:>8.0} us   p99 {:>8.0} us",
        us(pct(steer, 0.5)),
        us(pct(steer, 0.99))
    );
    println!(
        "   baseline: req/reply p50 {:>7.0} us   p99 {:>8.0} us",
        us(pct(raw, 0.5)),
        us(pct(raw, 0.99))
    );
    println!(
        "   p99 ratio          {ratio:>12.2}   target <= 2: {}",
        verdict(ratio <= 2.0)
    );
    ratio
}

/// `samples` request/reply round trips of `payload` through an echo
/// responder on `responder`'s connection: the baseline of steering latency.
pub(super) async fn reqreply_latency(
    publisher: &Bus,
    responder: &Bus,
    payload: &Bytes,
    samples: usize,
) -> anyhow::Result<Vec<Duration>> {
    let mut msgpack = Headers::new();
    msgpack.insert(CONTENT_TYPE, codec::MSGPACK);
    let mut echo = responder.subscribe("bench.echo").await?;
    responder.flush().await?;
    let r2 = responder.clone();
    let echo_task = tokio::spawn(async move {
        while let Some(m) = echo.next().await {
            if let Some(reply) = m.reply {
                let _ = r2.publish(&reply, m.headers, m.payload).await;
            }
        }
    });
    let mut lat = Vec::with_capacity(samples);
    for _ in 0..samples {
        let t = Instant::now();
        publisher
            .request(
                "bench.echo",
                msgpack.clone(),
                payload.clone(),
                Duration::from_secs(5),
            )
            .await?;
        lat.push(t.elapsed());
    }
    echo_task.abort();
    Ok(lat)
}

/// One report → steering round trip: `unit`'s report for `turn` with a
/// PACE emergency published, then its steering awaited on `steer_sub` (the
/// unit's steering subject) for up to 5 s. `None`: none came in time.
async fn round_trip(
    publisher: &Bus,
    steer_sub: &mut xo_bus::Subscription,
    subjects: &xo_proto::Subjects,
    unit: &str,
    turn: u64,
) -> anyhow::Result<Option<Duration>> {
    let mut r = sample::realistic(7, turn);
    r.unit.unit = unit.into();
    r.unit.pace = Pace::Emergency;
    let (h, body) = typed::encode(&r, Format::Msgpack)?;
    let t = Instant::now();
    publisher.publish(&subjects.salute(unit), h, body).await?;
    let answered = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(m) = steer_sub.next().await {
            let s: Steering = typed::decode(&m, usize::MAX)?;
            if s.turn == turn {
                return Ok(t.elapsed());
            }
        }
        bail!("steering subscription closed")
    })
    .await;
    match answered {
        Ok(done) => done.map(Some),
        Err(_) => Ok(None),
    }
}

/// `samples` times: a report with a PACE emergency published, its steering
/// received (whichever supervisor holds the unit).
pub(super) async fn steering_latency(
    publisher: &Bus,
    subjects: &xo_proto::Subjects,
    samples: usize,
) -> anyhow::Result<Vec<Duration>> {
    let unit = "bench-latency";
    let mut steer_sub = publisher.subscribe(&subjects.steer(unit)).await?;
    publisher.flush().await?;
    let mut lat = Vec::with_capacity(samples);
    for turn in 1..=samples as u64 {
        let t = round_trip(publisher, &mut steer_sub, subjects, unit, turn)
            .await?
            .context("no steering within 5 s")?;
        lat.push(t);
    }
    Ok(lat)
}

/// Report → steering round trips while other load runs, one every half
/// second until `stop`: the latencies, and how many probes had no steering
/// within 5 s (a report lost under load: counted, not fatal), and how
/// many reports it sent.
pub(super) async fn steering_probe(
    publisher: Bus,
    subjects: xo_proto::Subjects,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<(Vec<Duration>, u64, u64)> {
    let unit = "bench-probe";
    let mut steer_sub = publisher.subscribe(&subjects.steer(unit)).await?;
    publisher.flush().await?;
    let (mut lat, mut missed) = (Vec::new(), 0u64);
    let mut turn = 0u64;
    while !*stop.borrow() {
        turn += 1;
        match round_trip(&publisher, &mut steer_sub, &subjects, unit, turn).await? {
            Some(t) => lat.push(t),
            None => missed += 1,
        }
        tokio::select! {
            _ = stop.changed() => {}
            () = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
    }
    Ok((lat, missed, turn))
}

/// Publishes every payload in windows, waiting after each window until
/// `done()` has caught up; returns messages per second.
pub(super) async fn paced(
    bus: &Bus,
    payloads: &[(String, Bytes)],
    window: usize,
    headers: &Headers,
    // From a payload's unit to the subject it is published on.
    subject: impl Fn(&str) -> String,
    done: impl Fn() -> u64,
) -> anyhow::Result<f64> {
    let base = done();
    let begun = Instant::now();
    let mut sent = 0u64;
    for chunk in payloads.chunks(window) {
        for (unit, p) in chunk {
            bus.publish(&subject(unit), headers.clone(), p.clone())
                .await?;
        }
        sent += chunk.len() as u64;
        bus.flush().await?;
        let mut idle = Instant::now();
        let mut last = done();
        while done() - base < sent {
            tokio::time::sleep(Duration::from_micros(200)).await;
            let now = done();
            if now != last {
                last = now;
                idle = Instant::now();
            } else if idle.elapsed() > Duration::from_secs(10) {
                bail!("stalled: {} of {sent} messages arrived", now - base);
            }
        }
    }
    Ok(sent as f64 / begun.elapsed().as_secs_f64())
}
