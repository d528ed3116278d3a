//! Files in a tree an agent can write, opened as untrusted input.
//!
//! An agent may replace any file or folder of its tree with a symlink (to
//! `~/.bashrc`, to `/dev/zero`), a FIFO or a file of any size. Whatever XO
//! reads or appends there goes through here: every component below the
//! trusted base is opened with `O_NOFOLLOW` (a symlink anywhere on the way
//! is refused, not followed), the file must be a regular file, and reads
//! stop at a bound. Nothing here follows a path twice (no check-then-open).

use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::OwnedFd;
use std::path::{Component, Path};

use nix::fcntl::{OFlag, openat};
use nix::sys::stat::Mode;

/// Why an untrusted file was not read or written.
#[derive(Debug, thiserror::Error)]
pub enum UntrustedError {
    /// A component of the path is a symlink (refused, never followed).
    #[error(
        "{path}: {component:?} is a symbolic link; refused (files in an agent's tree are never followed)"
    )]
    Link { path: String, component: String },
    /// The path is not a regular file (a FIFO, a device, a folder).
    #[error("{path}: not a regular file; refused")]
    NotFile { path: String },
    /// The path leaves its base (`..` or absolute).
    #[error("{path}: leaves its folder ('..' or absolute); refused")]
    Outside { path: String },
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

impl UntrustedError {
    /// Nothing there (the file or a folder on the way does not exist).
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }
}

fn io(path: &Path, e: impl Into<std::io::Error>) -> UntrustedError {
    UntrustedError::Io {
        path: path.display().to_string(),
        source: e.into(),
    }
}

/// Opens `base/rel`: `base` is trusted (XO chose it), every component of
/// `rel` is opened without following a symlink. Folders on the way are
/// made (0700) when `create` is set, and so is the file (0600).
fn open_under(
    base: &Path,
    rel: &Path,
    flags: OFlag,
    create: bool,
) -> Result<std::fs::File, UntrustedError> {
    let shown = base.join(rel);
    let names: Vec<&std::ffi::OsStr> = rel
        .components()
        .map(|c| match c {
            Component::Normal(n) => Ok(n),
            _ => Err(UntrustedError::Outside {
                path: shown.display().to_string(),
            }),
        })
        .collect::<Result<_, _>>()?;
    let Some((file, dirs)) = names.split_last() else {
        return Err(UntrustedError::NotFile {
            path: shown.display().to_string(),
        });
    };
    let dir_flags = OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_RDONLY;
    let mut dir: OwnedFd = std::fs::File::open(base).map_err(|e| io(base, e))?.into();
    for name in dirs {
        let next = match openat(&dir, *name, dir_flags, Mode::empty()) {
            Err(nix::errno::Errno::ENOENT) if create => {
                match nix::sys::stat::mkdirat(&dir, *name, Mode::S_IRWXU) {
                    Ok(()) | Err(nix::errno::Errno::EEXIST) => {}
                    Err(e) => return Err(io(&shown, e)),
                }
                openat(&dir, *name, dir_flags, Mode::empty())
            }
            r => r,
        };
        dir = next.map_err(|e| refusal(&shown, name, e))?;
    }
    let mut f = flags | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK;
    if create {
        f |= OFlag::O_CREAT;
    }
    let fd = openat(&dir, *file, f, Mode::S_IRUSR | Mode::S_IWUSR)
        .map_err(|e| refusal(&shown, file, e))?;
    let file = std::fs::File::from(fd);
    let meta = file.metadata().map_err(|e| io(&shown, e))?;
    if !meta.is_file() {
        return Err(UntrustedError::NotFile {
            path: shown.display().to_string(),
        });
    }
    Ok(file)
}

/// `ELOOP` (or `ENOTDIR` on a folder's place) means a symlink was met.
fn refusal(shown: &Path, name: &std::ffi::OsStr, e: nix::errno::Errno) -> UntrustedError {
    match e {
        nix::errno::Errno::ELOOP | nix::errno::Errno::ENOTDIR => UntrustedError::Link {
            path: shown.display().to_string(),
            component: name.to_string_lossy().into_owned(),
        },
        e => io(shown, e),
    }
}

/// At most `max` bytes of `base/rel` from its start; `true` when there
/// was more.
pub fn read_head(base: &Path, rel: &Path, max: usize) -> Result<(Vec<u8>, bool), UntrustedError> {
    let f = open_under(base, rel, OFlag::O_RDONLY, false)?;
    let mut out = Vec::new();
    f.take(max as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| io(&base.join(rel), e))?;
    let more = out.len() > max;
    out.truncate(max);
    Ok((out, more))
}

/// The last `max` bytes of `base/rel` (a file growing meanwhile is read
/// to where it was), and how many bytes came before them.
pub fn read_tail(base: &Path, rel: &Path, max: usize) -> Result<(Vec<u8>, u64), UntrustedError> {
    let mut f = open_under(base, rel, OFlag::O_RDONLY, false)?;
    let shown = base.join(rel);
    let len = f.metadata().map_err(|e| io(&shown, e))?.len();
    let skip = len.saturating_sub(max as u64);
    f.seek(SeekFrom::Start(skip)).map_err(|e| io(&shown, e))?;
    let mut out = Vec::new();
    f.take(len - skip)
        .read_to_end(&mut out)
        .map_err(|e| io(&shown, e))?;
    Ok((out, skip))
}

/// At most `max` bytes of `base/rel` from byte `from`, and the file's
/// length: a reader that follows an appended file reads on from where it
/// was. A file shorter than `from` (truncated, replaced) is read from its
/// start.
pub fn read_from(
    base: &Path,
    rel: &Path,
    from: u64,
    max: usize,
) -> Result<(Vec<u8>, u64, u64), UntrustedError> {
    let mut f = open_under(base, rel, OFlag::O_RDONLY, false)?;
    let shown = base.join(rel);
    let len = f.metadata().map_err(|e| io(&shown, e))?.len();
    let start = if from > len { 0 } else { from };
    f.seek(SeekFrom::Start(start)).map_err(|e| io(&shown, e))?;
    let mut out = Vec::new();
    f.take((len - start).min(max as u64))
        .read_to_end(&mut out)
        .map_err(|e| io(&shown, e))?;
    Ok((out, start, len))
}

/// Appends `bytes` to `base/rel` in one write, making the file (0600) and
/// its folders (0700) if missing. Refuses a file with other hard links (a
/// link to a file outside the tree).
pub fn append(base: &Path, rel: &Path, bytes: &[u8]) -> Result<(), UntrustedError> {
    use std::os::unix::fs::MetadataExt;
    let mut f = open_under(base, rel, OFlag::O_WRONLY | OFlag::O_APPEND, true)?;
    let shown = base.join(rel);
    if f.metadata().map_err(|e| io(&shown, e))?.nlink() > 1 {
        return Err(UntrustedError::NotFile {
            path: shown.display().to_string(),
        });
    }
    f.write_all(bytes).map_err(|e| io(&shown, e))
}

/// Replaces `base/rel` with `bytes` (the same checks as [`append`]).
pub fn write(base: &Path, rel: &Path, bytes: &[u8]) -> Result<(), UntrustedError> {
    use std::os::unix::fs::MetadataExt;
    // Truncated only once it is known to be its own file.
    let mut f = open_under(base, rel, OFlag::O_WRONLY, true)?;
    let shown = base.join(rel);
    if f.metadata().map_err(|e| io(&shown, e))?.nlink() > 1 {
        return Err(UntrustedError::NotFile {
            path: shown.display().to_string(),
        });
    }
    f.set_len(0).map_err(|e| io(&shown, e))?;
    f.write_all(bytes).map_err(|e| io(&shown, e))
}

/// Reads the next line of `r` into `line` (without its `\n`), keeping at
/// most `cap` bytes of it: the rest of a longer line is read and dropped.
/// `None` at the end; `Some(true)` when the line was cut.
pub async fn read_line_capped<R: tokio::io::AsyncBufRead + Unpin>(
    r: &mut R,
    line: &mut Vec<u8>,
    cap: usize,
) -> std::io::Result<Option<bool>> {
    use tokio::io::AsyncBufReadExt;
    line.clear();
    let (mut cut, mut any) = (false, false);
    loop {
        let buf = r.fill_buf().await?;
        if buf.is_empty() {
            return Ok(any.then_some(cut));
        }
        any = true;
        let (chunk, end) = match buf.iter().position(|b| *b == b'\n') {
            Some(i) => (&buf[..i], Some(i + 1)),
            None => (buf, None),
        };
        let room = cap.saturating_sub(line.len());
        if chunk.len() > room {
            cut = true;
        }
        line.extend_from_slice(&chunk[..chunk.len().min(room)]);
        let used = end.unwrap_or(buf.len());
        r.consume(used);
        if end.is_some() {
            return Ok(Some(cut));
        }
    }
}

/// Makes `dir` (and its missing parents) and leaves it `0700`, whatever the
/// umask: XO's own folders (the state directory, the data, the sandbox
/// root, the knowledge) are this user's alone, so no other user can plant
/// a file in them (knowledge, a git config for the runner). A folder owned
/// by another user is left as it is and said.
pub fn private_dir(dir: &Path) -> Result<(), UntrustedError> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| io(dir, e))?;
    let meta = std::fs::metadata(dir).map_err(|e| io(dir, e))?;
    let me = std::fs::metadata("/proc/self").map(|m| m.uid()).ok();
    if me.is_some_and(|me| me != meta.uid()) {
        return Ok(());
    }
    if meta.permissions().mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| io(dir, e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn links_fifos_and_escapes_are_refused_and_nothing_outside_is_touched() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("tree");
        let outside = tmp.path().join("bashrc");
        std::fs::create_dir_all(base.join(".xo")).unwrap();
        std::fs::write(&outside, "mine\n").unwrap();
        // The file itself a link.
        symlink(&outside, base.join(".xo/log.md")).unwrap();
        let e = append(&base, Path::new(".xo/log.md"), b"evil").unwrap_err();
        assert!(matches!(e, UntrustedError::Link { .. }), "{e}");
        assert!(read_head(&base, Path::new(".xo/log.md"), 10).is_err());
        // A folder on the way a link.
        std::fs::create_dir(tmp.path().join("elsewhere")).unwrap();
        symlink(tmp.path().join("elsewhere"), base.join("d")).unwrap();
        let e = append(&base, Path::new("d/new.md"), b"evil").unwrap_err();
        assert!(matches!(e, UntrustedError::Link { .. }), "{e}");
        assert!(!tmp.path().join("elsewhere/new.md").exists());
        // A hard link to a file outside.
        std::fs::hard_link(&outside, base.join("hard")).unwrap();
        assert!(append(&base, Path::new("hard"), b"evil").is_err());
        assert!(write(&base, Path::new("hard"), b"evil").is_err());
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "mine\n");
        // A FIFO would block a reader forever.
        nix::unistd::mkfifo(&base.join("fifo"), Mode::S_IRWXU).unwrap();
        let e = read_tail(&base, Path::new("fifo"), 10).unwrap_err();
        assert!(matches!(e, UntrustedError::NotFile { .. }), "{e}");
        assert!(matches!(
            read_head(&base, Path::new("../bashrc"), 10),
            Err(UntrustedError::Outside { .. })
        ));
        // A plain file: made with its folders, appended, read to a bound.
        append(&base, Path::new("a/b/log.md"), b"0123456789").unwrap();
        append(&base, Path::new("a/b/log.md"), b"abcdef").unwrap();
        assert_eq!(
            read_tail(&base, Path::new("a/b/log.md"), 4).unwrap(),
            (b"cdef".to_vec(), 12)
        );
        assert_eq!(
            read_head(&base, Path::new("a/b/log.md"), 4).unwrap(),
            (b"0123".to_vec(), true)
        );
        assert!(
            read_head(&base, Path::new("missing"), 4)
                .unwrap_err()
                .is_not_found()
        );
    }

    /// Issue 40, item 7: under `umask 000` the state directory, the
    /// knowledge and the sandbox were world-writable. (The umask is the
    /// process's: changing it here would change it under the other tests.
    /// A folder is made with mode 0700, which a umask can only narrow; one
    /// made loose, as `umask 000` made them, is tightened.)
    #[test]
    fn private_dirs_are_0700_whatever_the_umask() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let made = tmp.path().join("a/b/state");
        private_dir(&made).unwrap();
        let loose = tmp.path().join("loose");
        std::fs::create_dir(&loose).unwrap();
        std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o777)).unwrap();
        private_dir(&loose).unwrap();
        for d in [&made, &loose] {
            let mode = std::fs::metadata(d).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o700, "{}: {mode:o}", d.display());
        }
    }

    #[tokio::test]
    async fn a_line_longer_than_the_cap_is_cut_and_the_next_is_whole() {
        let text = format!("short\n{}\nlast", "x".repeat(100_000));
        let mut r = tokio::io::BufReader::with_capacity(64, text.as_bytes());
        let mut line = Vec::new();
        assert_eq!(
            read_line_capped(&mut r, &mut line, 10).await.unwrap(),
            Some(false)
        );
        assert_eq!(line, b"short");
        assert_eq!(
            read_line_capped(&mut r, &mut line, 10).await.unwrap(),
            Some(true)
        );
        assert_eq!(line, b"xxxxxxxxxx");
        assert_eq!(
            read_line_capped(&mut r, &mut line, 10).await.unwrap(),
            Some(false)
        );
        assert_eq!(line, b"last");
        assert_eq!(read_line_capped(&mut r, &mut line, 10).await.unwrap(), None);
    }
}
