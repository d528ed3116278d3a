//! JSON-lines files: one value a line, appended whole (the fleet's audit,
//! the reviewers' run log, the volume's steering files), and the volume's
//! report files read. Files on a volume others can write to (the shared
//! volume of file mode) are used never through a symlink, only when
//! regular, and never read past a limit. A report file linked to
//! `/etc/shadow`, `/dev/zero` or a FIFO, a 2 GB file, or a steering file
//! linked to any other file is refused with an error saying which.

use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use nix::fcntl::OFlag;
use tokio::io::AsyncWriteExt;

/// Open flags: fail on a symlink (`ELOOP`), and never block on a FIFO or a
/// device.
fn flags() -> i32 {
    (OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC).bits()
}

fn refuse(path: &Path, why: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("{}: {why}", path.display()),
    )
}

/// Opens `path` as it is on disk: a symlink (at its last component) or
/// anything but a regular file is an error naming it. For files XO keeps
/// and reads on a request (the console's prompt log), as for the volume's.
pub fn open_regular(path: &Path, opts: &mut std::fs::OpenOptions) -> io::Result<std::fs::File> {
    let f = opts.custom_flags(flags()).open(path).map_err(|e| {
        if e.raw_os_error() == Some(nix::libc::ELOOP) {
            refuse(path, "is a symlink; not followed")
        } else {
            e
        }
    })?;
    if !f.metadata()?.file_type().is_file() {
        return Err(refuse(path, "is not a regular file"));
    }
    Ok(f)
}

/// Reads a regular file, not through a symlink, of at most `limit` bytes
/// (a longer one is an error; no more than `limit + 1` bytes are read).
pub async fn read_bounded(path: &Path, limit: usize) -> io::Result<Vec<u8>> {
    let path = path.to_owned();
    tokio::task::spawn_blocking(move || {
        let f = open_regular(&path, std::fs::OpenOptions::new().read(true))?;
        let mut buf = Vec::new();
        f.take(limit as u64 + 1).read_to_end(&mut buf)?;
        if buf.len() > limit {
            return Err(refuse(&path, &format!("longer than {limit} bytes")));
        }
        Ok(buf)
    })
    .await
    .map_err(io::Error::other)?
}

/// Appends `value` as one JSON line, creating the folder and the file (mode
/// 0600) as needed, never through a symlink and only to a regular file.
/// One write a line, so concurrent writers append whole lines.
pub async fn append<T: serde::Serialize>(path: &Path, value: &T) -> io::Result<()> {
    if let Some(d) = path.parent() {
        tokio::fs::create_dir_all(d).await?;
    }
    let mut line = serde_json::to_vec(value).map_err(io::Error::other)?;
    line.push(b'\n');
    let p = path.to_owned();
    let f = tokio::task::spawn_blocking(move || {
        open_regular(
            &p,
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .mode(0o600),
        )
    })
    .await
    .map_err(io::Error::other)??;
    let mut f = tokio::fs::File::from_std(f);
    f.write_all(&line).await?;
    f.flush().await
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn appends_whole_lines_in_a_new_folder() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("a/b/log.jsonl");
        super::append(&p, &serde_json::json!({"n": 1}))
            .await
            .unwrap();
        super::append(&p, &serde_json::json!({"n": 2}))
            .await
            .unwrap();
        assert_eq!(
            std::fs::read_to_string(&p).unwrap(),
            "{\"n\":1}\n{\"n\":2}\n"
        );
    }
}

#[cfg(test)]
mod guarded {
    use std::os::unix::fs::symlink;

    #[tokio::test]
    async fn symlinks_devices_fifos_and_long_files_are_refused_by_name() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        let secret = d.join("secret");
        std::fs::write(&secret, "root:x:0:0").unwrap();
        symlink(&secret, d.join("link_latest.json")).unwrap();
        let e = super::read_bounded(&d.join("link_latest.json"), 100)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("symlink"), "{e}");
        symlink("/dev/zero", d.join("zero_latest.json")).unwrap();
        assert!(
            super::read_bounded(&d.join("zero_latest.json"), 100)
                .await
                .is_err()
        );
        // A device opened directly is no regular file either.
        let e = super::read_bounded(std::path::Path::new("/dev/zero"), 100)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        let fifo = d.join("fifo_latest.json");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let e = super::read_bounded(&fifo, 100).await.unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        std::fs::write(d.join("big"), vec![b'x'; 101]).unwrap();
        let e = super::read_bounded(&d.join("big"), 100).await.unwrap_err();
        assert!(e.to_string().contains("longer than 100 bytes"), "{e}");
        std::fs::write(d.join("ok"), vec![b'x'; 100]).unwrap();
        assert_eq!(
            super::read_bounded(&d.join("ok"), 100).await.unwrap().len(),
            100
        );

        // A steering file linked to another file: refused, the other untouched.
        std::fs::create_dir_all(d.join("steering")).unwrap();
        symlink(&secret, d.join("steering/u1.jsonl")).unwrap();
        let e = super::append(&d.join("steering/u1.jsonl"), &serde_json::json!({"n": 1}))
            .await
            .unwrap_err();
        assert!(e.to_string().contains("symlink"), "{e}");
        assert_eq!(std::fs::read_to_string(&secret).unwrap(), "root:x:0:0");
    }
}
