//! The house rule (docs/architecture.md): services depend on `proto` and the
//! libraries only, never on another service; no library depends on a
//! service; only `cli` (and this test crate) may depend on services. Read
//! from `cargo metadata`, so a new dependency that breaks the rule fails
//! here, and a new crate must be given its kind below before anything can
//! depend on it.
//!
//! Also kept true here: the crate table of docs/architecture.md is the
//! workspace (every crate, its folder, its kind, and a library's own
//! dependencies), and the pure libraries (`radio`, `sensor`, `compose`) do
//! no I/O: no tokio, sockets or processes in their dependency graph, no
//! `std::fs`, `std::net`, `std::process` or `tokio` in their source.

use std::collections::BTreeMap;
use std::process::Command;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Contract,
    Library,
    Service,
    /// Starts services (the fabric): may depend on them; only the binary,
    /// the benches and the tests may depend on it.
    Assembly,
    Benches,
    Binary,
    Tests,
}

fn kind(name: &str) -> Option<Kind> {
    Some(match name {
        "xo-proto" => Kind::Contract,
        "xo-bus" | "xo-radio" | "xo-runtime" | "xo-pipeline" | "xo-sensor" | "xo-compose" => {
            Kind::Library
        }
        "xo-supervisor" | "xo-queue" | "xo-runner" | "xo-knowledge" | "xo-review" | "xo-fleet"
        | "xo-console" | "xo-notify" => Kind::Service,
        "xo-fabric" => Kind::Assembly,
        "xo-bench" => Kind::Benches,
        "xo-cli" => Kind::Binary,
        "xo-tests" => Kind::Tests,
        _ => return None,
    })
}

/// Whether a crate of kind `from` may depend (normally, not for its tests)
/// on one of kind `to`.
fn allowed(from: Kind, to: Kind) -> bool {
    match from {
        Kind::Contract => false,
        Kind::Library => matches!(to, Kind::Contract | Kind::Library),
        Kind::Service => matches!(to, Kind::Contract | Kind::Library),
        Kind::Assembly => matches!(to, Kind::Contract | Kind::Library | Kind::Service),
        Kind::Benches => !matches!(to, Kind::Binary | Kind::Benches),
        Kind::Binary => to != Kind::Binary,
        // The test harness may not use what it tests the binary with.
        Kind::Tests => !matches!(to, Kind::Binary | Kind::Benches),
    }
}

/// Our crates and their normal dependencies on our crates.
fn graph() -> BTreeMap<String, Vec<String>> {
    let meta = metadata();
    let mut g = BTreeMap::new();
    for p in meta["packages"].as_array().unwrap() {
        let name = p["name"].as_str().unwrap().to_string();
        let deps = p["dependencies"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["kind"].is_null() && d["path"].is_string())
            .map(|d| d["name"].as_str().unwrap().to_string())
            .collect();
        g.insert(name, deps);
    }
    g
}

fn violations(g: &BTreeMap<String, Vec<String>>) -> Vec<String> {
    let mut bad = Vec::new();
    for (from, deps) in g {
        let Some(fk) = kind(from) else {
            bad.push(format!(
                "{from}: a crate of no known kind; give it one in app/cli/tests/layering.rs and docs/architecture.md"
            ));
            continue;
        };
        for to in deps {
            match kind(to) {
                None => bad.push(format!("{from} -> {to}: {to} is of no known kind")),
                Some(tk) if !allowed(fk, tk) => {
                    bad.push(format!("{from} ({fk:?}) may not depend on {to} ({tk:?})"))
                }
                Some(_) => {}
            }
        }
    }
    bad
}

#[test]
fn services_depend_on_proto_and_libraries_only() {
    let g = graph();
    // Every service the design names is a crate of this workspace.
    for s in [
        "xo-supervisor",
        "xo-queue",
        "xo-runner",
        "xo-knowledge",
        "xo-review",
        "xo-fleet",
        "xo-pipeline",
    ] {
        assert!(g.contains_key(s), "{s} is not in the workspace");
    }
    let bad = violations(&g);
    assert!(bad.is_empty(), "layering broken:\n{}", bad.join("\n"));
}

#[test]
fn the_check_catches_a_service_on_a_service() {
    // The rule itself, on a graph with the fault of the old layout
    // (knowledge used the runner's pipeline): it must be reported.
    let mut g = BTreeMap::new();
    g.insert(
        "xo-knowledge".to_string(),
        vec!["xo-proto".to_string(), "xo-runner".to_string()],
    );
    g.insert("xo-runner".to_string(), vec!["xo-pipeline".to_string()]);
    g.insert("xo-pipeline".to_string(), vec!["xo-supervisor".to_string()]);
    g.insert("xo-mystery".to_string(), vec![]);
    let bad = violations(&g);
    assert!(
        bad.iter()
            .any(|b| b.starts_with("xo-knowledge (Service) may not depend on xo-runner")),
        "{bad:?}"
    );
    assert!(
        bad.iter()
            .any(|b| b.starts_with("xo-pipeline (Library) may not depend on xo-supervisor")),
        "{bad:?}"
    );
    assert!(bad.iter().any(|b| b.starts_with("xo-mystery")), "{bad:?}");
    assert_eq!(bad.len(), 3, "{bad:?}");
}

/// The workspace's root (this crate is `app/cli/`).
fn root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the workspace's root")
}

fn metadata() -> serde_json::Value {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--offline",
            "--no-deps",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// One row of the crate table: name, folder, kind, what it depends on.
#[derive(Debug, Clone, PartialEq)]
struct Row {
    name: String,
    folder: String,
    kind: String,
    deps: String,
}

/// The crate table of docs/architecture.md (`| `xo-…` | `folder` | kind | deps | owns |`).
fn documented(doc: &str) -> Vec<Row> {
    doc.lines()
        .filter(|l| l.starts_with("| `xo-"))
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split('|').map(str::trim).collect();
            Row {
                name: cells[0].trim_matches('`').to_string(),
                folder: cells[1].trim_matches('`').trim_end_matches('/').to_string(),
                kind: cells[2].to_string(),
                deps: cells.get(3).copied().unwrap_or("").to_string(),
            }
        })
        .collect()
}

/// The same rows as the workspace has them.
fn actual() -> Vec<Row> {
    let meta = metadata();
    let root = root();
    let g = graph();
    let mut rows = Vec::new();
    for p in meta["packages"].as_array().unwrap() {
        let name = p["name"].as_str().unwrap().to_string();
        let manifest = std::path::Path::new(p["manifest_path"].as_str().unwrap());
        let folder = manifest
            .parent()
            .unwrap()
            .strip_prefix(&root)
            .unwrap()
            .display()
            .to_string();
        let kind = match kind(&name) {
            Some(Kind::Contract) => "contract",
            Some(Kind::Library) if PURE.contains(&name.as_str()) => "library (pure)",
            Some(Kind::Library) => "library",
            Some(Kind::Service) => "service",
            Some(Kind::Assembly) => "assembly",
            Some(Kind::Benches) => "benches",
            Some(Kind::Binary) => "binary",
            Some(Kind::Tests) => "tests",
            None => "?",
        };
        let mut deps: Vec<String> = g[&name]
            .iter()
            .map(|d| d.trim_start_matches("xo-").to_string())
            .collect();
        deps.sort();
        rows.push(Row {
            name,
            folder,
            kind: kind.to_string(),
            deps: deps.join(", "),
        });
    }
    rows.sort_by(|a, b| a.name.cmp(&b.name));
    rows
}

/// Where the documented table and the workspace differ. A contract's or a
/// library's dependencies are listed exactly (in any order); a service's
/// and the binary's are the rule, checked by the graph test above.
fn table_differences(doc: &[Row], real: &[Row]) -> Vec<String> {
    let mut bad = Vec::new();
    for r in real {
        let Some(d) = doc.iter().find(|d| d.name == r.name) else {
            bad.push(format!(
                "{} is in the workspace but not in docs/architecture.md's crate table",
                r.name
            ));
            continue;
        };
        if d.folder != r.folder {
            bad.push(format!(
                "{}: documented in {}, is in {}",
                r.name, d.folder, r.folder
            ));
        }
        if d.kind != r.kind {
            bad.push(format!(
                "{}: documented as {}, is {}",
                r.name, d.kind, r.kind
            ));
        }
        if r.kind.starts_with("library") || r.kind == "contract" {
            let mut listed: Vec<String> = d
                .deps
                .split(',')
                .map(|x| x.trim().to_string())
                .filter(|x| !x.is_empty() && x != "—")
                .collect();
            listed.sort();
            if listed.join(", ") != r.deps {
                bad.push(format!(
                    "{}: documented to depend on [{}], depends on [{}]",
                    r.name,
                    listed.join(", "),
                    r.deps
                ));
            }
        }
    }
    for d in doc {
        if !real.iter().any(|r| r.name == d.name) {
            bad.push(format!("{} is documented but not in the workspace", d.name));
        }
    }
    bad
}

#[test]
fn the_documented_crate_table_is_the_workspace() {
    let doc = std::fs::read_to_string(root().join("docs/architecture.md")).unwrap();
    let rows = documented(&doc);
    assert!(rows.len() > 10, "the crate table was not found: {rows:?}");
    let bad = table_differences(&rows, &actual());
    assert!(
        bad.is_empty(),
        "docs/architecture.md is out of date:\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_table_check_catches_a_wrong_folder_kind_or_dependency() {
    let mut doc = actual();
    doc.retain(|r| r.name != "xo-queue");
    for r in doc.iter_mut() {
        match r.name.as_str() {
            "xo-bus" => r.folder = "services/bus".into(),
            "xo-radio" => r.deps = "proto, runtime".into(),
            "xo-console" => r.kind = "library".into(),
            _ => {}
        }
    }
    doc.push(Row {
        name: "xo-ghost".into(),
        folder: "crates/ghost".into(),
        kind: "library".into(),
        deps: String::new(),
    });
    let bad = table_differences(&doc, &actual());
    for want in [
        "xo-queue is in the workspace but not in",
        "xo-bus: documented in services/bus, is in crates/bus",
        "xo-radio: documented to depend on [proto, runtime], depends on [proto]",
        "xo-console: documented as library, is service",
        "xo-ghost is documented but not in the workspace",
    ] {
        assert!(bad.iter().any(|b| b.starts_with(want)), "{want}: {bad:?}");
    }
    assert_eq!(bad.len(), 5, "{bad:?}");
}

/// The libraries that must do no I/O.
const PURE: [&str; 3] = ["xo-radio", "xo-sensor", "xo-compose"];

/// Crates that do I/O: none may be in a pure library's graph.
const IO_CRATES: [&str; 8] = [
    "tokio",
    "mio",
    "socket2",
    "async-nats",
    "reqwest",
    "hyper",
    "nix",
    "bollard",
];

/// Every crate a package reaches through normal dependencies on this
/// platform (`cargo tree`, offline: what the build uses).
fn closure(name: &str) -> BTreeMap<String, ()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "tree",
            "--offline",
            "-e",
            "normal",
            "--prefix",
            "none",
            "-p",
            name,
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(|n| (n.to_string(), ()))
        .collect()
}

/// Lines of a pure library's source that reach for I/O.
fn io_lines(dir: &std::path::Path) -> Vec<String> {
    let mut bad = Vec::new();
    for (p, text) in sources(dir) {
        for (i, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if ["std::fs", "std::net", "std::process", "tokio"]
                .iter()
                .any(|w| code.contains(w))
            {
                bad.push(format!("{}:{}: {}", p.display(), i + 1, line.trim()));
            }
        }
    }
    bad
}

#[test]
fn the_pure_libraries_do_no_io() {
    let root = root();
    for lib in PURE {
        let reach = closure(lib);
        let io: Vec<&str> = IO_CRATES
            .iter()
            .copied()
            .filter(|c| reach.contains_key(*c))
            .collect();
        assert!(
            io.is_empty(),
            "{lib} reaches {io:?} through its dependencies"
        );
        let folder = root
            .join("crates")
            .join(lib.trim_start_matches("xo-"))
            .join("src");
        assert!(folder.is_dir(), "{} is not a folder", folder.display());
        let bad = io_lines(&folder);
        assert!(bad.is_empty(), "{lib} does I/O:\n{}", bad.join("\n"));
    }
    // The checks can fail: the runtime is not pure on either count.
    let reach = closure("xo-runtime");
    assert!(reach.contains_key("tokio"));
    assert!(!io_lines(&root.join("crates/runtime/src")).is_empty());
}

/// Every `.rs` file under a folder, with its text.
fn sources(dir: &std::path::Path) -> Vec<(std::path::PathBuf, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let text = std::fs::read_to_string(&p).unwrap();
                out.push((p, text));
            }
        }
    }
    out
}

#[test]
fn every_service_starts_from_a_service_ctx_and_no_actor_lives_outside_a_tree() {
    let root = root();
    for svc in [
        "supervisor",
        "queue",
        "runner",
        "knowledge",
        "review",
        "fleet",
        "console",
        "notify",
    ] {
        let src = sources(&root.join("services").join(svc).join("src"));
        let starts: Vec<&std::path::PathBuf> = src
            .iter()
            .filter(|(_, t)| {
                t.lines().any(|l| {
                    l.starts_with("pub async fn start(")
                        && l.split_once('(')
                            .is_some_and(|(_, a)| a.contains(": ServiceCtx"))
                })
            })
            .map(|(p, _)| p)
            .collect();
        assert!(
            !starts.is_empty(),
            "services/{svc} has no `pub async fn start(ctx: ServiceCtx…)`"
        );
    }
    // An actor is spawned only as a tree's root: by `tree::Running` (its
    // one-for-one roots) and by the supervisor's own root; every other
    // actor is a root's child.
    let mut spawns = Vec::new();
    for dir in ["services", "crates"] {
        for (p, text) in sources(&root.join(dir)) {
            let rel = p.strip_prefix(&root).unwrap().display().to_string();
            if rel.contains("/tests/") || rel.starts_with("app/cli/") {
                continue;
            }
            // Unit tests at the end of a file may spawn what they test.
            let code = text.split("#[cfg(test)]").next().unwrap_or("");
            for (i, l) in code.lines().enumerate() {
                if l.contains("Actor::spawn(") {
                    spawns.push(format!("{rel}:{}", i + 1));
                }
            }
        }
    }
    let allowed = |s: &String| {
        s.starts_with("crates/runtime/src/tree.rs:")
            || s.starts_with("services/supervisor/src/lib.rs:")
    };
    let outside: Vec<&String> = spawns.iter().filter(|s| !allowed(s)).collect();
    assert!(
        outside.is_empty(),
        "actors spawned outside a tree: {outside:?}"
    );
    assert_eq!(spawns.len(), 2, "{spawns:?}");
}

#[test]
fn the_folders_say_what_each_crate_is() {
    // `services/` holds services only, `crates/` libraries only, `app/`
    // what assembles them (the binary, the fabric, the benches).
    for r in actual() {
        let want = match r.kind.as_str() {
            "service" => "services/",
            "library" | "library (pure)" => "crates/",
            "assembly" | "benches" | "binary" => "app/",
            "contract" => "proto",
            "tests" => "tests",
            other => panic!("{}: kind {other}", r.name),
        };
        assert!(
            r.folder.starts_with(want),
            "{} ({}) is in {}, not under {want}",
            r.name,
            r.kind,
            r.folder
        );
    }
}

/// Signatures below the CLI that return a bare `String` as their error, in
/// one source text (outside `#[cfg(test)]` modules): a signature ends at
/// its `{` or `;`, so one written over several lines is seen whole.
fn stringly(text: &str) -> Vec<String> {
    let code = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => text,
    };
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("fn ") {
        let sig_end = rest[i..]
            .find(['{', ';'])
            .map(|e| i + e)
            .unwrap_or(rest.len());
        let sig: String = rest[i..sig_end]
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        if let Some(r) = sig.find("-> Result<") {
            let ret = &sig[r..];
            if ret.trim_end().ends_with(", String>") {
                out.push(sig.chars().take(120).collect());
            }
        }
        rest = &rest[sig_end.max(i + 3)..];
    }
    out
}

/// Issue 25: typed errors everywhere below the CLI. The console's form
/// handlers are the one exception: their `Err` is the flash's text.
#[test]
fn nothing_below_the_cli_returns_a_string_as_its_error() {
    let root = root();
    let mut bad = Vec::new();
    for top in ["proto/src", "crates", "services"] {
        for (p, text) in sources(&root.join(top)) {
            let rel = p.strip_prefix(&root).unwrap().display().to_string();
            if rel.contains("/tests/") || rel.starts_with("services/console/src/pages/") {
                continue;
            }
            for sig in stringly(&text) {
                bad.push(format!("{rel}: {sig}"));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "these return Result<_, String>; give them an error type:\n{}",
        bad.join("\n")
    );
    // The check can fail: one line, one over several lines, and not a test's.
    assert_eq!(
        stringly(
            "pub fn a(x: u8) -> Result<(), String> {\n}\nfn b(\n    y: u8,\n) -> Result<Vec<u8>,\n String>;\n#[cfg(test)]\nmod tests {\n fn c() -> Result<(), String> {}\n}"
        ),
        vec![
            "fn a(x: u8) -> Result<(), String>".to_string(),
            "fn b( y: u8, ) -> Result<Vec<u8>, String>".to_string()
        ]
    );
    assert!(stringly("fn d() -> Result<String, MyError> {").is_empty());
}

// --- size budget (issue 42, item 6) ------------------------------------------

/// Lines a source file may have.
const FILE_BUDGET: usize = 800;
/// Lines a function may have (its signature to its closing brace).
const FN_BUDGET: usize = 150;

/// Source files over the budget, each with why it is not split yet.
const LONG_FILES: &[(&str, &str)] = &[];

/// Functions over the budget, each with why.
const LONG_FNS: &[(&str, &str, &str)] = &[
    (
        "services/console/src/metrics.rs",
        "render",
        "one metric family after another, in the order /metrics prints them",
    ),
    (
        "app/cli/src/demo.rs",
        "demo",
        "the demo's script, step by step, printing as it goes",
    ),
    (
        "app/bench/src/radio.rs",
        "run",
        "a bench's script: each measurement beside its baseline, in the order printed",
    ),
    (
        "crates/sensor/src/claude.rs",
        "event",
        "a match over Claude Code's event types, one arm each",
    ),
    (
        "app/bench/src/console.rs",
        "run",
        "a bench's script: each measurement beside its baseline, in the order printed",
    ),
    (
        "proto/src/knowledge_doc.rs",
        "parse",
        "the document's sections read in order, each refusal naming its line",
    ),
    (
        "crates/sensor/src/swe.rs",
        "read",
        "SWE-agent's and mini-swe-agent's trajectory shapes, one pass",
    ),
    (
        "app/bench/src/chaos.rs",
        "drive",
        "the chaos run's loop: kill, restart, check, in one place",
    ),
    (
        "crates/radio/src/lib.rs",
        "check_unit",
        "the radio check: its rules in the seed's priority order, read top to bottom",
    ),
    (
        "crates/pipeline/src/driver/openai.rs",
        "run",
        "the model loop: call, tools, halts, in one turn order",
    ),
    (
        "app/bench/src/detection.rs",
        "run",
        "a bench's script: each recording's figures, in the order printed",
    ),
    (
        "app/cli/src/main.rs",
        "dispatch",
        "a match with one arm per command, each one call",
    ),
    (
        "app/bench/src/sharded.rs",
        "run",
        "a bench's script: each measurement beside its baseline, in the order printed",
    ),
    (
        "services/supervisor/src/lib.rs",
        "start",
        "the supervisor's tree and inputs started in their order",
    ),
    (
        "services/supervisor/src/watcher.rs",
        "evaluate",
        "one report's path: duplicate, gap, check, steering, in order",
    ),
    (
        "crates/pipeline/src/driver/command.rs",
        "run_streamed",
        "one streamed run's select over output, steering and its end",
    ),
    (
        "services/console/src/pages/fleet.rs",
        "fleet_view",
        "the fleet page's sections in the order shown",
    ),
];

/// Source files of the workspace's crates (under a `src/`, tests aside:
/// `tests/` folders and `tests.rs` files), relative to the root, with their text.
fn product_sources() -> Vec<(String, String)> {
    let root = root();
    let mut out = Vec::new();
    for top in ["proto", "crates", "services", "app", "tests/src"] {
        for (p, text) in sources(&root.join(top)) {
            let rel = p
                .strip_prefix(&root)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            let after_src = rel.split_once("/src/").map(|(_, r)| r);
            let Some(inner) = after_src else { continue };
            if inner.split('/').any(|c| c == "tests") || rel.ends_with("/tests.rs") {
                continue;
            }
            out.push((rel, text));
        }
    }
    out.sort();
    out
}

/// Functions of `text` longer than `budget` lines: (name, lines). A
/// function runs from its `fn` line to the first line after it that is its
/// indentation and `}` (rustfmt's layout); a `#[cfg(test)]` at the left
/// margin ends the scan (the tests).
fn long_fns(text: &str, budget: usize) -> Vec<(String, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let end = lines
        .iter()
        .position(|l| l.starts_with("#[cfg(test)]"))
        .unwrap_or(lines.len());
    let mut out = Vec::new();
    for i in 0..end {
        let l = lines[i];
        let body = l.trim_start();
        let indent = &l[..l.len() - body.len()];
        let mut words = body;
        for prefix in [
            "pub(crate) ",
            "pub(super) ",
            "pub ",
            "const ",
            "async ",
            "unsafe ",
        ] {
            words = words.strip_prefix(prefix).unwrap_or(words);
        }
        let Some(rest) = words.strip_prefix("fn ") else {
            continue;
        };
        if l.trim_end().ends_with(';') {
            continue;
        }
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let close = format!("{indent}}}");
        let last = (i..end).find(|&j| lines[j] == close).unwrap_or(end);
        let n = last - i + 1;
        if n > budget {
            out.push((name, n));
        }
    }
    out
}

#[test]
fn files_and_functions_stay_within_their_size_budget() {
    let mut over = Vec::new();
    let mut listed_files = std::collections::BTreeSet::new();
    let mut listed_fns = std::collections::BTreeSet::new();
    for (path, text) in product_sources() {
        let n = text.lines().count();
        if n > FILE_BUDGET {
            if LONG_FILES.iter().any(|(p, _)| *p == path) {
                listed_files.insert(path.clone());
            } else {
                over.push(format!(
                    "{path}: {n} lines (budget {FILE_BUDGET}): split it by what it does"
                ));
            }
        }
        for (name, n) in long_fns(&text, FN_BUDGET) {
            if LONG_FNS.iter().any(|(p, f, _)| *p == path && *f == name) {
                listed_fns.insert((path.clone(), name));
            } else {
                over.push(format!(
                    "{path}: fn {name} is {n} lines (budget {FN_BUDGET}): split it by what it does"
                ));
            }
        }
    }
    // An exception that is gone (split, renamed) leaves the list.
    for (p, _) in LONG_FILES {
        if !listed_files.contains(*p) {
            over.push(format!(
                "{p} is within the budget now: remove it from LONG_FILES"
            ));
        }
    }
    for (p, f, _) in LONG_FNS {
        if !listed_fns.contains(&(p.to_string(), f.to_string())) {
            over.push(format!(
                "{p}: fn {f} is within the budget now (or gone): remove it from LONG_FNS"
            ));
        }
    }
    assert!(over.is_empty(), "size budget:\n{}", over.join("\n"));
}

#[test]
fn the_size_check_measures_functions_as_rustfmt_lays_them_out() {
    let long_body = "        x();\n".repeat(160);
    let text = format!(
        "pub fn short() {{\n    a();\n}}\n\nimpl A {{\n    pub(crate) async fn long(&self) {{\n{long_body}    }}\n    fn decl(&self);\n}}\n#[cfg(test)]\nmod tests {{\n    fn also_long() {{\n{long_body}    }}\n}}\n"
    );
    assert_eq!(long_fns(&text, 150), vec![("long".to_string(), 162)]);
    assert!(long_fns(&text, 200).is_empty());
}

// --- causes kept as types (issue 42, item 5) --------------------------------

/// Fields of error types (those deriving `thiserror::Error`) that hold a
/// text where a cause would be: `reason`, `detail`, `cause`, `error` or
/// `message` of type `String`. Each is `Type.field`. An item runs from its
/// derive to the first line after it that is its indentation and `}`.
fn text_causes(text: &str) -> Vec<String> {
    let code = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => text,
    };
    let lines: Vec<&str> = code.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i].trim_start();
        let derives_error = l.starts_with("#[derive(")
            && l.split(['(', ')', ',', ' '])
                .any(|w| w == "thiserror::Error" || w == "Error");
        if !derives_error {
            i += 1;
            continue;
        }
        let Some(decl) = (i + 1..lines.len()).find(|&j| {
            let t = lines[j].trim_start();
            !t.starts_with("#[") && !t.starts_with("//")
        }) else {
            break;
        };
        let indent = lines[decl].len() - lines[decl].trim_start().len();
        let name = lines[decl]
            .split_whitespace()
            .skip_while(|w| *w != "enum" && *w != "struct")
            .nth(1)
            .unwrap_or("?")
            .trim_end_matches(['{', '(', ';'])
            .to_string();
        let close = format!("{}}}", " ".repeat(indent));
        let end = (decl..lines.len())
            .find(|&j| lines[j] == close || lines[j].ends_with(';') && j == decl)
            .unwrap_or(lines.len() - 1);
        for l in &lines[decl..=end] {
            for field in ["reason", "detail", "cause", "error", "message"] {
                let pat = format!("{field}: String");
                for (k, _) in l.match_indices(&pat) {
                    let before = l[..k].chars().last();
                    if before.is_none_or(|c| !c.is_alphanumeric() && c != '_') {
                        out.push(format!("{name}.{field}"));
                    }
                }
            }
        }
        i = end + 1;
    }
    out
}

/// Error types whose text field is a description, not a flattened cause:
/// (file, `Type.field`, why). A cause (an `io::Error`, NATS's answer, a
/// serde error from our own encoding) goes in `source` as its type.
const TEXT_FIELDS: &[(&str, &str, &str)] = &[
    (
        "crates/bus/src/lib.rs",
        "BusError.reason",
        "InvalidSubject: what about the subject is wrong",
    ),
    (
        "crates/bus/src/lib.rs",
        "StoreError.reason",
        "InvalidKey and Corrupt: what about the key or the bytes at an offset is wrong",
    ),
    (
        "crates/pipeline/src/project.rs",
        "ProjectError.reason",
        "what is wrong in the project's .xo/project.toml, key by key",
    ),
    (
        "crates/pipeline/src/sandbox.rs",
        "SandboxError.reason",
        "Escape: how the path leaves the sandbox",
    ),
    (
        "crates/runtime/src/config/mod.rs",
        "ConfigError.reason",
        "Invalid: what is wrong with a configuration key's value",
    ),
    (
        "proto/src/codec.rs",
        "CodecError.reason",
        "serde's description of bytes from outside; compared in tests (PartialEq)",
    ),
    (
        "proto/src/control.rs",
        "ServiceError.message",
        "the wire form of a service's error: it crosses the bus as text",
    ),
    (
        "proto/src/knowledge_doc.rs",
        "DocError.reason",
        "what is wrong at a line of a knowledge document",
    ),
    (
        "proto/src/task_file.rs",
        "TaskFileError.reason",
        "what is wrong at a line of a task file",
    ),
    (
        "services/console/src/lib.rs",
        "ConsoleError.reason",
        "Token: what is wrong in a token or operators file (io failures are TokenFile)",
    ),
    (
        "services/review/src/findings.rs",
        "BadFindings.reason",
        "what is wrong in the model's findings",
    ),
    (
        "services/review/src/service.rs",
        "Skip.reason",
        "the review model's last failure, kept across calls and shown on the console",
    ),
];

#[test]
fn error_types_keep_causes_not_their_text() {
    let mut bad = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for (rel, text) in product_sources() {
        for f in text_causes(&text) {
            match TEXT_FIELDS.iter().find(|(p, t, _)| *p == rel && *t == f) {
                Some(_) => {
                    seen.insert((rel.clone(), f));
                }
                None => bad.push(format!("{rel}: {f}")),
            }
        }
    }
    assert!(
        bad.is_empty(),
        "error types holding a cause as text; keep it as its type (`source: io::Error`, \
         `#[source] BoxError`), or list a description in TEXT_FIELDS with why:\n{}",
        bad.join("\n")
    );
    let stale: Vec<_> = TEXT_FIELDS
        .iter()
        .filter(|(p, t, _)| !seen.contains(&(p.to_string(), t.to_string())))
        .collect();
    assert!(
        stale.is_empty(),
        "TEXT_FIELDS names fields that are gone: {stale:?}"
    );
    // The check can fail: an enum's and a struct's text fields, a field
    // whose name only ends so, a type that is not an error, a test's.
    let sample = "#[derive(Debug, thiserror::Error)]\npub enum E {\n    #[error(\"x\")]\n    A { path: String, reason: String },\n    B { my_reason: String },\n}\n\n#[derive(Debug, Error)]\n#[error(\"{detail}\")]\npub struct F {\n    pub detail: String,\n}\n#[derive(Debug)]\npub struct G {\n    pub reason: String,\n}\n#[cfg(test)]\nmod tests {\n#[derive(Debug, thiserror::Error)]\nenum H { A { reason: String } }\n}\n";
    assert_eq!(
        text_causes(sample),
        vec!["E.reason".to_string(), "F.detail".to_string()]
    );
}

/// Where code outside `xo_bus` reads a stream by hand (`.next().await`),
/// and why that is not a subscription loop that belongs in
/// `xo_bus::input` (which decodes once, dead-letters what it cannot read,
/// survives a handler's panic and stops with its service): (file, count,
/// why). A new hand-written read fails the test until it moves into
/// `input` or is listed here with its reason.
const HAND_READS: &[(&str, usize, &str)] = &[
    (
        "services/supervisor/src/shard.rs",
        1,
        "the partition events only wake the lease loop early; their payload is not read (the loop polls anyway)",
    ),
    (
        "services/console/src/events.rs",
        1,
        "the pump moves the merged subscriptions' messages into the feeder's channel; the feeder is input::raw",
    ),
    (
        "services/console/src/pages/mod.rs",
        1,
        "an HTTP request body read a chunk at a time, with its size bounded; not a bus subscription",
    ),
];

/// `.next().await` reads outside the bus crate and the test harness.
fn hand_reads(text: &str) -> usize {
    let end = text.find("\n#[cfg(test)]").unwrap_or(text.len());
    text[..end].matches(".next().await").count()
}

/// Issue 42, item 5: every subscription of a service is read through
/// `xo_bus::input`, not by a loop of its own.
#[test]
fn subscriptions_are_read_through_the_bus_input_not_by_hand() {
    let mut bad = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for (rel, text) in product_sources() {
        if rel.starts_with("crates/bus/")
            || rel.starts_with("tests/src/")
            || rel.starts_with("app/bench/")
        {
            continue;
        }
        let n = hand_reads(&text);
        if n == 0 {
            continue;
        }
        match HAND_READS.iter().find(|(p, _, _)| *p == rel) {
            Some((_, allowed, _)) if n <= *allowed => {
                seen.insert(rel);
            }
            Some((_, allowed, _)) => bad.push(format!("{rel}: {n} hand reads, {allowed} listed")),
            None => bad.push(format!("{rel}: {n} hand reads")),
        }
    }
    assert!(
        bad.is_empty(),
        "streams read by hand (`.next().await`) outside xo_bus: read a subscription through \
         xo_bus::input (typed, raw or requests), or list the read in HAND_READS with why:\n{}",
        bad.join("\n")
    );
    let stale: Vec<_> = HAND_READS
        .iter()
        .filter(|(p, _, _)| !seen.contains(*p))
        .collect();
    assert!(
        stale.is_empty(),
        "HAND_READS names reads that are gone: {stale:?}"
    );
    // The check can fail: a loop over a subscription; a test's is not counted.
    let sample = "async fn f(mut sub: Subscription) {\n    while let Some(m) = sub.next().await {\n        handle(m);\n    }\n}\n#[cfg(test)]\nmod tests {\n    async fn g() { s.next().await; }\n}\n";
    assert_eq!(hand_reads(sample), 1);
}

/// HTML elements a hand-written page would open or close in a string.
const TAGS: &[&str] = &[
    "a",
    "b",
    "i",
    "p",
    "br",
    "div",
    "span",
    "small",
    "code",
    "pre",
    "td",
    "tr",
    "th",
    "table",
    "thead",
    "tbody",
    "ul",
    "ol",
    "li",
    "dl",
    "dt",
    "dd",
    "form",
    "input",
    "button",
    "label",
    "select",
    "option",
    "textarea",
    "details",
    "summary",
    "section",
    "nav",
    "h1",
    "h2",
    "h3",
    "svg",
    "line",
    "rect",
    "text",
    "path",
    "figure",
    "figcaption",
    "script",
    "style",
    "meta",
    "link",
    "img",
    "html",
    "head",
    "body",
    "main",
    "header",
];

/// Lines of `text` (its tests aside) that write HTML by hand: raw HTML
/// through `PreEscaped`, or a string literal that opens or closes a tag.
fn hand_html(text: &str) -> Vec<String> {
    let end = text.find("\n#[cfg(test)]").unwrap_or(text.len());
    text[..end]
        .lines()
        .enumerate()
        .filter(|(_, line)| {
            let code = line.split("//").next().unwrap_or("");
            code.contains("PreEscaped")
                || code.match_indices("\"<").any(|(i, _)| {
                    let rest = code[i + 2..].trim_start_matches('/');
                    let name: String = rest
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric())
                        .collect();
                    let after = rest[name.len()..].chars().next();
                    TAGS.contains(&name.as_str()) && matches!(after, Some(' ' | '>' | '/' | '\\'))
                })
        })
        .map(|(n, line)| format!("{}: {}", n + 1, line.trim()))
        .collect()
}

/// Issue 44, item 6: the console's pages are compile-time templates that
/// escape what they are given; nothing in its sources writes HTML by
/// hand (raw HTML is in its tests only, each saying why).
#[test]
fn the_console_writes_no_html_by_hand() {
    let found: Vec<String> = product_sources()
        .into_iter()
        .filter(|(rel, _)| rel.starts_with("services/console/src/"))
        .flat_map(|(rel, text)| {
            hand_html(&text)
                .into_iter()
                .map(move |l| format!("{rel}:{l}"))
        })
        .collect();
    assert!(
        found.is_empty(),
        "HTML written by hand in the console (make it a maud template):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_hand_html_check_finds_a_tag_in_a_string_and_raw_html() {
    let text = "let a = format!(\"<td class=\\\"num\\\">{n}</td>\");\nlet b = maud::PreEscaped(x);\nlet c = key.replace(\"<role>\", r);\nlet d = \"</span>\";\n";
    let found = hand_html(text);
    assert_eq!(found.len(), 3, "{found:?}");
    assert!(found[0].starts_with("1:") && found[1].starts_with("2:") && found[2].starts_with("4:"));
}

/// Services a test may start by hand, each with why: what such a test
/// checks is the service's own handle, not the fabric's.
const HAND_STARTED: &[(&str, &str)] = &[
    (
        "service_shape.rs",
        "the handle's own shape: until, stop, escalation",
    ),
    ("conformance.rs", "a start refused on a corrupt store"),
    ("supervisor.rs", "supervision off: a handle with no actors"),
];

/// Issue 42, item 1: the end-to-end tests live in one place
/// (`app/cli/tests`), start services through the harness's sandbox (the
/// product's fabric) and run `xo` through its launcher.
#[test]
fn end_to_end_tests_live_in_one_place_on_one_harness() {
    let root = root();
    assert!(
        !root.join("tests/tests").exists(),
        "end-to-end tests belong in app/cli/tests, not tests/tests"
    );
    let starts = [
        "xo_queue::start(",
        "xo_supervisor::start(",
        "xo_notify::start(",
        "xo_console::start(",
        "xo_runner::start(",
        "xo_review::start(",
        "xo_knowledge::service::start(",
        "xo_fleet::service::start(",
        "xo_runner::watch::start(",
    ];
    let mut bad = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for (p, text) in sources(&root.join("app/cli/tests")) {
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        if name == "layering.rs" {
            continue; // names what it looks for
        }
        let rel = p.strip_prefix(&root).unwrap().display().to_string();
        if text.contains("CARGO_BIN_EXE_xo\"") {
            bad.push(format!(
                "{rel}: names the xo binary itself (use xo_tests::launcher::Xo)"
            ));
        }
        let by_hand = starts.iter().any(|s| text.contains(s));
        match HAND_STARTED.iter().find(|(f, _)| *f == name) {
            Some(_) if by_hand => {
                seen.insert(name);
            }
            _ if by_hand => bad.push(format!(
                "{rel}: starts a service by hand (use xo_tests::sandbox::Sandbox)"
            )),
            _ => {}
        }
    }
    for (f, why) in HAND_STARTED {
        if !seen.contains(*f) {
            bad.push(format!(
                "{f} is listed ({why}) but starts no service by hand: take it off the list"
            ));
        }
    }
    assert!(bad.is_empty(), "{bad:#?}");
}
