//! A headless Chromium (Debian's `chromium` and `chromium-driver`) driven
//! through WebDriver: the browser tests and `xo bench console` open the
//! console in it as an operator would.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder};
use serde_json::json;

/// A free TCP port on loopback.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(0)
}

/// chromedriver on a free port, and a headless Chromium session at
/// 1280×800 in it. The driver's process is the caller's to stop.
pub async fn start() -> Result<(Client, Child), String> {
    let driver = ["chromedriver", "/usr/bin/chromedriver"]
        .into_iter()
        .find(|d| Command::new(d).arg("--version").output().is_ok())
        .ok_or(
            "chromedriver not found: install Debian's `chromium chromium-driver` (.ci/run does)",
        )?;
    let binary = ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .into_iter()
        .find(|b| Path::new(b).exists())
        .ok_or("chromium not found: install Debian's `chromium chromium-driver` (.ci/run does)")?;
    let port = free_port();
    let mut child = Command::new(driver)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("starting {driver}: {e}"))?;
    let url = format!("http://127.0.0.1:{port}");
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": binary,
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,800"]
        }),
    );
    // The driver answers once it listens: asked again until then (it
    // may exit instead, which is said).
    let mut last = String::new();
    for _ in 0..400 {
        // Plain HTTP to the local driver: no TLS stack needed.
        match ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps.clone())
            .connect(&url)
            .await
        {
            Ok(c) => return Ok((c, child)),
            Err(e) => last = e.to_string(),
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("{driver} exited ({status}) before it served"));
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
    Err(format!(
        "no WebDriver session from {driver} at {url}: {last}"
    ))
}
