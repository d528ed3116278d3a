//! NATS with TLS (a CA, server and client certificates generated here with
//! openssl) and passwords: XO connects with credentials given in the URL,
//! never shows the password (not in `xo config`, not in an error), and a
//! client that does not trust the server's CA, or has no certificate, or a
//! wrong password, is refused with an error that says so.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use xo_tests::launcher::Xo;

use xo_tests::NatsServer;

const SECRET: &str = "q-Secret-7";

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA, and server (for 127.0.0.1) and client certificates it signed.
fn certificates(dir: &Path) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=xo-test-ca",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
        ],
    );
    std::fs::write(
        dir.join("san.ext"),
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
    )
    .unwrap();
    for who in ["server", "client"] {
        openssl(
            dir,
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-subj",
                &format!("/CN={who}"),
                "-keyout",
                &format!("{who}.key"),
                "-out",
                &format!("{who}.csr"),
            ],
        );
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &format!("{who}.csr"),
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-extfile",
                "san.ext",
                "-out",
                &format!("{who}.pem"),
            ],
        );
    }
}

fn xo(dir: &Path, url: &str, tls: &[(&str, String)], args: &[&str]) -> Output {
    Xo::new()
        .command(&[])
        .args(args)
        .current_dir(dir)
        .env("XO_NATS_URL", url)
        .envs(tls.iter().map(|(k, v)| (*k, v.as_str())))
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .expect("xo")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn tls_and_credentials_in_the_url() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    certificates(d);
    let conf = d.join("nats.conf");
    std::fs::write(
        &conf,
        format!(
            "tls {{\n  cert_file: \"{0}/server.pem\"\n  key_file: \"{0}/server.key\"\n  ca_file: \"{0}/ca.pem\"\n  verify: true\n}}\nauthorization {{\n  users = [ {{ user: \"queue\", password: \"{SECRET}\" }} ]\n}}\n",
            d.display()
        ),
    )
    .unwrap();
    let nats = NatsServer::start_with(Some(conf));
    let url = format!("tls://queue:{SECRET}@127.0.0.1:{}", nats.port());
    let tls = vec![
        (
            "XO__NATS__TLS_CA_FILE",
            d.join("ca.pem").display().to_string(),
        ),
        (
            "XO__NATS__TLS_CERT_FILE",
            d.join("client.pem").display().to_string(),
        ),
        (
            "XO__NATS__TLS_KEY_FILE",
            d.join("client.key").display().to_string(),
        ),
    ];

    // The queue on TLS with the URL's credentials; `xo init` through it.
    let queue = Xo::new()
        .command(&[])
        .args(["serve", "queue"])
        .current_dir(d)
        .env("XO_NATS_URL", &url)
        .envs(tls.iter().map(|(k, v)| (*k, v.as_str())))
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let o = xo_tests::until_blocking("xo init over TLS with the URL's credentials", || {
        Some(xo(d, &url, &tls, &["init"])).filter(|o| o.status.success())
    });
    assert!(text(&o).contains("HALTED"), "{}", text(&o));

    // `xo config` shows neither the URL's password nor any other.
    let o = xo(d, &url, &tls, &["config"]);
    assert!(o.status.success());
    assert!(!text(&o).contains(SECRET), "{}", text(&o));
    assert!(text(&o).contains("queue:***@127.0.0.1"), "{}", text(&o));

    // A wrong password: refused, said, and not shown.
    let bad = format!("tls://queue:not-{SECRET}@127.0.0.1:{}", nats.port());
    let o = xo(d, &bad, &tls, &["status"]);
    assert!(!o.status.success());
    let t = text(&o);
    assert!(!t.contains(SECRET), "{t}");
    assert!(t.to_lowercase().contains("authorization"), "{t}");

    // Without the CA the server is not trusted; without a certificate the
    // server does not trust us: both refused at once, not a time-out.
    let o = xo(d, &url, &tls[1..], &["status"]);
    assert!(!o.status.success());
    assert!(!text(&o).contains(SECRET), "{}", text(&o));
    let o = xo(d, &url, &tls[..1], &["status"]);
    assert!(!o.status.success());
    assert!(!text(&o).contains(SECRET), "{}", text(&o));
    // A certificate without its key is a configuration error, named.
    let o = xo(d, &url, &tls[..2], &["status"]);
    assert!(text(&o).contains("nats.tls_cert_file"), "{}", text(&o));

    let _ = Command::new("kill")
        .args(["-INT", &queue.id().to_string()])
        .status();
    let out = queue.wait_with_output().unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(
        !log.contains(SECRET),
        "the queue's log shows the password: {log}"
    );
}
