//! Credentials of a run: no capabilities, and when fixgate is root without namespaces (most
//! containers) an unprivileged uid and gid, so that the cache, the checkout and fixgate's own
//! files are not the run's to write even where a Landlock rule is missing.
//!
//! The uid is 65534 (`nobody`, group 65534): every base image lists it in `/etc/passwd` (so
//! `getpass`, `pwd` and a `git commit` in a test behave as they do elsewhere), and by
//! convention it owns no file, so it is never the owner of the cache or the checkout. The
//! run's sandbox is handed over to it before the run starts ([`hand_over`]); fixgate, root,
//! keeps every other file.
//!
//! Where something the run must read is out of that uid's reach (an interpreter under
//! `/root`, mode 0700, as pyenv installs it), the run keeps one capability,
//! `CAP_DAC_READ_SEARCH` (read any file, list any folder), as an ambient capability that its
//! processes inherit: Landlock still decides what it reads, and it still writes nothing that
//! is not its own. The report says which held.

use std::ffi::OsStr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::sys::check;
use crate::beneath::dir::{Dir, Kind};

/// The uid and gid runs drop to when fixgate is root.
pub(super) const NOBODY: u32 = 65534;

/// `CAP_DAC_READ_SEARCH`, from `linux/capability.h`.
const CAP_DAC_READ_SEARCH: u32 = 2;

/// Who a run's processes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RunAs {
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    /// Keeps `CAP_DAC_READ_SEARCH` (something it must read is out of its reach).
    pub(crate) read_search: bool,
}

impl RunAs {
    /// `nobody`, keeping `CAP_DAC_READ_SEARCH` when one of `reads` is out of its reach.
    pub(super) fn nobody(reads: &[PathBuf]) -> RunAs {
        RunAs {
            uid: NOBODY,
            gid: NOBODY,
            read_search: reads.iter().any(|p| !reachable(p, NOBODY, NOBODY)),
        }
    }

    /// Becomes this uid and gid with no supplementary groups and no capability but the one it
    /// may keep, for good. Runs in the child between fork and exec: system calls only.
    ///
    /// # Safety
    /// Call only in a child of fork that is single-threaded and about to exec.
    pub(super) unsafe fn become_it(&self) -> std::io::Result<()> {
        let keep = self.read_search.then_some(CAP_DAC_READ_SEARCH);
        // The bounding set first, while this process may still change it (CAP_SETPCAP).
        for cap in 0..64 {
            if Some(cap) != keep {
                libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong);
            }
        }
        // The permitted set survives the change of uid only with this flag.
        check(libc::prctl(libc::PR_SET_KEEPCAPS, 1 as libc::c_ulong))?;
        check(libc::setgroups(0, std::ptr::null()))?;
        check(libc::setresgid(self.gid, self.gid, self.gid))?;
        check(libc::setresuid(self.uid, self.uid, self.uid))?;
        check(libc::prctl(libc::PR_SET_KEEPCAPS, 0 as libc::c_ulong))?;
        set_capabilities(keep)
    }
}

/// Clears every capability, for good: the bounding set (so that exec as root gains none back),
/// the ambient and inheritable sets, then the effective and permitted ones; and no new
/// privileges through setuid binaries.
///
/// # Safety
/// Call only in a child of fork that is single-threaded and about to exec.
pub(super) unsafe fn drop_capabilities() -> std::io::Result<()> {
    for cap in 0..64 {
        libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong);
    }
    set_capabilities(None)
}

/// The effective, permitted and inheritable sets hold `keep` alone (or nothing), and so does
/// the ambient set, which is what an exec'd interpreter (no file capabilities) inherits; then
/// no new privileges.
unsafe fn set_capabilities(keep: Option<u32>) -> std::io::Result<()> {
    libc::prctl(
        libc::PR_CAP_AMBIENT,
        libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
        0 as libc::c_ulong,
        0 as libc::c_ulong,
        0 as libc::c_ulong,
    );
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let mut header = Header {
        version: 0x2008_0522, // _LINUX_CAPABILITY_VERSION_3
        pid: 0,
    };
    let bit = keep.map_or(0, |c| 1u32 << c);
    let data = [
        Data {
            effective: bit,
            permitted: bit,
            inheritable: bit,
        },
        Data {
            effective: 0,
            permitted: 0,
            inheritable: 0,
        },
    ];
    if libc::syscall(libc::SYS_capset, &mut header as *mut Header, data.as_ptr()) != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if let Some(cap) = keep {
        check(libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_RAISE as libc::c_ulong,
            cap as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        ))?;
    }
    check(libc::prctl(
        libc::PR_SET_NO_NEW_PRIVS,
        1 as libc::c_ulong,
        0 as libc::c_ulong,
        0 as libc::c_ulong,
        0 as libc::c_ulong,
    ))
}

/// Whether this process has `CAP_DAC_READ_SEARCH` to hand on: in its permitted and bounding
/// sets (`/proc/self/status`), which a container's engine may have cut down.
pub(super) fn read_search_available() -> bool {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return false;
    };
    let has = |field: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .is_some_and(|mask| mask & (1 << CAP_DAC_READ_SEARCH) != 0)
    };
    has("CapPrm:") && has("CapBnd:")
}

/// Whether `uid` (in group `gid`, no other group) can reach `path`: search every folder on the
/// way, and read it (list it, for a folder).
fn reachable(path: &Path, uid: u32, gid: u32) -> bool {
    permitted(path, uid, gid, None)
}

/// Whether `uid` (in group `gid`, no other group) can write `path` (connect to it, for a
/// socket), searching every folder on the way.
pub(super) fn writable_by(path: &Path, uid: u32, gid: u32) -> bool {
    permitted(path, uid, gid, Some(0o2))
}

/// Whether `uid` and `gid` may search every folder on the way to `path` and do `leaf` to it
/// (by default: read it, and search it too for a folder), by its mode bits.
fn permitted(path: &Path, uid: u32, gid: u32, leaf: Option<u32>) -> bool {
    let allowed = |meta: &std::fs::Metadata, want: u32| {
        let mode = meta.mode();
        let bits = if meta.uid() == uid {
            mode >> 6
        } else if meta.gid() == gid {
            mode >> 3
        } else {
            mode
        };
        bits & want == want
    };
    let mut at = PathBuf::new();
    for c in path.components() {
        at.push(c);
        let Ok(meta) = std::fs::metadata(&at) else {
            return false;
        };
        let last = at.as_path() == path;
        let want = match (last, meta.is_dir(), leaf) {
            (false, _, _) => 0o1,
            (true, _, Some(want)) => want,
            (true, true, None) => 0o5,
            (true, false, None) => 0o4,
        };
        if !allowed(&meta, want) {
            return false;
        }
    }
    true
}

/// How deep [`hand_over`] follows folders: deeper ones are left to fixgate (a run that made
/// them made them as its own uid already).
const MAX_DEPTH: u32 = 256;

/// Gives everything under `dir` (the run's sandbox, which fixgate just made or restored) to
/// `uid` and `gid`, so that a run that dropped to them can write it. Nothing is followed: a
/// link is given over itself, a folder a run replaced by a link is not entered.
pub(super) fn hand_over(dir: &Path, uid: u32, gid: u32) -> std::io::Result<()> {
    let root = Dir::open(dir)?;
    if std::fs::symlink_metadata(dir)?.uid() != uid {
        root.chown(None, uid, gid)?;
    }
    hand_over_below(&root, uid, gid, 0)
}

fn hand_over_below(dir: &Dir, uid: u32, gid: u32, depth: u32) -> std::io::Result<()> {
    if depth > MAX_DEPTH {
        return Ok(());
    }
    for name in dir.names()? {
        let name: &OsStr = &name;
        if dir.owner(name)?.is_some_and(|(u, g)| (u, g) != (uid, gid)) {
            dir.chown(Some(name), uid, gid)?;
        }
        if dir.kind(name)? == Some(Kind::Dir) {
            // A folder replaced by a link since it was listed is refused here, not followed.
            if let Ok(sub) = dir.open_dir(name) {
                hand_over_below(&sub, uid, gid, depth + 1)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_path_is_reachable_only_through_folders_the_uid_may_search() {
        let root = tempfile::tempdir().unwrap();
        let open = root.path().join("open");
        let closed = root.path().join("closed");
        for d in [&open, &closed] {
            std::fs::create_dir(d).unwrap();
            std::fs::write(d.join("f"), "x").unwrap();
            std::fs::set_permissions(d.join("f"), std::fs::Permissions::from_mode(0o644)).unwrap();
        }
        std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o700)).unwrap();
        let me = std::fs::metadata(root.path()).unwrap();
        // Someone else: through `other` bits only.
        let (uid, gid) = (me.uid() + 1, me.gid() + 1);
        assert!(reachable(&open.join("f"), uid, gid));
        assert!(reachable(&open, uid, gid));
        assert!(!reachable(&closed.join("f"), uid, gid));
        assert!(!reachable(&closed, uid, gid));
        assert!(!reachable(&open.join("missing"), uid, gid));
        // The owner: through the owner's bits.
        assert!(reachable(&closed.join("f"), me.uid(), me.gid()));
    }

    #[test]
    fn hand_over_changes_owners_below_and_follows_no_link() {
        assert_eq!(
            unsafe { libc::geteuid() },
            0,
            "changing owners needs root: run the tests as root, as CI does"
        );
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("host"), "x").unwrap();
        let sandbox = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(sandbox.path().join("tree/pkg")).unwrap();
        std::fs::write(sandbox.path().join("tree/pkg/a.py"), "x").unwrap();
        std::os::unix::fs::symlink(outside.path(), sandbox.path().join("tree/link")).unwrap();
        hand_over(sandbox.path(), NOBODY, NOBODY).unwrap();
        for p in ["", "tree", "tree/pkg", "tree/pkg/a.py", "tree/link"] {
            let meta = std::fs::symlink_metadata(sandbox.path().join(p)).unwrap();
            assert_eq!((meta.uid(), meta.gid()), (NOBODY, NOBODY), "{p}");
        }
        let host = std::fs::metadata(outside.path().join("host")).unwrap();
        assert_eq!(host.uid(), 0, "a file behind a link was given over");
        assert_eq!(std::fs::metadata(outside.path()).unwrap().uid(), 0);
    }
}
