//! The Helm chart, checked with Helm's own Go library (PyPI's helm-sdkpy):
//! it lints clean and its values.schema.json rejects bad values.

use std::process::Command;

#[test]
fn chart_lints_clean_and_its_schema_rejects_bad_values() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let out = Command::new("python3")
        .current_dir(root)
        .args(["charts/check.py", "charts/xo"])
        .output()
        .expect("python3 runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(text.contains("chart ok"), "{text}");
    for case in [
        "unknown top-level key",
        "negative replicas",
        "unknown driver",
        "external NATS without a URL",
        "bad volume size",
        "console port out of range",
    ] {
        assert!(
            text.contains(&format!("rejected ({case})")),
            "{case}: {text}"
        );
    }
}
