//! The process's file-descriptor limit. Every connection, file and socket
//! takes one; a process out of them refuses operators and runners alike.
//! `xo` raises its soft limit to the hard one at start (as Go's runtime
//! does), and bounded listeners size themselves below it. And whether the
//! process's memory may be backed by transparent huge pages.

use nix::sys::resource::{Resource, getrlimit, setrlimit};

/// The soft limit on open file descriptors, if it can be read.
pub fn fd_limit() -> Option<u64> {
    getrlimit(Resource::RLIMIT_NOFILE)
        .ok()
        .map(|(soft, _)| soft)
}

/// Raises the soft limit to the hard one; returns (before, after). The
/// soft limit is often 1024 while the hard one is far higher: a fabric
/// with many runners and console clients needs more.
pub fn raise_fd_limit() -> Option<(u64, u64)> {
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    if soft >= hard {
        return Some((soft, soft));
    }
    match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
        Ok(()) => Some((soft, hard)),
        Err(_) => Some((soft, soft)),
    }
}

/// Lets the kernel back this process's memory with transparent huge pages
/// (`allow`), or not (`prctl(PR_SET_THP_DISABLE)`, which children
/// inherit): `state.huge_pages`. The error is the kernel's refusal.
pub fn huge_pages(allow: bool) -> std::io::Result<()> {
    nix::sys::prctl::set_thp_disable(!allow).map_err(std::io::Error::from)
}

/// The connections a listener may hold given `limit` descriptors: at most
/// half, so the rest of the process (bus, store, services) always has the
/// other half.
pub fn share_of(limit: Option<u64>, wanted: usize) -> usize {
    match limit {
        Some(l) => wanted.min((l / 2).max(1) as usize),
        None => wanted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listener_takes_at_most_half_the_descriptors() {
        assert_eq!(share_of(Some(1024), 256), 256);
        assert_eq!(share_of(Some(256), 256), 128);
        assert_eq!(share_of(Some(1), 256), 1);
        assert_eq!(share_of(None, 256), 256);
    }

    #[test]
    fn the_limit_is_read_and_raising_never_lowers_it() {
        let before = fd_limit().expect("RLIMIT_NOFILE readable");
        let (was, now) = raise_fd_limit().unwrap();
        assert_eq!(was, before);
        assert!(now >= was);
        assert_eq!(fd_limit(), Some(now));
    }
}
