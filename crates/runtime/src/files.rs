//! Files replaced whole: [`xo_bus::files`] (where the bus's own store finds it too),
//! and [`replace`] for async code (the write and its flushes on a blocking
//! thread, off the runtime's workers).

pub use xo_bus::files::{Mode, sync_dir};

/// [`xo_bus::files::replace`] on a blocking thread.
pub async fn replace(
    path: impl Into<std::path::PathBuf>,
    bytes: impl Into<Vec<u8>>,
    mode: Mode,
) -> std::io::Result<()> {
    let (path, bytes) = (path.into(), bytes.into());
    tokio::task::spawn_blocking(move || xo_bus::files::replace(&path, &bytes, mode))
        .await
        .map_err(std::io::Error::other)?
}
