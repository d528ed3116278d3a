//! Agents run confined. An agent is a program the runner starts with the
//! task's words in its prompt: it may be talked into anything. With
//! Landlock (Linux ≥ 5.13, unprivileged), each agent process and its
//! children:
//!
//! - may read and run anything, but write only in its task's folder, the
//!   temp folder, `/dev/null`-like devices and `runner.confine_write`;
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
    ABI, Access, AccessFs, CompatLevel, Compatible, LandlockStatus, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus, Scope, path_beneath_rules,
};

/// The newest Landlock ABI this code asks for (best effort below it).
const ABI_WANTED: ABI = ABI::V6;

/// Devices any program writes to.
const DEVICES: [&str; 5] = [
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/tty",
    "/dev/pts",
];

/// Where a confined agent may write besides its working folder.
#[derive(Debug, Clone)]
pub struct Confinement {
    pub write: Vec<PathBuf>,
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

impl Confinement {
    /// The temp folder, the devices, and `extra` (`~/` is `HOME`).
    pub fn new(extra: &[String]) -> Self {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let mut write = vec![std::env::temp_dir()];
        write.extend(DEVICES.iter().map(PathBuf::from));
        for p in extra {
            match (p.strip_prefix("~/"), &home) {
                (Some(rest), Some(h)) => write.push(h.join(rest)),
                _ => write.push(PathBuf::from(p)),
            }
        }
        Self { write }
    }

    /// Restricts the calling thread (and whatever it starts from now on):
    /// reads and runs anywhere, writes under `cwd` and [`Self::write`]
    /// only, no ptrace (so no `/proc/<pid>/environ`) and no signals
    /// outside. Call it only on a thread that exists to start one agent.
    pub fn restrict_this_thread(&self, cwd: &Path) -> Result<RulesetStatus, ConfineError> {
        drop_caps()?;
        let abi = ABI_WANTED;
        let rules = |e: landlock::RulesetError| ConfineError::Ruleset(e.to_string());
        let mut ruleset = Ruleset::default()
            .set_compatibility(CompatLevel::BestEffort)
            .handle_access(AccessFs::from_all(abi))
            .map_err(rules)?;
        ruleset = ruleset.scope(Scope::Signal).map_err(rules)?;
        let writable: Vec<&Path> = std::iter::once(cwd)
            .chain(self.write.iter().map(PathBuf::as_path))
            .collect();
        let status = ruleset
            .create()
            .map_err(rules)?
            .add_rules(path_beneath_rules(["/"], AccessFs::from_read(abi)))
            .map_err(rules)?
            .add_rules(path_beneath_rules(writable, AccessFs::from_all(abi)))
            .map_err(rules)?
            .restrict_self()
            .map_err(rules)?;
        Ok(status.ruleset)
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
    #[error("cannot confine the agent (runner.confine): cannot drop {cap} ({set}): {reason}")]
    Capability {
        cap: String,
        set: String,
        reason: String,
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
                    reason: e.to_string(),
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
    fn home_paths_and_the_temp_folder_are_writable() {
        let c = Confinement::new(&["~/.claude".into(), "/srv/cache".into()]);
        assert!(c.write.contains(&std::env::temp_dir()));
        assert!(c.write.contains(&PathBuf::from("/dev/null")));
        assert!(c.write.contains(&PathBuf::from("/srv/cache")));
        if let Some(h) = std::env::var_os("HOME") {
            assert!(c.write.contains(&PathBuf::from(h).join(".claude")));
        }
    }
}
