//! The options every command takes (`xo --config … anything`), shared by
//! the `xo` binary and the `xo-bench` binary beside it, so `xo bench …`
//! hands them on unchanged.

use std::ffi::OsString;
use std::path::PathBuf;

#[derive(Debug, Clone, clap::Args)]
pub struct Globals {
    /// Config file (default: ./xo.toml if present).
    #[arg(long, global = true)]
    pub config: Option<PathBuf>,
    /// NATS server URL; without it, commands use the socket of a running `xo up`.
    #[arg(long, global = true, env = "XO_NATS_URL")]
    pub nats: Option<String>,
    /// Subject prefix (config org.prefix).
    #[arg(long, global = true)]
    pub prefix: Option<String>,
    /// State directory (config state.dir).
    #[arg(long, global = true)]
    pub state_dir: Option<PathBuf>,
    /// Log format: pretty or json (config telemetry.log_format).
    #[arg(long, global = true)]
    pub log_format: Option<String>,
}

impl Globals {
    /// The configuration keys these options set.
    pub fn overrides(&self) -> Vec<(String, String)> {
        let mut o = Vec::new();
        if let Some(n) = &self.nats {
            o.push(("nats.url".into(), n.clone()));
        }
        if let Some(p) = &self.prefix {
            o.push(("org.prefix".into(), p.clone()));
        }
        if let Some(d) = &self.state_dir {
            o.push(("state.dir".into(), d.display().to_string()));
        }
        if let Some(f) = &self.log_format {
            o.push(("telemetry.log_format".into(), f.clone()));
        }
        o
    }

    /// The configuration these options give, and the runtime a command
    /// runs on (`state.runtime_threads` of them; the descriptor limit
    /// raised first: every connection takes one). `Err`: the exit code and what to say (2 for the configuration).
    pub fn start(
        &self,
    ) -> Result<(xo_runtime::XoConfig, tokio::runtime::Runtime), (std::process::ExitCode, String)>
    {
        let cfg = xo_runtime::XoConfig::load(self.config.as_deref(), &self.overrides())
            .map_err(|e| (std::process::ExitCode::from(2), format!("error: {e}")))?;
        xo_runtime::limits::raise_fd_limit();
        if let Err(e) = xo_runtime::limits::huge_pages(cfg.state.huge_pages) {
            let how = if cfg.state.huge_pages { "on" } else { "off" };
            eprintln!(
                "warning: transparent huge pages could not be turned {how} for this process (prctl: {e}); the kernel's policy stays (state.huge_pages)"
            );
        }
        let rt = match cfg.state.runtime_threads {
            1 => tokio::runtime::Builder::new_current_thread(),
            0 => tokio::runtime::Builder::new_multi_thread(),
            n => {
                let mut b = tokio::runtime::Builder::new_multi_thread();
                b.worker_threads(n);
                b
            }
        }
        .enable_all()
        .build()
        .map_err(|e| {
            (
                std::process::ExitCode::FAILURE,
                format!("error: cannot start the runtime: {e}"),
            )
        })?;
        Ok((cfg, rt))
    }

    /// The same options as arguments, to hand to another binary.
    #[allow(dead_code)] // used by `xo` only; this file is shared with `xo-bench`
    pub fn args(&self) -> Vec<OsString> {
        let mut a: Vec<OsString> = Vec::new();
        let mut flag = |name: &str, v: OsString| {
            a.push(name.into());
            a.push(v);
        };
        if let Some(c) = &self.config {
            flag("--config", c.into());
        }
        if let Some(n) = &self.nats {
            flag("--nats", n.into());
        }
        if let Some(p) = &self.prefix {
            flag("--prefix", p.into());
        }
        if let Some(d) = &self.state_dir {
            flag("--state-dir", d.into());
        }
        if let Some(f) = &self.log_format {
            flag("--log-format", f.into());
        }
        a
    }
}
