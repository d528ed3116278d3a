//! XO's git, through libgit2 (the `git2` crate): every git operation the
//! runner makes on its own repository of a project (`<data>/<project>/git`)
//! and on the trees agents write. Blocking calls: [`crate::git`] and
//! [`crate::worktree`] run them off the async runtime.
//!
//! Why a library and not the `git` program: libgit2 runs nothing a
//! repository or a tree names. It has no hooks, no fsmonitor, no external
//! diff or textconv, and runs no filter driver (a `filter=x` in an agent's
//! `.gitattributes` names a filter libgit2 does not have: the file is taken
//! as it is). It reads no configuration but the repository's own, XO's
//! ([`isolate`]: neither the machine's nor the user's, which an unconfined
//! agent could write), and the agent's own `.git` folders are never opened
//! as the repository (the work tree's `.git` is skipped; a nested one is a
//! sub-repository, recorded by its commit, as git does).

use std::path::{Path, PathBuf};
use std::sync::Once;

use git2::build::CheckoutBuilder;
use git2::{Delta, DiffFormat, DiffOptions, Index, IndexAddOption, Oid, Repository, Signature};

/// A git operation that failed: where, what, and why.
#[derive(Debug, thiserror::Error)]
#[error("git in {dir}: {what}: {source}")]
pub struct GitError {
    pub dir: String,
    pub what: String,
    #[source]
    pub source: Cause,
}

/// Why a git operation failed.
#[derive(Debug, thiserror::Error)]
pub enum Cause {
    /// libgit2 refused or failed.
    #[error("{}", .0.message())]
    Git(#[from] git2::Error),
    /// A file of XO's records, or of the tree.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// A state git itself does not see as an error (a branch gone, a
    /// remote that refused an update).
    #[error("{0}")]
    Said(String),
}

impl GitError {
    pub(crate) fn new(dir: &Path, what: impl Into<String>, source: impl Into<Cause>) -> Self {
        Self {
            dir: dir.display().to_string(),
            what: what.into(),
            source: source.into(),
        }
    }

    pub(crate) fn said(dir: &Path, what: impl Into<String>, why: impl Into<String>) -> Self {
        Self::new(dir, what, Cause::Said(why.into()))
    }
}

/// libgit2 reads no configuration but the repository's: not the system's
/// (`/etc/gitconfig`), the user's (`~/.gitconfig`) nor XDG's. Once per
/// process, before any repository is opened.
fn isolate() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        for level in [
            git2::ConfigLevel::System,
            git2::ConfigLevel::XDG,
            git2::ConfigLevel::Global,
            git2::ConfigLevel::ProgramData,
        ] {
            // SAFETY: libgit2's search paths are process-wide and not
            // synchronised; this runs once, inside the `Once`, before the
            // first repository of the process is opened or made (every
            // use of git2 in XO goes through `Repo::open` or `init`, which
            // call this first), so no other libgit2 call runs beside it.
            #[allow(unsafe_code)]
            let set = unsafe { git2::opts::set_search_path(level, "") };
            if let Err(e) = set {
                tracing::warn!(?level, error = %e.message(), "libgit2 may read git configuration outside XO's repository");
            }
        }
    });
}

/// Makes a bare repository at `git_dir` (XO's, for a project).
pub(crate) fn init(git_dir: &Path) -> Result<(), GitError> {
    isolate();
    Repository::init_bare(git_dir)
        .map(drop)
        .map_err(|e| GitError::new(git_dir, "init", e))
}

/// An `Oid` from its hex form (one XO wrote).
pub(crate) fn oid(dir: &Path, hex: &str) -> Result<Oid, GitError> {
    Oid::from_str(hex.trim()).map_err(|e| GitError::new(dir, format!("the commit {hex}"), e))
}

/// Whether a folder on the way to `path` (relative to `root`) is a link:
/// reading or writing it would leave the tree.
fn through_link(root: &Path, path: &str) -> bool {
    let mut at = root.to_path_buf();
    let mut parts = Path::new(path).components().peekable();
    while let Some(c) = parts.next() {
        if parts.peek().is_none() {
            return false;
        }
        at.push(c);
        if std::fs::symlink_metadata(&at).is_ok_and(|m| m.file_type().is_symlink()) {
            return true;
        }
    }
    false
}

/// Removes every link that stands where one of the index's paths (under
/// `prefix`) or a folder on the way to one is: libgit2's checkout writes
/// through such a link, out of the tree (an agent can swap a file or a
/// folder for a link to anywhere). The checkout then makes the file, the
/// folder, or the link the index has.
fn unlink_leading_links(root: &Path, index: &Index, prefix: &str) -> Result<(), GitError> {
    let mut seen = std::collections::HashSet::new();
    for e in index.iter() {
        let path = String::from_utf8_lossy(&e.path).into_owned();
        if !prefix.is_empty() && !path.starts_with(&format!("{prefix}/")) {
            continue;
        }
        let mut at = root.to_path_buf();
        let mut parts = Path::new(&path).components().peekable();
        while let Some(c) = parts.next() {
            let last = parts.peek().is_none();
            at.push(c);
            if !last && !seen.insert(at.clone()) {
                continue;
            }
            if std::fs::symlink_metadata(&at).is_ok_and(|m| m.file_type().is_symlink()) {
                std::fs::remove_file(&at)
                    .map_err(|e| GitError::new(&at, "remove a link where a folder was", e))?;
            }
        }
    }
    Ok(())
}

/// XO's repository of a project, with a work tree (or none).
pub(crate) struct Repo {
    repo: Repository,
    git_dir: PathBuf,
    work_tree: Option<PathBuf>,
}

/// What a reference must be before it is moved.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Was {
    /// Whatever it is, or none.
    Any,
    /// It must not exist yet.
    Absent,
    /// It must still be this commit.
    At(Oid),
}

/// A changed path between two trees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Change {
    /// `A`, `M`, `D` or `T` (type changed), as `git diff --name-status`.
    pub status: char,
    pub path: String,
    /// Lines added and removed; `None` for a binary file.
    pub lines: Option<(usize, usize)>,
}

impl Repo {
    /// Opens `git_dir`, with `work_tree` as its work tree when given.
    pub(crate) fn open(git_dir: &Path, work_tree: Option<&Path>) -> Result<Self, GitError> {
        isolate();
        let repo = Repository::open_bare(git_dir).map_err(|e| GitError::new(git_dir, "open", e))?;
        if let Some(w) = work_tree {
            repo.set_workdir(w, false)
                .map_err(|e| GitError::new(w, "use as the work tree", e))?;
        }
        Ok(Self {
            repo,
            git_dir: git_dir.to_path_buf(),
            work_tree: work_tree.map(Path::to_path_buf),
        })
    }

    fn err(&self, what: impl Into<String>) -> impl FnOnce(git2::Error) -> GitError + '_ {
        let what = what.into();
        move |e| GitError::new(&self.git_dir, what, e)
    }

    fn tree_dir(&self) -> Result<&Path, GitError> {
        self.work_tree
            .as_deref()
            .ok_or_else(|| GitError::said(&self.git_dir, "a tree operation", "no work tree"))
    }

    /// `cwd` relative to the work tree (`""` for the tree itself).
    fn prefix(&self, cwd: &Path) -> Result<String, GitError> {
        let root = self.tree_dir()?;
        let rel = cwd.strip_prefix(root).map_err(|_| {
            GitError::said(
                cwd,
                "snapshot",
                format!("not inside the work tree {}", root.display()),
            )
        })?;
        let rel = rel
            .to_str()
            .ok_or_else(|| GitError::said(cwd, "snapshot", "the directory's path is not UTF-8"))?;
        Ok(rel.trim_end_matches('/').to_string())
    }

    /// An index of the repository, empty, held in memory or (to check out
    /// through it) in the private file `at`.
    fn index(&self, at: Option<&Path>) -> Result<Index, GitError> {
        let mut index = match at {
            None => Index::new(),
            Some(p) => {
                let _ = std::fs::remove_file(p);
                Index::open(p)
            }
        }
        .map_err(self.err("a private index"))?;
        self.repo
            .set_index(&mut index)
            .map_err(self.err("a private index"))?;
        Ok(index)
    }

    /// The files under `cwd` (all of them but ignored ones and `.git`) as
    /// a tree object: `git add -A -- . && git write-tree`, through an index
    /// of its own.
    pub(crate) fn tree_of_dir(&self, cwd: &Path) -> Result<Oid, GitError> {
        let prefix = self.prefix(cwd)?;
        let mut index = self.index(None)?;
        let spec: Vec<&str> = if prefix.is_empty() {
            Vec::new()
        } else {
            vec![prefix.as_str()]
        };
        index
            .add_all(spec.iter(), IndexAddOption::DEFAULT, None)
            .map_err(|e| GitError::new(cwd, "add the tree's files", e))?;
        index
            .write_tree()
            .map_err(|e| GitError::new(cwd, "write the tree", e))
    }

    /// A commit of `tree` with `parents`, by `who` (name, email).
    pub(crate) fn commit(
        &self,
        tree: Oid,
        parents: &[Oid],
        message: &str,
        who: (&str, &str),
    ) -> Result<Oid, GitError> {
        let sig = Signature::now(who.0, who.1).map_err(self.err("the commit's author"))?;
        let tree = self
            .repo
            .find_tree(tree)
            .map_err(self.err("find the tree"))?;
        let parents = parents
            .iter()
            .map(|p| self.repo.find_commit(*p))
            .collect::<Result<Vec<_>, _>>()
            .map_err(self.err("find the parent"))?;
        let parents: Vec<&git2::Commit> = parents.iter().collect();
        self.repo
            .commit(None, &sig, &sig, message, &tree, &parents)
            .map_err(self.err("commit"))
    }

    /// Moves (or makes) `refname` to `to`, if it was what `was` says.
    pub(crate) fn set_ref(&self, refname: &str, to: Oid, was: Was) -> Result<(), GitError> {
        let what = format!("update {refname}");
        let log = "xo";
        match was {
            Was::Any => self.repo.reference(refname, to, true, log),
            Was::Absent => self.repo.reference(refname, to, false, log),
            Was::At(old) => self.repo.reference_matching(refname, to, true, old, log),
        }
        .map(drop)
        .map_err(self.err(what))
    }

    /// The commit `refname` names, if it exists.
    pub(crate) fn commit_of(&self, refname: &str) -> Option<Oid> {
        let r = self.repo.find_reference(refname).ok()?;
        r.peel_to_commit().ok().map(|c| c.id())
    }

    /// The tree of `commit`.
    pub(crate) fn tree_of(&self, commit: Oid) -> Result<Oid, GitError> {
        self.repo
            .find_commit(commit)
            .map(|c| c.tree_id())
            .map_err(self.err(format!("the tree of {commit}")))
    }

    /// The tree object of `commit`.
    fn commit_tree(&self, commit: Oid) -> Result<git2::Tree<'_>, GitError> {
        self.repo
            .find_commit(commit)
            .and_then(|c| c.tree())
            .map_err(self.err(format!("the tree of {commit}")))
    }

    /// Writes `commit`'s files into the (empty) work tree.
    pub(crate) fn check_out(&self, commit: Oid, index_file: &Path) -> Result<(), GitError> {
        let dir = self.tree_dir()?.to_path_buf();
        let tree = self.commit_tree(commit)?;
        let mut index = self.index(Some(index_file))?;
        index.read_tree(&tree).map_err(self.err("read the tree"))?;
        unlink_leading_links(&dir, &index, "")?;
        let mut co = CheckoutBuilder::new();
        co.force();
        let r = self
            .repo
            .checkout_index(Some(&mut index), Some(&mut co))
            .map_err(|e| GitError::new(&dir, format!("check out {commit}"), e));
        let _ = std::fs::remove_file(index_file);
        r
    }

    /// Resets the files under `cwd` to `commit`'s (files made since
    /// removed; ignored ones kept), except `keep` (paths relative to
    /// `cwd`), which stay as they are now.
    pub(crate) fn reset_dir(
        &self,
        cwd: &Path,
        commit: Oid,
        keep: &[String],
        index_file: &Path,
    ) -> Result<(), GitError> {
        let prefix = self.prefix(cwd)?;
        let full = |p: &str| {
            if prefix.is_empty() {
                p.to_string()
            } else {
                format!("{prefix}/{p}")
            }
        };
        let tree = self.commit_tree(commit)?;
        let mut index = self.index(Some(index_file))?;
        let r = (|| {
            index.read_tree(&tree).map_err(self.err("read the tree"))?;
            // Their current content goes into the index, so the checkout
            // leaves them as they are.
            let root = self.tree_dir()?.to_path_buf();
            for p in keep {
                let path = full(p);
                // Never read through a link: what it points at is not the
                // tree's.
                let r = if !through_link(&root, &path) && cwd.join(p).symlink_metadata().is_ok() {
                    index.add_path(Path::new(&path))
                } else {
                    index.remove_path(Path::new(&path))
                };
                r.map_err(|e| GitError::new(cwd, format!("keep {p}"), e))?;
            }
            unlink_leading_links(&root, &index, &prefix)?;
            let mut co = CheckoutBuilder::new();
            co.force().remove_untracked(true);
            if !prefix.is_empty() {
                co.path(&prefix);
            }
            self.repo
                .checkout_index(Some(&mut index), Some(&mut co))
                .map_err(|e| GitError::new(cwd, format!("reset to {commit}"), e))
        })();
        let _ = std::fs::remove_file(index_file);
        r
    }

    /// The paths that differ between the trees `from` and `to`, under
    /// `prefix` (relative to it) when given; with their lines when `lines`.
    pub(crate) fn changes(
        &self,
        from: Oid,
        to: Oid,
        prefix: Option<&str>,
        lines: bool,
    ) -> Result<Vec<Change>, GitError> {
        let diff = self.diff_trees(from, to, prefix)?;
        let mut out = Vec::new();
        for (i, d) in diff.deltas().enumerate() {
            let status = match d.status() {
                Delta::Added => 'A',
                Delta::Deleted => 'D',
                Delta::Typechange => 'T',
                _ => 'M',
            };
            let Some(path) = d
                .new_file()
                .path()
                .or_else(|| d.old_file().path())
                .and_then(Path::to_str)
            else {
                continue;
            };
            let path = match prefix {
                Some(p) if !p.is_empty() => path
                    .strip_prefix(p)
                    .map(|s| s.trim_start_matches('/'))
                    .unwrap_or(path),
                _ => path,
            };
            let lines = if lines {
                let patch = git2::Patch::from_diff(&diff, i).map_err(self.err("the diff"))?;
                match patch {
                    Some(p) if !p.delta().flags().is_binary() => {
                        let (_, added, removed) = p.line_stats().map_err(self.err("the diff"))?;
                        Some((added, removed))
                    }
                    _ => None,
                }
            } else {
                None
            };
            out.push(Change {
                status,
                path: path.to_string(),
                lines,
            });
        }
        Ok(out)
    }

    fn diff_trees(
        &self,
        from: Oid,
        to: Oid,
        prefix: Option<&str>,
    ) -> Result<git2::Diff<'_>, GitError> {
        let a = self
            .repo
            .find_tree(from)
            .map_err(self.err("find the tree"))?;
        let b = self.repo.find_tree(to).map_err(self.err("find the tree"))?;
        let mut opts = DiffOptions::new();
        if let Some(p) = prefix.filter(|p| !p.is_empty()) {
            opts.pathspec(p);
        }
        self.repo
            .diff_tree_to_tree(Some(&a), Some(&b), Some(&mut opts))
            .map_err(self.err(format!("diff {from} {to}")))
    }

    /// The patch from commit `base` to `commit` (`git diff`), cut after
    /// `limit` bytes (the `bool`: it was cut).
    pub(crate) fn patch(
        &self,
        base: Oid,
        commit: Oid,
        limit: usize,
    ) -> Result<(String, bool), GitError> {
        let diff = self.diff_trees(self.tree_of(base)?, self.tree_of(commit)?, None)?;
        let mut out: Vec<u8> = Vec::new();
        let mut cut = false;
        let printed = diff.print(DiffFormat::Patch, |_, _, line| {
            if matches!(line.origin(), '+' | '-' | ' ') {
                out.push(line.origin() as u8);
            }
            out.extend_from_slice(line.content());
            cut = out.len() > limit;
            !cut
        });
        if let Err(e) = printed
            && !cut
        {
            return Err(self.err("the patch")(e));
        }
        let mut text = String::from_utf8_lossy(&out).into_owned();
        if cut {
            let mut at = limit.min(text.len());
            while !text.is_char_boundary(at) {
                at -= 1;
            }
            let at = text[..at].rfind('\n').map_or(at, |i| i + 1);
            text.truncate(at);
        }
        Ok((text, cut))
    }

    /// The tree of `ours` with `theirs` merged in (from their merge base),
    /// or the paths that conflict.
    pub(crate) fn merge(
        &self,
        ours: Oid,
        theirs: Oid,
    ) -> Result<Result<Oid, Vec<String>>, GitError> {
        let find = |c| {
            self.repo
                .find_commit(c)
                .map_err(self.err(format!("find {c}")))
        };
        let (a, b) = (find(ours)?, find(theirs)?);
        let mut index = self
            .repo
            .merge_commits(&a, &b, None)
            .map_err(self.err(format!("merge {theirs} into {ours}")))?;
        if index.has_conflicts() {
            let mut paths: Vec<String> = index
                .conflicts()
                .map_err(self.err("the merge's conflicts"))?
                .filter_map(Result::ok)
                .filter_map(|c| {
                    let e = c.our.or(c.their).or(c.ancestor)?;
                    Some(String::from_utf8_lossy(&e.path).into_owned())
                })
                .collect();
            paths.sort();
            paths.dedup();
            return Ok(Err(paths));
        }
        index
            .write_tree_to(&self.repo)
            .map(Ok)
            .map_err(self.err("write the merged tree"))
    }

    /// The work tree goes from commit `old` to `new`, path by path: the
    /// paths `new` changes are written, the others never touched. When
    /// one of them was changed in the tree since `old` (to something but
    /// what `new` has), nothing is written and those paths are given back.
    pub(crate) fn advance(
        &self,
        old: Oid,
        new: Oid,
        index_file: &Path,
    ) -> Result<Result<(), Vec<String>>, GitError> {
        let dir = self.tree_dir()?.to_path_buf();
        let now = self.tree_of_dir(&dir)?;
        let (old_t, new_t) = (self.tree_of(old)?, self.tree_of(new)?);
        let changed = self.changes(old_t, new_t, None, false)?;
        if changed.is_empty() {
            return Ok(Ok(()));
        }
        let find = |t| self.repo.find_tree(t).map_err(self.err("find the tree"));
        let (now, old_t, new_t) = (find(now)?, find(old_t)?, find(new_t)?);
        let entry = |t: &git2::Tree, p: &str| {
            t.get_path(Path::new(p))
                .ok()
                .map(|e| (e.id(), e.filemode()))
        };
        let clashes: Vec<String> = changed
            .iter()
            .filter(|c| {
                let here = entry(&now, &c.path);
                here != entry(&old_t, &c.path) && here != entry(&new_t, &c.path)
            })
            .map(|c| c.path.clone())
            .collect();
        if !clashes.is_empty() {
            return Ok(Err(clashes));
        }
        let mut index = self.index(Some(index_file))?;
        let r = (|| {
            index.read_tree(&new_t).map_err(self.err("read the tree"))?;
            unlink_leading_links(&dir, &index, "")?;
            let mut co = CheckoutBuilder::new();
            co.force()
                .remove_untracked(true)
                .disable_pathspec_match(true);
            for c in &changed {
                co.path(&c.path);
            }
            self.repo
                .checkout_index(Some(&mut index), Some(&mut co))
                .map_err(|e| GitError::new(&dir, format!("check out {new}"), e))
        })();
        let _ = std::fs::remove_file(index_file);
        r.map(Ok)
    }

    /// Pushes `refspec` to `remote` (a path or a URL; over SSH with the
    /// agent at `SSH_AUTH_SOCK`); a refusal is an error with the remote's
    /// words.
    pub(crate) fn push(&self, remote: &str, branch: &str) -> Result<(), GitError> {
        let refspec = format!("refs/heads/{branch}:refs/heads/{branch}");
        let what = format!("push {branch}");
        let failed = |e| GitError::new(Path::new(remote), what.clone(), e);
        // A path (not a URL, not `host:path`) that is not there: said so,
        // not as libgit2's "unsupported URL protocol".
        if !remote.contains("://") && !remote.contains(':') && !Path::new(remote).exists() {
            return Err(GitError::said(
                Path::new(remote),
                what,
                "no repository at this path (runner.push_remote: a path or a URL)",
            ));
        }
        let mut r = self.repo.remote_anonymous(remote).map_err(failed)?;
        let refused = std::cell::RefCell::new(Vec::<String>::new());
        let tries = std::cell::Cell::new(0u32);
        let mut cb = git2::RemoteCallbacks::new();
        cb.credentials(|_url, user, allowed| {
            tries.set(tries.get() + 1);
            if tries.get() > 1 {
                return Err(git2::Error::from_str(
                    "the remote refused the SSH agent's keys (SSH_AUTH_SOCK)",
                ));
            }
            if allowed.is_ssh_key() {
                git2::Cred::ssh_key_from_agent(user.unwrap_or("git"))
            } else {
                Err(git2::Error::from_str(
                    "the remote asks for credentials: use an SSH remote with an agent (SSH_AUTH_SOCK) or a path",
                ))
            }
        });
        cb.push_update_reference(|name, status| {
            if let Some(s) = status {
                refused.borrow_mut().push(format!("{name}: {s}"));
            }
            Ok(())
        });
        let mut opts = git2::PushOptions::new();
        opts.remote_callbacks(cb);
        r.push(&[refspec.as_str()], Some(&mut opts))
            .map_err(failed)?;
        drop(opts);
        let refused = refused.into_inner();
        if refused.is_empty() {
            Ok(())
        } else {
            Err(GitError::said(
                Path::new(remote),
                what,
                format!("refused: {}", refused.join("; ")),
            ))
        }
    }
}
