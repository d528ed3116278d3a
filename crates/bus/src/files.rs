//! Files XO replaces whole (knowledge documents, the review state, a
//! store's compaction, the local socket's token): the new content is
//! written to a fresh temporary file in the same folder (`tempfile`: a name
//! no other writer has, created exclusively), flushed to disk, renamed over
//! the old one, and the folder flushed too. A reader sees the old file or
//! the new one, never a part; two writers never share a temporary file; a
//! crash leaves the old file (and at worst a stray `.tmp*` beside it), not
//! an empty one.

use std::io::Write;
use std::path::Path;

/// Who may read the file written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// This user only (0600): tokens, a store's records.
    Private,
    /// Readable by all (0644): documents an operator reads.
    Shared,
}

/// Replaces `path` with `bytes` (see the module). The error names the step
/// that failed and the path.
pub fn replace(path: &Path, bytes: &[u8], mode: Mode) -> std::io::Result<()> {
    let mut r = Replacement::begin(path, mode)?;
    r.write(bytes)?;
    r.finish()
}

/// A replacement of a file written in steps (as a store's compaction
/// writes most of the new file before it takes its lock, and the rest
/// after): begun in a fresh temporary file beside it, written to, then
/// flushed and renamed over the file. Dropped unfinished, the temporary
/// file is removed and the old file stays.
pub struct Replacement {
    path: std::path::PathBuf,
    tmp: tempfile::NamedTempFile,
}

impl Replacement {
    /// A fresh temporary file beside `path`, with `mode`'s permissions.
    pub fn begin(path: &Path, mode: Mode) -> std::io::Result<Self> {
        let tmp = tempfile::Builder::new()
            .prefix(".tmp")
            .tempfile_in(folder_of(path))
            .map_err(|e| named(path, "making a temporary file to replace", e))?;
        if mode == Mode::Shared {
            use std::os::unix::fs::PermissionsExt;
            tmp.as_file()
                .set_permissions(std::fs::Permissions::from_mode(0o644))
                .map_err(|e| named(path, "setting the mode of the new", e))?;
        }
        Ok(Self {
            path: path.to_path_buf(),
            tmp,
        })
    }

    /// Appends `bytes` to the new file.
    pub fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.tmp
            .write_all(bytes)
            .map_err(|e| named(&self.path, "writing the new", e))
    }

    /// Flushes what is written so far to disk (so that the flush at
    /// [`Self::finish`] has little left to do).
    pub fn flush(&self) -> std::io::Result<()> {
        self.tmp
            .as_file()
            .sync_data()
            .map_err(|e| named(&self.path, "flushing the new", e))
    }

    /// Flushes the new file, renames it over the old one and flushes the
    /// folder: the new file is then on disk whole, under the old name.
    pub fn finish(self) -> std::io::Result<()> {
        let path = self.path;
        self.tmp
            .as_file()
            .sync_all()
            .map_err(|e| named(&path, "writing the new", e))?;
        self.tmp
            .persist(&path)
            .map_err(|e| named(&path, "renaming the new file over", e.error))?;
        sync_dir(folder_of(&path)).map_err(|e| named(&path, "flushing the folder of", e))
    }
}

/// The folder a file is in (`.` for a bare name).
fn folder_of(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// An error naming the step that failed and the file.
fn named(path: &Path, what: &str, e: std::io::Error) -> std::io::Error {
    std::io::Error::new(e.kind(), format!("{what} {}: {e}", path.display()))
}

/// Flushes a folder's entries (a rename in it is then on disk).
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_file_is_replaced_whole_with_its_mode_and_no_temporary_left() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("state.json");
        std::fs::write(&p, "old").unwrap();
        replace(&p, b"new", Mode::Private).unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "new");
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        replace(&p, b"shared", Mode::Shared).unwrap();
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o644);
        let names: Vec<_> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("state.json")]);
    }

    /// Two writers at once: each renames its own whole file, so the result
    /// is one of theirs, never a mix or an empty file (with one fixed
    /// temporary name they wrote into the same file).
    #[test]
    fn concurrent_writers_never_mix_their_content() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("doc.md");
        let a = "a".repeat(64 * 1024);
        let b = "b".repeat(64 * 1024);
        std::thread::scope(|s| {
            for text in [&a, &b] {
                let p = &p;
                s.spawn(move || {
                    for _ in 0..50 {
                        replace(p, text.as_bytes(), Mode::Shared).unwrap();
                    }
                });
            }
        });
        let got = std::fs::read_to_string(&p).unwrap();
        assert!(got == a || got == b, "mixed: {} bytes", got.len());
    }

    #[test]
    fn a_missing_folder_is_an_error_naming_the_path() {
        let e = replace(Path::new("/nonexistent-xo/x.json"), b"x", Mode::Private).unwrap_err();
        assert!(e.to_string().contains("/nonexistent-xo/x.json"), "{e}");
    }
}
