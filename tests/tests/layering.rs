//! The house rule (docs/architecture.md): services depend on `proto` and the
//! libraries only, never on another service; only `cli` (and this test
//! crate) may depend on services. Read from `cargo metadata`, so a new
//! dependency that breaks the rule fails here, and a new crate must be
//! given its kind below before anything can depend on it.

use std::collections::BTreeMap;
use std::process::Command;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Contract,
    Library,
    Service,
    Binary,
    Tests,
}

fn kind(name: &str) -> Option<Kind> {
    Some(match name {
        "xo-proto" => Kind::Contract,
        "xo-bus" | "xo-radio" | "xo-runtime" | "xo-pipeline" | "xo-sensor" => Kind::Library,
        "xo-supervisor" | "xo-queue" | "xo-runner" | "xo-knowledge" | "xo-review" | "xo-fleet"
        | "xo-console" | "xo-notify" => Kind::Service,
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
        Kind::Binary | Kind::Tests => to != Kind::Binary,
    }
}

/// Our crates and their normal dependencies on our crates.
fn graph() -> BTreeMap<String, Vec<String>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
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
                "{from}: a crate of no known kind; give it one in tests/tests/layering.rs and docs/architecture.md"
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
