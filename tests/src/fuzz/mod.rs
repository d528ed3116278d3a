//! Property-based fuzzing of every reader of outside input: the SALUTE
//! codec (and its direct MessagePack reader, held to serde's answer), the
//! task-file parser, the knowledge document parser, the file store's record
//! reader and repair, the agent sensors' line parsers, the console's
//! request bodies (over HTTP, against a running console and queue), report
//! files in seed 000's shape and every timestamp, URLs (NATS credentials
//! and their redaction, a login's return path), operator settings, and the
//! hook payloads agents send.
//!
//! Each target gets random bytes, random JSON and mutations of valid input
//! (bytes flipped, cut, repeated, spliced). What must hold: no panic; every
//! rejection is an error that names what was wrong; and no input makes a
//! reader allocate by what it claims rather than what it has — the largest
//! single allocation while reading is bounded by the input's size (plus the
//! 1 MiB serde allows itself for a collection's claimed length).
//!
//! The run is a fixed number of cases per target ([`set_cases`], else
//! `XO_FUZZ_CASES`, default 2000; the console gets a tenth), printed with
//! the time taken. The short run is `cargo test -p xo-cli --test fuzz`;
//! the long one `xo bench fuzz --cases 200000` (the same targets, [`TARGETS`]).
//!
//! The allocation bound is checked where [`Peak`] is the global allocator
//! (the test and `xo-bench` install it); elsewhere nothing is recorded and
//! the bound holds trivially.

use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Instant;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{Value, json};
use xo_proto::codec::{self, Message};
use xo_proto::{Format, SaluteReport};

mod edges;
mod readers;

pub use edges::{console_bodies, hook_payloads, report_files, settings_values, urls};
pub use readers::{file_store_records, knowledge_documents, salute_codec, sensor_lines, task_file};

// --- the largest single allocation, per thread -----------------------------

/// An allocator (`A`: the system's, mimalloc) that records the largest
/// single allocation of each thread once a fuzz target has started (before
/// that it costs one relaxed load an allocation): install it with
/// `#[global_allocator] static A: Peak<System> = Peak(System);`.
#[derive(Debug)]
pub struct Peak<A>(pub A);

/// Set by the first [`measured`]: allocations are recorded from then on.
static RECORDING: AtomicBool = AtomicBool::new(false);

thread_local! {
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

fn record(size: usize) {
    if RECORDING.load(Ordering::Relaxed) {
        let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
    }
}

// The one place unsafe code is allowed: around another allocator.
#[allow(unsafe_code)]
unsafe impl<A: GlobalAlloc> GlobalAlloc for Peak<A> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        record(layout.size());
        unsafe { self.0.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        record(layout.size());
        unsafe { self.0.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { self.0.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        record(new_size);
        unsafe { self.0.realloc(ptr, layout, new_size) }
    }
}

/// Runs `f` and returns its result with the largest single allocation made
/// on this thread meanwhile (0 where [`Peak`] is not the allocator).
fn measured<T>(f: impl FnOnce() -> T) -> (T, usize) {
    RECORDING.store(true, Ordering::Relaxed);
    LARGEST.with(|l| l.set(0));
    let out = f();
    (out, LARGEST.with(|l| l.get()))
}

/// Whether [`Peak`] is the global allocator: a 1 MiB allocation is seen.
pub fn allocations_recorded() -> bool {
    let (v, largest) = measured(|| vec![0u8; 1 << 20]);
    drop(v);
    largest >= 1 << 20
}

/// What reading `len` bytes may allocate at once: a few times the input
/// (strings and parsed values), and serde's own cap for a claimed length.
fn allowed(len: usize) -> usize {
    (1 << 20) + 16 * len + 4096
}

fn check_alloc(target: &str, len: usize, largest: usize) -> Result<(), TestCaseError> {
    prop_assert!(
        largest <= allowed(len),
        "{target}: {largest} bytes allocated at once for {len} bytes of input"
    );
    Ok(())
}

/// Cases per target set by [`set_cases`] (0: `XO_FUZZ_CASES` or 2000).
static CASES: AtomicU32 = AtomicU32::new(0);

/// The cases each target runs (the console a tenth of them).
pub fn set_cases(n: u32) {
    CASES.store(n, Ordering::Relaxed);
}

fn cases(scale: u32) -> u32 {
    let base = match CASES.load(Ordering::Relaxed) {
        0 => std::env::var("XO_FUZZ_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(2000),
        n => n,
    };
    (base / scale).max(10)
}

/// Runs one target for its number of cases and prints the figures.
fn fuzz<S: Strategy>(
    name: &str,
    scale: u32,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) {
    let n = cases(scale);
    let mut runner = TestRunner::new(Config {
        cases: n,
        failure_persistence: None,
        ..Config::default()
    });
    let t = Instant::now();
    let r = runner.run(&strategy, test);
    let took = t.elapsed();
    println!(
        "fuzz {name}: {n} cases in {:.2} s ({:.0} cases/s)",
        took.as_secs_f64(),
        n as f64 / took.as_secs_f64().max(1e-9)
    );
    if let Err(e) = r {
        panic!("fuzz {name}: {e}");
    }
}

// --- input shapes ------------------------------------------------------------

/// Any JSON value, keys drawn from `keys` (so that parsers see their own
/// fields with values of every type) or random.
fn json_value(keys: &'static [&'static str]) -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        any::<f64>().prop_map(|f| json!(f)),
        ".{0,24}".prop_map(Value::String),
        prop::sample::select(keys).prop_map(|k| json!(k)),
    ];
    leaf.prop_recursive(4, 48, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec(
                (
                    prop_oneof![
                        3 => prop::sample::select(keys).prop_map(String::from),
                        1 => "[a-z_]{1,8}",
                    ],
                    inner
                ),
                0..6
            )
            .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

/// A change to valid input: a byte set, a span cut, a span repeated, a
/// random run spliced in, or the input cut short.
#[derive(Debug, Clone)]
enum Mutation {
    Set(usize, u8),
    Cut(usize, usize),
    Repeat(usize, usize),
    Splice(usize, Vec<u8>),
    Truncate(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        4 => (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Set(i, b)),
        1 => (any::<usize>(), 0usize..64).prop_map(|(i, n)| Mutation::Cut(i, n)),
        1 => (any::<usize>(), 0usize..64).prop_map(|(i, n)| Mutation::Repeat(i, n)),
        1 => (any::<usize>(), prop::collection::vec(any::<u8>(), 0..16))
            .prop_map(|(i, b)| Mutation::Splice(i, b)),
        1 => any::<usize>().prop_map(Mutation::Truncate),
    ]
}

fn mutate(mut data: Vec<u8>, ms: &[Mutation]) -> Vec<u8> {
    for m in ms {
        let len = data.len();
        if len == 0 {
            break;
        }
        match m {
            Mutation::Set(i, b) => data[i % len] = *b,
            Mutation::Cut(i, n) => {
                let at = i % len;
                let end = (at + n).min(len);
                data.drain(at..end);
            }
            Mutation::Repeat(i, n) => {
                let at = i % len;
                let end = (at + n).min(len);
                let span = data[at..end].to_vec();
                data.splice(end..end, span);
            }
            Mutation::Splice(i, b) => {
                let at = i % len;
                data.splice(at..at, b.iter().copied());
            }
            Mutation::Truncate(i) => data.truncate(i % len),
        }
    }
    data
}

fn mutations() -> impl Strategy<Value = Vec<Mutation>> {
    prop::collection::vec(mutation(), 1..5)
}

/// Every target, by name: what the test runs a short while and `xo bench
/// fuzz` long.
pub const TARGETS: [(&str, fn()); 10] = [
    ("salute_codec", salute_codec),
    ("task_file", task_file),
    ("knowledge_documents", knowledge_documents),
    ("file_store_records", file_store_records),
    ("sensor_lines", sensor_lines),
    ("console_bodies", console_bodies),
    ("report_files", report_files),
    ("urls", urls),
    ("settings_values", settings_values),
    ("hook_payloads", hook_payloads),
];
