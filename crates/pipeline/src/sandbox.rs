//! The sandbox: every path an agent or a task names is resolved here and
//! must stay under the sandbox root, through `..`, absolute paths and
//! symlinks alike.

use std::path::{Component, Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// What about the path puts it outside (a description of the input).
    #[error("path {path:?} escapes the sandbox: {reason}")]
    Escape { path: String, reason: String },
    #[error("sandbox {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("sandbox {path}: the working directory is not a directory")]
    NotADirectory { path: String },
    #[error("sandbox {path}: the working directory does not exist ({source})")]
    NoWorkingDirectory {
        path: String,
        source: std::io::Error,
    },
}

/// The sandbox root, canonical (symlinks resolved), and the project
/// directories under it.
#[derive(Debug, Clone)]
pub struct Sandbox {
    root: PathBuf,
}

impl Sandbox {
    /// Creates the root if needed.
    pub fn open(root: &Path) -> Result<Self, SandboxError> {
        std::fs::create_dir_all(root).map_err(|e| io(root, e))?;
        let root = root.canonicalize().map_err(|e| io(root, e))?;
        Ok(Self { root })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `<root>/<project>`, created if missing. The project id is one token.
    pub fn project_dir(&self, project: &str) -> Result<PathBuf, SandboxError> {
        xo_proto::validate_token("project id", project).map_err(|reason| SandboxError::Escape {
            path: project.to_string(),
            reason: reason.into(),
        })?;
        let dir = self.root.join(project);
        std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
        Ok(dir)
    }

    /// Resolves `rel` against `base` (itself inside the sandbox). Refuses
    /// absolute paths, `..`, and anything whose existing part resolves
    /// (through symlinks) outside the root. The target need not exist.
    pub fn resolve(&self, base: &Path, rel: &str) -> Result<PathBuf, SandboxError> {
        let escape = |reason: &str| SandboxError::Escape {
            path: rel.to_string(),
            reason: reason.to_string(),
        };
        if rel.contains('\0') {
            return Err(escape("it contains a NUL byte"));
        }
        let p = Path::new(rel);
        for c in p.components() {
            match c {
                Component::Normal(_) | Component::CurDir => {}
                Component::ParentDir => return Err(escape("it contains '..'")),
                Component::RootDir | Component::Prefix(_) => {
                    return Err(escape(
                        "it is absolute; give a path relative to the sandbox",
                    ));
                }
            }
        }
        let joined = base.join(p);
        self.check_inside(&joined, rel)?;
        Ok(joined)
    }

    /// Checks that the deepest existing ancestor of `path` resolves inside
    /// the root (a symlink pointing out is refused even if the target is
    /// yet to be created).
    pub fn check_inside(&self, path: &Path, shown: &str) -> Result<(), SandboxError> {
        let mut existing = path.to_path_buf();
        let mut rest = Vec::new();
        loop {
            match existing.symlink_metadata() {
                Ok(_) => break,
                Err(_) => {
                    let Some(name) = existing.file_name().map(|n| n.to_owned()) else {
                        break;
                    };
                    rest.push(name);
                    if !existing.pop() {
                        break;
                    }
                }
            }
        }
        let real = existing.canonicalize().map_err(|e| io(&existing, e))?;
        if !real.starts_with(&self.root) {
            return Err(SandboxError::Escape {
                path: shown.to_string(),
                reason: format!(
                    "it resolves to {} (through a symlink), outside {}",
                    real.display(),
                    self.root.display()
                ),
            });
        }
        Ok(())
    }

    /// The working directory of a task: the project directory, or the
    /// task's `working_directory` under it, which must exist and be a directory.
    pub fn working_dir(
        &self,
        project: &Path,
        task_dir: Option<&str>,
    ) -> Result<PathBuf, SandboxError> {
        let dir = match task_dir {
            None => project.to_path_buf(),
            Some(d) => self.resolve(project, d)?,
        };
        match dir.metadata() {
            Ok(m) if m.is_dir() => Ok(dir),
            Ok(_) => Err(SandboxError::NotADirectory {
                path: dir.display().to_string(),
            }),
            Err(e) => Err(SandboxError::NoWorkingDirectory {
                path: dir.display().to_string(),
                source: e,
            }),
        }
    }
}

fn io(p: &Path, e: std::io::Error) -> SandboxError {
    SandboxError::Io {
        path: p.display().to_string(),
        source: e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let sb = Sandbox::open(&tmp.path().join("sb")).unwrap();
        let proj = sb.project_dir("p1").unwrap();
        assert!(sb.resolve(&proj, "src/main.rs").is_ok());
        assert!(sb.resolve(&proj, "./a/b").is_ok());
        let e = sb.resolve(&proj, "../p2/x").unwrap_err().to_string();
        assert!(e.contains("'..'") && e.contains("../p2/x"), "{e}");
        let e = sb.resolve(&proj, "/etc/passwd").unwrap_err().to_string();
        assert!(e.contains("absolute"), "{e}");
        // A symlink inside the project pointing outside the root.
        std::os::unix::fs::symlink(tmp.path(), proj.join("out")).unwrap();
        let e = sb.resolve(&proj, "out/secret.txt").unwrap_err().to_string();
        assert!(e.contains("symlink") && e.contains("out/secret.txt"), "{e}");
        // A symlink that stays inside is fine.
        std::fs::create_dir(proj.join("real")).unwrap();
        std::os::unix::fs::symlink(proj.join("real"), proj.join("alias")).unwrap();
        assert!(sb.resolve(&proj, "alias/new.txt").is_ok());
        assert!(sb.project_dir("../x").is_err());
    }

    #[test]
    fn working_dir_must_exist_inside() {
        let tmp = tempfile::tempdir().unwrap();
        let sb = Sandbox::open(tmp.path()).unwrap();
        let proj = sb.project_dir("p").unwrap();
        assert_eq!(sb.working_dir(&proj, None).unwrap(), proj);
        let e = sb.working_dir(&proj, Some("nope")).unwrap_err().to_string();
        assert!(e.contains("does not exist"), "{e}");
        std::fs::write(proj.join("f"), "x").unwrap();
        let e = sb.working_dir(&proj, Some("f")).unwrap_err().to_string();
        assert!(e.contains("not a directory"), "{e}");
        assert!(sb.working_dir(&proj, Some("..")).is_err());
    }
}
