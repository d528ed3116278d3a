//! The pipeline's one error: every fallible call of this library returns
//! [`PipelineError`] (or one of the types it wraps, each named for its
//! step), so a caller matches on one enum.

use crate::confine::ConfineError;
use crate::driver::DriverError;
use crate::git::GitError;
use crate::halt::FormatError;
use crate::proc::ProcError;
use crate::project::ProjectError;
use crate::sandbox::SandboxError;

/// `runner.global_template_file` could not be read.
#[derive(Debug, thiserror::Error)]
#[error("runner.global_template_file {path}: {source}")]
pub struct TemplateError {
    pub path: String,
    pub source: std::io::Error,
}

#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// `runner.global_template_file` could not be read.
    #[error(transparent)]
    Template(#[from] TemplateError),
    /// `runner.confine = landlock` on a kernel without Landlock.
    #[error(
        "runner.confine = landlock, but this kernel has no Landlock (Linux 5.13 or later, with landlock in its LSM list); set runner.confine = auto to run unconfined with a warning"
    )]
    NoLandlock,
    /// `runner.confine_connect` names something that is not a port.
    #[error("runner.confine_connect: {0}")]
    ConfineConnect(xo_runtime::config::BadPort),
    /// The agent could not be confined.
    #[error(transparent)]
    Confine(#[from] ConfineError),
    /// An agent's process could not be started.
    #[error(transparent)]
    Process(#[from] ProcError),
    /// The agent driver failed (not the agent: its run is an outcome).
    #[error(transparent)]
    Driver(#[from] DriverError),
    /// A path outside the sandbox, or a sandbox that is not one.
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    /// `.xo/project.toml`.
    #[error(transparent)]
    Project(#[from] ProjectError),
    /// The task's starting commit or its rollback.
    #[error(transparent)]
    Git(#[from] GitError),
    /// A reply not in the required format.
    #[error(transparent)]
    Format(#[from] FormatError),
}
