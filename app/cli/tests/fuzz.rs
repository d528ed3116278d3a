//! The fuzz targets of `xo_tests::fuzz` (every reader of outside input),
//! a short run each: `XO_FUZZ_CASES` cases (default 2000; the console a
//! tenth), the largest single allocation checked through the counting
//! allocator installed here. The long run is `xo bench fuzz --cases N`.

use xo_tests::fuzz;

#[global_allocator]
static ALLOC: fuzz::Peak<std::alloc::System> = fuzz::Peak(std::alloc::System);

#[test]
fn salute_codec() {
    fuzz::salute_codec();
}

#[test]
fn task_file() {
    fuzz::task_file();
}

#[test]
fn knowledge_documents() {
    fuzz::knowledge_documents();
}

#[test]
fn file_store_records() {
    fuzz::file_store_records();
}

#[test]
fn sensor_lines() {
    fuzz::sensor_lines();
}

#[test]
fn console_bodies() {
    fuzz::console_bodies();
}

#[test]
fn report_files() {
    fuzz::report_files();
}

#[test]
fn urls() {
    fuzz::urls();
}

#[test]
fn settings_values() {
    fuzz::settings_values();
}

#[test]
fn hook_payloads() {
    fuzz::hook_payloads();
}

/// The list `xo bench fuzz` runs is every target above.
#[test]
fn the_bench_runs_every_target() {
    let names: Vec<&str> = fuzz::TARGETS.iter().map(|(n, _)| *n).collect();
    let here = include_str!("fuzz.rs");
    for n in &names {
        assert!(
            here.contains(&format!("fn {n}() {{\n    fuzz::{n}();")),
            "{n}"
        );
    }
    assert_eq!(here.matches("#[test]\nfn ").count(), names.len() + 1);
    // The allocation bound is checked here: the counting allocator is in.
    assert!(fuzz::allocations_recorded());
}
