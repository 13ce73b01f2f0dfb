//! Files made and read one directory at a time: a [`Dir`] is an open directory, every name is
//! one normal component ([`check_component`]), and nothing opened, created or listed follows a
//! symbolic link, so a name from an untrusted tree (a CAS `Directory`, a run's output) can never
//! reach a path outside it. The remote worker materializes action inputs and reads outputs
//! through it (src/remote_exec/action_dir.rs).

use std::ffi::{CStr, CString, OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;

use super::{check_component, NameError};

/// `name` as one normal component (see [`check_component`]), ready for the calls below.
pub(crate) fn component(name: &[u8]) -> Result<&OsStr, NameError> {
    check_component(name)?;
    Ok(OsStr::from_bytes(name))
}

/// What a name in a directory is, as `fstatat` without following links says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    File {
        executable: bool,
    },
    Dir,
    Link,
    /// A socket, a device, a FIFO: nothing fixgate reads or makes.
    Other,
}

/// An open directory; everything below it is reached through its descriptor.
pub(crate) struct Dir {
    fd: OwnedFd,
}

fn cname(name: &OsStr) -> io::Result<CString> {
    check_component(name.as_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
    CString::new(name.as_bytes()).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
}

fn check(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

impl Dir {
    /// Opens `path` (a path fixgate chose, not a name from a tree) as the directory below which
    /// everything happens.
    pub(crate) fn open(path: &Path) -> io::Result<Dir> {
        let c = CString::new(path.as_os_str().as_bytes())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        // SAFETY: a valid C string; the descriptor is owned from here on.
        let fd = check(unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_DIRECTORY | libc::O_RDONLY | libc::O_CLOEXEC,
            )
        })?;
        // SAFETY: `fd` was just opened and is owned by nothing else.
        Ok(Dir {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// A second descriptor of the same directory.
    pub(crate) fn try_clone(&self) -> io::Result<Dir> {
        Ok(Dir {
            fd: self.fd.try_clone()?,
        })
    }

    fn openat(&self, name: &CStr, flags: libc::c_int, mode: libc::mode_t) -> io::Result<OwnedFd> {
        // SAFETY: a valid descriptor and C string; the result is owned from here on.
        let fd = check(unsafe {
            libc::openat(
                self.fd.as_raw_fd(),
                name.as_ptr(),
                flags | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                mode as libc::c_uint,
            )
        })?;
        // SAFETY: as in `open`.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// Creates the directory `name` (it must not exist) and opens it.
    pub(crate) fn create_dir(&self, name: &OsStr) -> io::Result<Dir> {
        let c = cname(name)?;
        // SAFETY: a valid descriptor and C string.
        check(unsafe { libc::mkdirat(self.fd.as_raw_fd(), c.as_ptr(), 0o755) })?;
        self.open_dir(name)
    }

    /// Opens the directory `name`; a link there is refused.
    pub(crate) fn open_dir(&self, name: &OsStr) -> io::Result<Dir> {
        let c = cname(name)?;
        let fd = self.openat(&c, libc::O_DIRECTORY | libc::O_RDONLY, 0)?;
        Ok(Dir { fd })
    }

    /// Creates the file `name` (it must not exist) holding `bytes`.
    pub(crate) fn write_file(
        &self,
        name: &OsStr,
        bytes: &[u8],
        executable: bool,
    ) -> io::Result<()> {
        let c = cname(name)?;
        let mode = if executable { 0o755 } else { 0o644 };
        let fd = self.openat(&c, libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY, mode)?;
        let mut file = File::from(fd);
        io::Write::write_all(&mut file, bytes)
    }

    /// Creates the symbolic link `name` pointing at `target` (never followed here).
    pub(crate) fn symlink(&self, name: &OsStr, target: &[u8]) -> io::Result<()> {
        let c = cname(name)?;
        let t = CString::new(target).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        // SAFETY: valid C strings and descriptor.
        check(unsafe { libc::symlinkat(t.as_ptr(), self.fd.as_raw_fd(), c.as_ptr()) })?;
        Ok(())
    }

    /// Opens the regular file `name` for reading; a link, a FIFO or a device there is refused
    /// (a run could leave one where fixgate expects its output).
    pub(crate) fn open_file(&self, name: &OsStr) -> io::Result<File> {
        let c = cname(name)?;
        // O_NONBLOCK: opening a FIFO must not wait for a writer; the type is checked next.
        let file = File::from(self.openat(&c, libc::O_RDONLY | libc::O_NONBLOCK, 0)?);
        if !file.metadata()?.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a regular file", name.to_string_lossy()),
            ));
        }
        Ok(file)
    }

    /// The target of the link `name`.
    pub(crate) fn read_link(&self, name: &OsStr) -> io::Result<Vec<u8>> {
        let c = cname(name)?;
        let mut buf = vec![0u8; 4096];
        // SAFETY: the buffer is as long as the length passed.
        let n = unsafe {
            libc::readlinkat(
                self.fd.as_raw_fd(),
                c.as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        buf.truncate(n as usize);
        Ok(buf)
    }

    /// What `name` is, without following a link; `None` when nothing is there.
    pub(crate) fn kind(&self, name: &OsStr) -> io::Result<Option<Kind>> {
        let Some(st) = self.stat(name)? else {
            return Ok(None);
        };
        Ok(Some(match st.st_mode & libc::S_IFMT {
            libc::S_IFREG => Kind::File {
                executable: st.st_mode & 0o111 != 0,
            },
            libc::S_IFDIR => Kind::Dir,
            libc::S_IFLNK => Kind::Link,
            _ => Kind::Other,
        }))
    }

    /// `fstatat` of `name` without following a link; `None` when nothing is there.
    fn stat(&self, name: &OsStr) -> io::Result<Option<libc::stat>> {
        let c = cname(name)?;
        // SAFETY: an out-parameter of the right size, a valid descriptor and C string.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        let r = unsafe {
            libc::fstatat(
                self.fd.as_raw_fd(),
                c.as_ptr(),
                &mut st,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::NotFound => Ok(None),
                _ => Err(e),
            };
        }
        Ok(Some(st))
    }

    /// Gives `name` (or, with `None`, this directory itself) to `uid` and `gid`; a link is
    /// changed itself, never what it leads to.
    pub(crate) fn chown(&self, name: Option<&OsStr>, uid: u32, gid: u32) -> io::Result<()> {
        let c = match name {
            Some(n) => cname(n)?,
            None => CString::default(),
        };
        let flags = match name {
            Some(_) => libc::AT_SYMLINK_NOFOLLOW,
            None => libc::AT_EMPTY_PATH,
        };
        // SAFETY: a valid descriptor and C string.
        check(unsafe { libc::fchownat(self.fd.as_raw_fd(), c.as_ptr(), uid, gid, flags) })?;
        Ok(())
    }

    /// The owner of `name`, without following a link; `None` when nothing is there.
    pub(crate) fn owner(&self, name: &OsStr) -> io::Result<Option<(u32, u32)>> {
        Ok(self.stat(name)?.map(|st| (st.st_uid, st.st_gid)))
    }

    /// The names in this directory (without `.` and `..`), sorted by their bytes.
    pub(crate) fn names(&self) -> io::Result<Vec<OsString>> {
        // SAFETY: `dup` of an owned descriptor; `fdopendir` owns the copy, `closedir` closes it.
        let copy = check(unsafe { libc::fcntl(self.fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 0) })?;
        let dir = unsafe { libc::fdopendir(copy) };
        if dir.is_null() {
            let e = io::Error::last_os_error();
            unsafe { libc::close(copy) };
            return Err(e);
        }
        // The copy shares the offset with the original: start from the beginning.
        unsafe { libc::rewinddir(dir) };
        let mut out = Vec::new();
        loop {
            // SAFETY: `dir` is a valid stream until closed below.
            let entry = unsafe { libc::readdir(dir) };
            if entry.is_null() {
                break;
            }
            // SAFETY: readdir returns a NUL-terminated name in a valid entry.
            let name = unsafe { CStr::from_ptr((*entry).d_name.as_ptr()) }.to_bytes();
            if name != b"." && name != b".." {
                out.push(OsString::from_vec(name.to_vec()));
            }
        }
        unsafe { libc::closedir(dir) };
        out.sort();
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_follows_a_link_planted_in_the_tree() {
        let outside = tempfile::tempdir().unwrap();
        let root = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), b"s").unwrap();
        std::os::unix::fs::symlink(outside.path(), root.path().join("dir")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), root.path().join("file"))
            .unwrap();
        let dir = Dir::open(root.path()).unwrap();
        // Through a link: neither into the directory, nor reading nor writing the file.
        assert!(dir.open_dir(OsStr::new("dir")).is_err());
        assert!(dir.open_file(OsStr::new("file")).is_err());
        assert!(dir.write_file(OsStr::new("file"), b"x", false).is_err());
        assert!(dir.create_dir(OsStr::new("dir")).is_err());
        assert_eq!(std::fs::read(outside.path().join("secret")).unwrap(), b"s");
        assert_eq!(dir.kind(OsStr::new("dir")).unwrap(), Some(Kind::Link));
        assert_eq!(dir.read_link(OsStr::new("file")).unwrap(), {
            outside
                .path()
                .join("secret")
                .as_os_str()
                .as_bytes()
                .to_vec()
        });
        // Names that are paths are refused before any system call.
        let sub = dir.create_dir(OsStr::new("inner")).unwrap();
        assert!(sub.write_file(OsStr::new("../x"), b"x", false).is_err());
        assert!(!root.path().join("x").exists());
        drop(sub);
        let sub = dir.create_dir(OsStr::new("sub")).unwrap();
        sub.write_file(OsStr::new("f"), b"hi", true).unwrap();
        assert_eq!(
            sub.kind(OsStr::new("f")).unwrap(),
            Some(Kind::File { executable: true })
        );
        assert_eq!(dir.names().unwrap(), ["dir", "file", "inner", "sub"]);
        let mut text = String::new();
        io::Read::read_to_string(&mut sub.open_file(OsStr::new("f")).unwrap(), &mut text).unwrap();
        assert_eq!(text, "hi");
    }
}
