//! The report pump's reader (`xo_bus::wire`) beside the NATS client's
//! subscriber it replaced (issue 43, item 2): the same reports published
//! to each, read on a thread of its own with a runtime there (as the pump
//! reads), and the reading thread's CPU a message, in alternating rounds.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use bytes::Bytes;
use xo_bus::{Bus, Headers, NatsBus, nats::ConnectOptions};
use xo_proto::codec::{self, CONTENT_TYPE, Format};
use xo_radio::sample;

use super::flow::paced;
use super::util::{median, thread_cpu};

/// Which reader.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Client,
    Wire,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Client => "NATS client's",
            Kind::Wire => "wire",
        }
    }
}

/// Reads `n` messages of `subject` on a thread of its own (connected
/// there, as the pump's connection is), counting them in `got`; answers
/// the thread's CPU from the first message to the last. `ready` says the
/// subscription is live.
fn reader(
    kind: Kind,
    url: String,
    opts: ConnectOptions,
    n: u64,
    got: Arc<AtomicU64>,
    ready: tokio::sync::oneshot::Sender<()>,
) -> std::thread::JoinHandle<anyhow::Result<Duration>> {
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(tokio::task::unconstrained(async move {
            let bus = NatsBus::connect(&url, opts).await?;
            let mut sub = match kind {
                Kind::Client => Bus::Nats(bus.clone()).subscribe("bench.reader.*").await?,
                Kind::Wire => bus
                    .wire("bench reader", "bench.reader.*")
                    .await
                    .context("a plain connection is read off the wire")??,
            };
            let _ = ready.send(());
            let mut from = None;
            for _ in 0..n {
                let next = match sub.try_next() {
                    Some(m) => Some(m),
                    None => tokio::time::timeout(Duration::from_secs(10), sub.next())
                        .await
                        .ok()
                        .flatten(),
                };
                if next.is_none() {
                    bail!(
                        "no message for 10 s after {} of {n} (connections lost: {}, messages the client dropped: {})",
                        got.load(Ordering::Relaxed),
                        bus.outages(),
                        bus.dropped()
                    );
                }
                if from.is_none() {
                    from = Some(thread_cpu()?.total());
                }
                got.fetch_add(1, Ordering::Relaxed);
            }
            Ok(thread_cpu()?.total() - from.unwrap_or_default())
        }))
    })
}

/// Prints the two readers side by side: `n` reports a round, `rounds`
/// rounds of each, alternating.
pub(crate) async fn run(
    url: &str,
    opts: ConnectOptions,
    n: usize,
    rounds: usize,
) -> anyhow::Result<Vec<(String, serde_json::Value)>> {
    let units = 1000u64;
    let payloads: Vec<(String, Bytes)> = (0..n as u64)
        .map(|i| {
            let r = sample::realistic(i % units, 2 + i / units);
            let b = codec::encode(&r, Format::Msgpack).map(Bytes::from)?;
            Ok((r.unit.unit, b))
        })
        .collect::<anyhow::Result<_>>()?;
    let size = payloads.iter().map(|p| p.1.len()).sum::<usize>() / n.max(1);
    let mut headers = Headers::new();
    headers.insert(CONTENT_TYPE, codec::MSGPACK);
    let publisher = Bus::Nats(NatsBus::connect(url, opts.clone()).await?);
    let (mut client, mut wire) = (Vec::new(), Vec::new());
    for _ in 0..rounds.max(1) {
        for kind in [Kind::Client, Kind::Wire] {
            let got = Arc::new(AtomicU64::new(0));
            let (ready, live) = tokio::sync::oneshot::channel();
            let thread = reader(kind, url.into(), opts.clone(), n as u64, got.clone(), ready);
            live.await
                .context("the reader ended before it subscribed")?;
            let count = got.clone();
            let sent = paced(
                &publisher,
                &payloads,
                10_000,
                &headers,
                |unit| format!("bench.reader.{unit}"),
                move || count.load(Ordering::Relaxed),
            )
            .await;
            // A stall is told with what the reader saw (it gives up 10 s
            // after its last message).
            let read = tokio::task::spawn_blocking(move || thread.join())
                .await?
                .map_err(|_| anyhow::anyhow!("the reader panicked"))?;
            let cpu = match (sent, read) {
                (Ok(_), Ok(cpu)) => cpu,
                (sent, read) => bail!(
                    "the {} reader: {}; the reader: {}",
                    kind.name(),
                    sent.err().map_or("all sent".into(), |e| e.to_string()),
                    read.err().map_or("read all".into(), |e| e.to_string())
                ),
            };
            let per = cpu.as_secs_f64() * 1e6 / n as f64;
            match kind {
                Kind::Client => client.push(per),
                Kind::Wire => wire.push(per),
            }
        }
    }
    let (c, w) = (median(&client), median(&wire));
    println!(
        "== the report pump's reader ({n} reports of ~{size} bytes, read on a thread of its own; the reading thread's CPU a report, medians of {} rounds alternating)",
        rounds.max(1)
    );
    let shown = |v: &[f64]| {
        v.iter()
            .map(|x| format!("{x:.2}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    println!(
        "   baseline: the NATS client's subscriber   {c:>6.2} µs   (rounds: {})",
        shown(&client)
    );
    println!(
        "   read off the wire (xo_bus::wire)         {w:>6.2} µs   (rounds: {})   wire ÷ client = {:.2}",
        shown(&wire),
        w / c
    );
    Ok(vec![
        ("reader_client_us".into(), c.into()),
        ("reader_wire_us".into(), w.into()),
    ])
}
