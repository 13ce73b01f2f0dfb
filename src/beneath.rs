//! Names that came from a git tree or from a run, turned into files below one directory and
//! nowhere else: every name is one normal path component, and every step is taken relative to
//! an open directory without following a symbolic link.
//!
//! A tree object is data anyone can write (`git hash-object --literally`, a raw `git fetch`), so
//! an entry may be named `../../../../tmp/x`, `.git`, `.` or a name the file system cannot hold;
//! and a link materialized a moment earlier may point anywhere. [`check_component`] is the rule
//! for names; [`Root`] does the file work with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`
//! where the kernel has it (Linux 5.6), else one `O_NOFOLLOW` step per component.
//!
//! The whole surface: [`check_component`] and [`check_path`] (a name, a `/`-separated relative
//! path), and [`Root`], opened on a directory the caller trusts, whose methods take such a path
//! and refuse any other: `create_dirs`, `create_file`, `write_new`, `symlink`, `remove_file`,
//! `replace_file`. Snapshots check their tree's names (src/snapshot.rs), sandboxes and replay
//! overlays are made through a `Root` (src/sandbox.rs), and so are the writes into the user's
//! repository (src/cmd/atomic.rs). [`dir::Dir`] does the same one open directory at a time, for
//! the remote worker, which also reads back what a run made.

use std::ffi::CString;
use std::fmt;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};

pub(crate) mod dir;

/// The longest name a Linux file system holds (`NAME_MAX`).
const NAME_MAX: usize = 255;

/// Why a name is not one normal path component.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NameError {
    Empty,
    Dot,
    DotDot,
    Slash,
    Nul,
    /// `.git` in any case: git's own folder, which git refuses to check out at any depth.
    DotGit,
    TooLong(usize),
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NameError::Empty => f.write_str("an empty name"),
            NameError::Dot => f.write_str("`.`"),
            NameError::DotDot => f.write_str("`..`"),
            NameError::Slash => f.write_str("a name holding `/`"),
            NameError::Nul => f.write_str("a name holding a NUL byte"),
            NameError::DotGit => f.write_str("`.git`"),
            NameError::TooLong(n) => write!(f, "a name of {n} bytes (at most {NAME_MAX})"),
        }
    }
}

/// Whether `name` may become one file or folder name: not empty, `.`, `..` or `.git` (in any
/// case), without `/` or NUL, at most [`NAME_MAX`] bytes.
pub(crate) fn check_component(name: &[u8]) -> Result<(), NameError> {
    match name {
        [] => Err(NameError::Empty),
        b"." => Err(NameError::Dot),
        b".." => Err(NameError::DotDot),
        _ if name.contains(&b'/') => Err(NameError::Slash),
        _ if name.contains(&0) => Err(NameError::Nul),
        _ if name.eq_ignore_ascii_case(b".git") => Err(NameError::DotGit),
        _ if name.len() > NAME_MAX => Err(NameError::TooLong(name.len())),
        _ => Ok(()),
    }
}

/// Checks every component of a `/`-separated relative path with [`check_component`]; the error
/// names the component.
pub(crate) fn check_path(path: &[u8]) -> Result<(), (Vec<u8>, NameError)> {
    for c in path.split(|&b| b == b'/') {
        check_component(c).map_err(|e| (c.to_vec(), e))?;
    }
    Ok(())
}

/// A directory that files are made in by relative, checked paths.
pub(crate) struct Root {
    fd: OwnedFd,
    path: PathBuf,
}

/// Whether `openat2` works here: 0 unknown, 1 yes, 2 no (an older kernel, or a seccomp
/// profile that refuses it).
static OPENAT2: AtomicU8 = AtomicU8::new(0);

fn cstring(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn fd_or_error(fd: libc::c_int) -> io::Result<OwnedFd> {
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel just returned, owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn check(r: libc::c_int) -> io::Result<()> {
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `rel` split into its parent (possibly empty) and its last component.
fn split(rel: &[u8]) -> (&[u8], &[u8]) {
    match rel.iter().rposition(|&b| b == b'/') {
        Some(i) => (&rel[..i], &rel[i + 1..]),
        None => (&[], rel),
    }
}

impl Root {
    /// Opens `dir`, which the caller trusts (a sandbox fixgate made, the user's repository).
    pub(crate) fn open(dir: &Path) -> io::Result<Root> {
        let c = cstring(dir.as_os_str().as_bytes())?;
        // SAFETY: a valid C string; the result is checked.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        Ok(Root {
            fd: fd_or_error(fd)?,
            path: dir.to_path_buf(),
        })
    }

    /// Where `rel` is, for messages.
    pub(crate) fn display(&self, rel: &[u8]) -> PathBuf {
        self.path.join(std::ffi::OsStr::from_bytes(rel))
    }

    /// The directory `rel` (empty: the root itself), reached without leaving the root and
    /// without following a link.
    fn dir(&self, rel: &[u8]) -> io::Result<OwnedFd> {
        check_path_io(rel)?;
        if rel.is_empty() {
            return self.fd.try_clone();
        }
        if OPENAT2.load(Ordering::Relaxed) != 2 {
            match self.openat2(rel) {
                Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSYS | libc::EPERM)) => {
                    OPENAT2.store(2, Ordering::Relaxed);
                }
                other => {
                    OPENAT2.store(1, Ordering::Relaxed);
                    return other;
                }
            }
        }
        let mut fd = self.fd.try_clone()?;
        for c in rel.split(|&b| b == b'/') {
            let name = cstring(c)?;
            // SAFETY: a valid descriptor and C string; the result is checked.
            let next = unsafe {
                libc::openat(
                    fd.as_raw_fd(),
                    name.as_ptr(),
                    libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                )
            };
            fd = fd_or_error(next)?;
        }
        Ok(fd)
    }

    fn openat2(&self, rel: &[u8]) -> io::Result<OwnedFd> {
        let path = cstring(rel)?;
        // SAFETY: `open_how` is plain data; zeroed is a valid value.
        let mut how: libc::open_how = unsafe { std::mem::zeroed() };
        how.flags = (libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) as u64;
        how.resolve = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS;
        // SAFETY: a valid descriptor, C string and `open_how` of the size passed.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                self.fd.as_raw_fd(),
                path.as_ptr(),
                &how as *const libc::open_how,
                std::mem::size_of::<libc::open_how>(),
            )
        };
        fd_or_error(fd as libc::c_int)
    }

    /// Makes the directory `rel` and every missing one above it (`mkdir -p`, beneath).
    pub(crate) fn create_dirs(&self, rel: &[u8]) -> io::Result<()> {
        check_path_io(rel)?;
        for (i, _) in rel.iter().enumerate().filter(|(_, &b)| b == b'/') {
            self.mkdir(&rel[..i])?;
        }
        if !rel.is_empty() {
            self.mkdir(rel)?;
        }
        Ok(())
    }

    fn mkdir(&self, rel: &[u8]) -> io::Result<()> {
        let (parent, name) = split(rel);
        let dir = self.dir(parent)?;
        let name = cstring(name)?;
        // SAFETY: a valid descriptor and C string.
        let r = unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), 0o777) };
        if r != 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EEXIST) {
                return Err(e);
            }
            // Something is there: it must be a directory, and not a link to one.
            self.dir(rel)?;
        }
        Ok(())
    }

    /// Creates the file `rel` (its folder must exist), failing if anything is there already.
    pub(crate) fn create_file(&self, rel: &[u8], mode: u32) -> io::Result<File> {
        check_path_io(rel)?;
        let (parent, name) = split(rel);
        let dir = self.dir(parent)?;
        let name = cstring(name)?;
        // SAFETY: a valid descriptor and C string; the result is checked.
        let fd = unsafe {
            libc::openat(
                dir.as_raw_fd(),
                name.as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                mode as libc::c_uint,
            )
        };
        Ok(File::from(fd_or_error(fd)?))
    }

    /// Writes `bytes` as the new file `rel` with exactly `mode`.
    pub(crate) fn write_new(&self, rel: &[u8], bytes: &[u8], mode: u32) -> io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let mut f = self.create_file(rel, 0o600)?;
        io::Write::write_all(&mut f, bytes)?;
        f.set_permissions(std::fs::Permissions::from_mode(mode))
    }

    /// Creates the symbolic link `rel` holding `target` (never followed here).
    pub(crate) fn symlink(&self, rel: &[u8], target: &[u8]) -> io::Result<()> {
        check_path_io(rel)?;
        let (parent, name) = split(rel);
        let dir = self.dir(parent)?;
        let (name, target) = (cstring(name)?, cstring(target)?);
        // SAFETY: a valid descriptor and C strings.
        check(unsafe { libc::symlinkat(target.as_ptr(), dir.as_raw_fd(), name.as_ptr()) })
    }

    /// Removes the file or link `rel`; a path that does not exist is not an error.
    pub(crate) fn remove_file(&self, rel: &[u8]) -> io::Result<()> {
        check_path_io(rel)?;
        let (parent, name) = split(rel);
        let dir = match self.dir(parent) {
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(()),
            other => other?,
        };
        let name = cstring(name)?;
        // SAFETY: a valid descriptor and C string.
        match check(unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), 0) }) {
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
            other => other,
        }
    }

    /// Replaces the file `rel` with `bytes` through a temporary file renamed over it, keeping
    /// its mode (a new file gets 0644), making its folders as needed: the user's files edited
    /// in place (`init --apply`, `lock`).
    pub(crate) fn replace_file(&self, rel: &[u8], bytes: &[u8]) -> io::Result<()> {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        check_path_io(rel)?;
        let (parent, name) = split(rel);
        self.create_dirs(parent)?;
        let dir = self.dir(parent)?;
        let name = cstring(name)?;
        // The mode of what is there now, not following a link.
        // SAFETY: `stat` is plain data; the call fills it or fails.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        let mode = if unsafe {
            libc::fstatat(
                dir.as_raw_fd(),
                name.as_ptr(),
                &mut st,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        } == 0
            && (st.st_mode & libc::S_IFMT) == libc::S_IFREG
        {
            st.st_mode & 0o7777
        } else {
            0o644
        };
        let tmp_name = format!(
            ".{}.fixgate-{}.tmp",
            String::from_utf8_lossy(split(rel).1),
            std::process::id()
        );
        let tmp = cstring(tmp_name.as_bytes())?;
        let tmp_rel = if parent.is_empty() {
            tmp_name.into_bytes()
        } else {
            [parent, b"/", tmp_name.as_bytes()].concat()
        };
        let _ = self.remove_file(&tmp_rel);
        let mut f = self.create_file(&tmp_rel, 0o600)?;
        let written = io::Write::write_all(&mut f, bytes)
            .and_then(|()| f.set_permissions(std::fs::Permissions::from_mode(mode)))
            .and_then(|()| f.metadata().map(|m| m.mode()));
        drop(f);
        // SAFETY: valid descriptors and C strings.
        let renamed = written.and_then(|_| {
            check(unsafe {
                libc::renameat(
                    dir.as_raw_fd(),
                    tmp.as_ptr(),
                    dir.as_raw_fd(),
                    name.as_ptr(),
                )
            })
        });
        if renamed.is_err() {
            let _ = self.remove_file(&tmp_rel);
        }
        renamed
    }
}

fn check_path_io(rel: &[u8]) -> io::Result<()> {
    if rel.is_empty() {
        return Ok(());
    }
    check_path(rel).map_err(|(c, e)| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{:?} is {e}, not one normal path component",
                String::from_utf8_lossy(&c)
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_single_normal_components_pass() {
        for ok in [
            &b"a"[..],
            b"test_a.py",
            b"...",
            b".gitignore",
            b"git",
            b"a\\..",
            b"\xff",
        ] {
            assert_eq!(
                check_component(ok),
                Ok(()),
                "{:?}",
                String::from_utf8_lossy(ok)
            );
        }
        assert_eq!(check_component(b""), Err(NameError::Empty));
        assert_eq!(check_component(b"."), Err(NameError::Dot));
        assert_eq!(check_component(b".."), Err(NameError::DotDot));
        assert_eq!(check_component(b"../x"), Err(NameError::Slash));
        assert_eq!(check_component(b"/etc"), Err(NameError::Slash));
        assert_eq!(check_component(b"a\0b"), Err(NameError::Nul));
        assert_eq!(check_component(b".git"), Err(NameError::DotGit));
        assert_eq!(check_component(b".GiT"), Err(NameError::DotGit));
        assert_eq!(check_component(&[b'x'; 255]), Ok(()));
        assert_eq!(check_component(&[b'x'; 256]), Err(NameError::TooLong(256)));
        assert_eq!(check_path(b"a/b/c"), Ok(()));
        assert_eq!(
            check_path(b"a/.git/c"),
            Err((b".git".to_vec(), NameError::DotGit))
        );
        assert_eq!(check_path(b"a//c"), Err((Vec::new(), NameError::Empty)));
    }

    fn both_resolvers(test: impl Fn()) {
        test();
        let before = OPENAT2.swap(2, Ordering::Relaxed);
        test();
        OPENAT2.store(before, Ordering::Relaxed);
    }

    #[test]
    fn files_are_made_below_the_root_and_links_are_never_followed() {
        both_resolvers(|| {
            let tmp = tempfile::tempdir().unwrap();
            let outside = tempfile::tempdir().unwrap();
            let root = Root::open(tmp.path()).unwrap();
            root.create_dirs(b"a/b").unwrap();
            root.write_new(b"a/b/f.txt", b"bytes", 0o755).unwrap();
            assert_eq!(
                std::fs::read(tmp.path().join("a/b/f.txt")).unwrap(),
                b"bytes"
            );
            // A link to a folder outside, then paths through it: refused, nothing written.
            root.symlink(b"a/out", outside.path().as_os_str().as_bytes())
                .unwrap();
            assert!(root.write_new(b"a/out/victim", b"x", 0o644).is_err());
            assert!(root.create_dirs(b"a/out/deeper").is_err());
            assert!(root.replace_file(b"a/out/victim", b"x").is_err());
            // A link in the last place is not written through either.
            root.symlink(b"a/last", outside.path().join("v").as_os_str().as_bytes())
                .unwrap();
            assert!(root.write_new(b"a/last", b"x", 0o644).is_err());
            assert!(std::fs::read_dir(outside.path()).unwrap().next().is_none());
            // Names that are not normal components never reach the file system.
            for bad in [&b"../x"[..], b"a/../../x", b"/etc/x", b"a/.git/x", b"./x"] {
                assert!(root.write_new(bad, b"x", 0o644).is_err());
                assert!(root.create_dirs(bad).is_err());
            }
            root.replace_file(b"a/b/f.txt", b"new").unwrap();
            assert_eq!(std::fs::read(tmp.path().join("a/b/f.txt")).unwrap(), b"new");
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(tmp.path().join("a/b/f.txt"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o755, "the mode is kept");
            root.remove_file(b"a/b/f.txt").unwrap();
            root.remove_file(b"a/b/f.txt").unwrap();
            assert!(!tmp.path().join("a/b/f.txt").exists());
        });
    }
}
