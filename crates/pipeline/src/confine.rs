//! Agents run confined. An agent is a program the runner starts with the
//! task's words in its prompt: it may be talked into anything. With
//! Landlock (Linux ≥ 5.13, unprivileged), each agent process and its
//! children:
//!
//! - read and run only the system's folders ([`SYSTEM_READ`]), their
//!   project, their program and `runner.confine_read`: not the state
//!   directory (the bus token, the console token, the store), not XO's data
//!   (work logs, task records, the runner's git), not other projects, not
//!   the NATS password or model key files;
//! - write only in their task's folder, the temp folder, `/dev/null`-like
//!   devices and `runner.confine_write`;
//! - connect over TCP only to the ports of `runner.confine_connect` (Landlock
//!   ABI 4, Linux ≥ 6.7) and to a UNIX socket only where they may read
//!   (ABI 9, Linux ≥ 7.1); below those, the runner says at start which rule
//!   the kernel lacks ([`missing`]) — the bus socket then still refuses a
//!   peer without the token the agent cannot read;
//! - cannot read another process's `/proc/<pid>/environ` or memory outside
//!   its sandbox (Landlock's ptrace check): the runner's API keys and NATS
//!   password stay the runner's;
//! - cannot signal processes outside it (ABI 6 and later).
//!
//! Landlock's ptrace check does not hold against a root process with
//! `CAP_SYS_PTRACE`, `CAP_SYS_ADMIN` or `CAP_PERFMON` (measured: a confined
//! root agent still read its runner's environment until all three were
//! gone): a runner running as root (containers often do) would hand its
//! agents those. The confining thread drops them from every set, bounding
//! set included, so no agent of a root runner gets them back.
//! Landlock restricts the calling thread and what it starts: an agent is
//! spawned from a short-lived thread that restricts itself first, so the
//! runner itself is never restricted.

use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, LandlockStatus, NetPort, Ruleset,
    RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope, path_beneath_rules,
};

/// The newest Landlock ABI this code asks for (best effort below it).
const ABI_WANTED: ABI = ABI::V9;

/// Devices any program writes to.
const DEVICES: [&str; 5] = [
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/tty",
    "/dev/pts",
];

/// The system's folders every program reads: programs, libraries, their
/// configuration, `/proc` and `/sys` (another process's `/proc` stays out
/// of reach by the ptrace check), devices, the resolver's files. Not `/`,
/// not `/home`, `/root`, `/var` or `/run` (sockets of other daemons).
pub const SYSTEM_READ: [&str; 15] = [
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
    "/opt",
    "/nix",
    "/proc",
    "/sys",
    "/dev",
    "/run/systemd/resolve",
    "/var/lib/ca-certificates",
];

/// Files of the runner's `HOME` every agent reads: git's own configuration
/// (git stops at a configuration file it may not read, and agents use git).
pub const HOME_READ: [&str; 2] = ["~/.gitconfig", "~/.config/git"];

/// What a confined process may reach besides its working folder.
#[derive(Debug, Clone, Default)]
pub struct Confinement {
    /// Read and run (besides [`SYSTEM_READ`] and everything writable).
    pub read: Vec<PathBuf>,
    /// Read, run and write.
    pub write: Vec<PathBuf>,
    /// TCP ports it may connect to; `None`: any.
    pub connect: Option<Vec<u16>>,
}

/// Whether Landlock works here: probed by a throwaway thread that
/// restricts itself with a ruleset that allows everything.
pub fn available() -> bool {
    std::thread::spawn(|| {
        let abi = ABI_WANTED;
        let status = Ruleset::default()
            .set_compatibility(CompatLevel::BestEffort)
            .handle_access(AccessFs::from_all(abi))
            .and_then(|r| r.create())
            .and_then(|r| r.add_rules(path_beneath_rules(["/"], AccessFs::from_all(abi))))
            .and_then(|r| r.restrict_self());
        matches!(
            status,
            Ok(s) if matches!(s.landlock, LandlockStatus::Available { .. })
                && s.ruleset != RulesetStatus::NotEnforced
        )
    })
    .join()
    .unwrap_or(false)
}

/// The rules this kernel's Landlock lacks, each with what it leaves open
/// (empty: every rule XO asks for is enforced). Probed by creating, not
/// enforcing, a ruleset that requires each.
pub fn missing() -> Vec<&'static str> {
    let hard = || Ruleset::default().set_compatibility(CompatLevel::HardRequirement);
    let mut out = Vec::new();
    if hard()
        .handle_access(AccessNet::ConnectTcp)
        .and_then(|r| r.create())
        .is_err()
    {
        out.push("TCP connect rules (ABI 4, Linux 6.7): runner.confine_connect is not enforced");
    }
    if hard()
        .scope(Scope::Signal)
        .and_then(|r| r.create())
        .is_err()
    {
        out.push("signal scoping (ABI 6, Linux 6.12): an agent can signal processes of this user");
    }
    if hard()
        .handle_access(AccessFs::ResolveUnix)
        .and_then(|r| r.create())
        .is_err()
    {
        out.push("UNIX socket rules (ABI 9, Linux 7.1): an agent can connect to any UNIX socket of this user (the bus socket still asks for its token)");
    }
    out
}

/// `~/x` is under `HOME`; anything else as given.
fn expand(p: &str, home: Option<&Path>) -> PathBuf {
    match (p.strip_prefix("~/"), home) {
        (Some(rest), Some(h)) => h.join(rest),
        _ => PathBuf::from(p),
    }
}

impl Confinement {
    /// An agent's: it writes the temp folder, the devices and `write`
    /// (`~/` is `HOME`), reads `read` too, and connects to `connect`.
    pub fn new(write: &[String], read: &[String], connect: Option<Vec<u16>>) -> Self {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let mut w = vec![std::env::temp_dir()];
        w.extend(DEVICES.iter().map(PathBuf::from));
        w.extend(write.iter().map(|p| expand(p, home.as_deref())));
        let mut r: Vec<PathBuf> = HOME_READ
            .iter()
            .copied()
            .chain(read.iter().map(String::as_str))
            .map(|p| expand(p, home.as_deref()))
            .collect();
        // `xo hook`, run by an agent (Claude Code's hooks), is this binary.
        if let Ok(me) = std::env::current_exe() {
            r.push(me);
        }
        Self {
            read: r,
            write: w,
            connect,
        }
    }

    /// The same, also reading `more` (a task's project, its program).
    pub fn reading(&self, more: impl IntoIterator<Item = PathBuf>) -> Self {
        let mut c = self.clone();
        c.read.extend(more);
        c
    }

    /// The same, also writing `more`.
    pub fn writing(&self, more: impl IntoIterator<Item = PathBuf>) -> Self {
        let mut c = self.clone();
        c.write.extend(more);
        c
    }

    /// Restricts the calling thread (and whatever it starts from now on):
    /// reads and runs [`SYSTEM_READ`] and [`Self::read`], writes under
    /// `cwd` and [`Self::write`] only, connects to [`Self::connect`], no
    /// ptrace (so no `/proc/<pid>/environ`) and no signals outside. Call
    /// it only on a thread that exists to start one process.
    pub fn restrict_this_thread(&self, cwd: &Path) -> Result<RulesetStatus, ConfineError> {
        drop_caps()?;
        let abi = ABI_WANTED;
        let rules = |e: landlock::RulesetError| ConfineError::Ruleset(e.to_string());
        let mut ruleset = Ruleset::default()
            .set_compatibility(CompatLevel::BestEffort)
            .handle_access(AccessFs::from_all(abi))
            .map_err(rules)?;
        if self.connect.is_some() {
            ruleset = ruleset
                .handle_access(AccessNet::ConnectTcp)
                .map_err(rules)?;
        }
        ruleset = ruleset.scope(Scope::Signal).map_err(rules)?;
        let writable: Vec<&Path> = std::iter::once(cwd)
            .chain(self.write.iter().map(PathBuf::as_path))
            .collect();
        let readable: Vec<&Path> = SYSTEM_READ
            .iter()
            .map(Path::new)
            .chain(self.read.iter().map(PathBuf::as_path))
            .collect();
        // Reading includes connecting to a UNIX socket there (ABI 9).
        let read = AccessFs::from_read(abi) | AccessFs::ResolveUnix;
        let mut created = ruleset
            .create()
            .map_err(rules)?
            .add_rules(path_beneath_rules(readable, read))
            .map_err(rules)?
            .add_rules(path_beneath_rules(writable, AccessFs::from_all(abi)))
            .map_err(rules)?;
        for port in self.connect.iter().flatten() {
            created = created
                .add_rule(NetPort::new(*port, AccessNet::ConnectTcp))
                .map_err(rules)?;
        }
        let status = created.restrict_self().map_err(rules)?;
        Ok(status.ruleset)
    }
}

/// The files a program needs read: its install, found from `argv[0]` on
/// `PATH` as the child will find it, both as found and with symlinks
/// resolved (`<prefix>` of `<prefix>/bin/<program>`, where an interpreter
/// or a Node package keeps its library; the version manager's root of
/// `<root>/shims/<program>`, as pyenv, rbenv and asdf lay them out; else
/// the program's folder), and every absolute path among its arguments that
/// names a file (the script it runs). A program found nowhere adds nothing
/// (it fails to start, saying so).
pub fn program_files(argv: &[String], path_var: Option<&str>) -> Vec<PathBuf> {
    let Some((program, args)) = argv.split_first() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let found = if program.contains('/') {
        Some(PathBuf::from(program))
    } else {
        path_var.and_then(|pv| {
            pv.split(':')
                .filter(|d| !d.is_empty())
                .map(|d| Path::new(d).join(program))
                .find(|p| p.is_file())
        })
    };
    if let Some(found) = found {
        out.extend(install_of(&found));
        if let Ok(real) = found.canonicalize() {
            out.extend(install_of(&real));
            out.push(real);
        }
    }
    for a in args {
        let p = Path::new(a);
        if p.is_absolute() && p.is_file() {
            out.push(p.to_path_buf());
        }
    }
    out
}

/// The folder a program's install is: `<prefix>` of `<prefix>/bin/x` (or
/// `sbin`, or `shims`), else the program's own folder; never `/`.
fn install_of(program: &Path) -> Option<PathBuf> {
    let dir = program.parent()?;
    match (dir.file_name(), dir.parent()) {
        (Some(n), Some(prefix))
            if (n == "bin" || n == "sbin" || n == "shims") && prefix != Path::new("/") =>
        {
            Some(prefix.to_path_buf())
        }
        _ if dir != Path::new("/") => Some(dir.to_path_buf()),
        _ => None,
    }
}

/// Why an agent could not be confined (`runner.confine`): it is not
/// started unconfined instead.
#[derive(Debug, thiserror::Error)]
pub enum ConfineError {
    /// Landlock refused the ruleset.
    #[error("cannot confine the agent (runner.confine): {0}")]
    Ruleset(String),
    /// The kernel enforced none of it.
    #[error("cannot confine the agent: Landlock enforced nothing (runner.confine)")]
    NotEnforced,
    /// A capability that reaches other processes could not be dropped.
    #[error("cannot confine the agent (runner.confine): cannot drop {cap} ({set}): {source}")]
    Capability {
        cap: String,
        set: String,
        source: caps::errors::CapsError,
    },
    /// The thread that confines itself to start the agent.
    #[error("cannot start the confining thread: {0}")]
    Thread(std::io::Error),
    #[error("the confining thread ended without an answer")]
    NoAnswer,
}

/// The capabilities that let a process read another's `/proc/<pid>`
/// despite Landlock.
const REACH: [caps::Capability; 3] = [
    caps::Capability::CAP_SYS_PTRACE,
    caps::Capability::CAP_SYS_ADMIN,
    caps::Capability::CAP_PERFMON,
];

/// Drops [`REACH`] from this thread: from the bounding set first (so no
/// exec gives them back; this needs `CAP_SETPCAP`, which only a thread
/// holding them has), then from the others.
fn drop_caps() -> Result<(), ConfineError> {
    use caps::CapSet;
    for cap in REACH {
        for set in [
            CapSet::Bounding,
            CapSet::Ambient,
            CapSet::Inheritable,
            CapSet::Effective,
            CapSet::Permitted,
        ] {
            if caps::has_cap(None, set, cap).unwrap_or(false) {
                caps::drop(None, set, cap).map_err(|e| ConfineError::Capability {
                    cap: cap.to_string(),
                    set: format!("{set:?}"),
                    source: e,
                })?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_programs_install_is_read_where_it_is_found_and_where_it_points() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        // A version manager: <root>/shims/python3 runs <root>/versions/…
        std::fs::create_dir_all(root.join("mgr/shims")).unwrap();
        std::fs::write(root.join("mgr/shims/python3"), "#!/bin/sh\n").unwrap();
        // A Node package linked from <prefix>/bin.
        std::fs::create_dir_all(root.join("node/bin")).unwrap();
        std::fs::create_dir_all(root.join("node/lib/pkg")).unwrap();
        std::fs::write(root.join("node/lib/pkg/cli.js"), "").unwrap();
        std::os::unix::fs::symlink(
            root.join("node/lib/pkg/cli.js"),
            root.join("node/bin/agent"),
        )
        .unwrap();
        std::fs::write(root.join("script.py"), "").unwrap();
        let path = format!(
            "{}:{}",
            root.join("mgr/shims").display(),
            root.join("node/bin").display()
        );
        let real = |p: &str| root.join(p).canonicalize().unwrap();
        let py = program_files(
            &[
                "python3".into(),
                root.join("script.py").display().to_string(),
                "-v".into(),
            ],
            Some(&path),
        );
        assert!(py.contains(&root.join("mgr")), "{py:?}");
        assert!(py.contains(&root.join("script.py")), "{py:?}");
        let agent = program_files(&["agent".into()], Some(&path));
        assert!(agent.contains(&root.join("node")), "{agent:?}");
        assert!(agent.contains(&real("node/lib/pkg")), "{agent:?}");
        assert!(program_files(&["nowhere".into()], Some(&path)).is_empty());
        assert_eq!(
            install_of(Path::new("/bin/sh")),
            Some(PathBuf::from("/bin"))
        );
    }

    #[test]
    fn home_paths_and_the_temp_folder_are_writable() {
        let c = Confinement::new(&["~/.claude".into(), "/srv/cache".into()], &[], None);
        assert!(c.write.contains(&std::env::temp_dir()));
        assert!(c.write.contains(&PathBuf::from("/dev/null")));
        assert!(c.write.contains(&PathBuf::from("/srv/cache")));
        if let Some(h) = std::env::var_os("HOME") {
            assert!(c.write.contains(&PathBuf::from(h).join(".claude")));
        }
    }
}
