//! The one process-level launcher: the `xo` binary as a user runs it.
//!
//! [`Xo::in_dir`] runs `xo` in a folder against what runs there (the
//! embedded default, `xo up`'s socket); [`Xo::on_nats`] runs it as a
//! client of a fabric over nats-server with a state folder of its own.
//! Either way the environment is the test's, not the machine's: no
//! `XO_NATS_URL` leaks in, logs at `warn`, the console off, stdin closed.
//! [`Xo::up`] starts `xo up` and returns once it answers; dropping the
//! [`Up`] kills it, [`Up::stop`] stops it as ctrl-c does.
//!
//! The binary is [`bin`]: `$XO_BIN`, else the `xo` cargo built beside the
//! running test (the end-to-end tests are the `xo-cli` package's, so cargo
//! builds it, fresh, before they run).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

/// The `xo` binary under test: `$XO_BIN`, else `target/<profile>/xo`
/// beside the running test executable (`target/<profile>/deps/…`).
pub fn bin() -> PathBuf {
    if let Some(b) = std::env::var_os("XO_BIN") {
        return PathBuf::from(b);
    }
    let exe = std::env::current_exe().expect("the test's own path");
    let beside = exe
        .parent()
        .and_then(Path::parent)
        .map(|profile| profile.join("xo"))
        .filter(|p| p.is_file());
    beside.unwrap_or_else(|| {
        panic!(
            "no xo binary beside {} (the end-to-end tests are xo-cli's: \
             `cargo nextest run --workspace` builds it; or set XO_BIN)",
            exe.display()
        )
    })
}

/// How to run `xo`: where, against what, with which environment.
#[derive(Debug, Clone)]
pub struct Xo {
    bin: PathBuf,
    dir: Option<PathBuf>,
    nats: Option<String>,
    env: Vec<(String, String)>,
}

impl Default for Xo {
    fn default() -> Self {
        Self::new()
    }
}

impl Xo {
    /// `xo` with nothing of the machine's leaking in (no `XO_NATS_URL`,
    /// stdin closed) and nothing else set: its log at its own default.
    pub fn new() -> Self {
        Self {
            bin: bin(),
            dir: None,
            nats: None,
            env: Vec::new(),
        }
    }

    /// `xo` in `dir`, against the `xo up` there (no NATS, console off, logs at `warn`).
    pub fn in_dir(dir: &Path) -> Self {
        Self::new()
            .dir(dir)
            .env("RUST_LOG", "warn")
            .env("XO__CONSOLE__ENABLED", "false")
    }

    /// `xo … --nats URL` with `state` as its state folder: a client of a
    /// fabric over nats-server, with no file of that fabric to read.
    pub fn on_nats(url: &str, state: &Path) -> Self {
        Self::new()
            .nats(url)
            .env("XO__STATE__DIR", state.display().to_string())
            .env("RUST_LOG", "error")
    }

    /// Runs in `dir` (where `xo up` keeps `.xo/` and its socket).
    pub fn dir(mut self, dir: &Path) -> Self {
        self.dir = Some(dir.to_path_buf());
        self
    }

    /// Talks to the fabric at `url` (`--nats URL` after the arguments).
    pub fn nats(mut self, url: &str) -> Self {
        self.nats = Some(url.to_string());
        self
    }

    /// The path of the binary (for a test that hands it to another tool).
    pub fn path(&self) -> &Path {
        &self.bin
    }

    /// One more variable for every command (the last one set wins).
    pub fn env(mut self, key: &str, value: impl Into<String>) -> Self {
        self.env.push((key.to_string(), value.into()));
        self
    }

    /// The command `xo ARGS`, not yet run (stdout and stderr as the caller
    /// sets; more arguments may follow, before `--nats`' own).
    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.bin);
        c.args(args).env_remove("XO_NATS_URL").stdin(Stdio::null());
        if let Some(url) = &self.nats {
            c.args(["--nats", url]);
        }
        if let Some(d) = &self.dir {
            c.current_dir(d);
        }
        c.envs(self.env.iter().map(|(k, v)| (k, v)));
        c
    }

    /// Runs `xo ARGS` to its end.
    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args)
            .output()
            .unwrap_or_else(|e| panic!("running {} {args:?}: {e}", self.bin.display()))
    }

    /// Whether `xo status` answers.
    pub fn answers(&self) -> bool {
        self.run(&["status", "--json"]).status.success()
    }

    /// `xo up` here, its log to `stderr`, once `xo status` answers; panics
    /// (killing it) if it exits or never answers.
    pub fn up_logged(&self, stderr: impl Into<Stdio>) -> Up {
        let child = self
            .command(&["up"])
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("starting xo up: {e}"));
        let mut up = Up(Some(child));
        self.wait_answered(up.child());
        up
    }

    /// Waits until `xo status` answers here; panics (killing `child`, the
    /// process that should answer) if it exits first or never answers.
    pub fn wait_answered(&self, child: &mut Child) {
        // A bound on a hang, not a timing assertion: each try is a whole `xo status`.
        for _ in 0..500 {
            if self.answers() {
                return;
            }
            if let Some(status) = child.try_wait().expect("the process's state") {
                panic!("xo exited before it answered: {status}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("xo never answered");
    }

    /// `xo up` here (its log dropped), once it answers.
    pub fn up(&self) -> Up {
        self.up_logged(Stdio::null())
    }
}

/// A running `xo up` (or any `xo` process a test started): killed on drop.
#[derive(Debug)]
pub struct Up(Option<Child>);

impl Up {
    /// Holds a child the test spawned itself, killed on drop like the rest.
    pub fn hold(child: Child) -> Self {
        Self(Some(child))
    }

    pub fn child(&mut self) -> &mut Child {
        self.0.as_mut().expect("a running process")
    }

    pub fn id(&self) -> u32 {
        self.0.as_ref().expect("a running process").id()
    }

    /// Stops it as ctrl-c does (SIGINT) and waits for its end.
    pub fn stop(mut self) -> Output {
        self.signal("INT");
        let child = self.0.take().expect("a running process");
        child.wait_with_output().expect("xo's end")
    }

    /// Sends `sig` (`INT`, `TERM`, `KILL`, …).
    pub fn signal(&self, sig: &str) {
        let _ = crate::signal(self.id(), sig);
    }
}

impl Drop for Up {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// An output's bytes as text (lossy), for an assertion's message.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}
