//! System-call helpers for the child side of a run: everything here may run between fork and
//! exec, so it allocates nothing and takes no lock.

/// A system call's return of 0 as `Ok`, anything else as the error it set.
pub(super) fn check(r: libc::c_int) -> std::io::Result<()> {
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Writes `bytes` to the existing file at `path` in one call (a `/proc` switch).
pub(super) unsafe fn write_file(path: &std::ffi::CStr, bytes: &[u8]) -> std::io::Result<()> {
    let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let n = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
    let err = std::io::Error::last_os_error();
    libc::close(fd);
    if n != bytes.len() as isize {
        return Err(err);
    }
    Ok(())
}

/// `/proc/self/fd/<fd>` into `buf`, NUL-terminated, without allocating.
pub(super) fn fd_path(buf: &mut [u8; 32], fd: libc::c_int) {
    let prefix = b"/proc/self/fd/";
    buf[..prefix.len()].copy_from_slice(prefix);
    let end = write_decimal(buf, prefix.len(), fd.unsigned_abs());
    buf[end] = 0;
}

/// Writes `n` in decimal into `buf` at `at`, without allocating (it runs between fork and
/// exec); returns where the digits end.
pub(super) fn write_decimal(buf: &mut [u8], at: usize, mut n: u32) -> usize {
    let mut digits = [0u8; 10];
    let mut len = 0;
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for i in 0..len {
        buf[at + i] = digits[len - 1 - i];
    }
    at + len
}

/// Whether the running kernel's version is at least `major.minor` (from `uname`).
pub(super) fn kernel_at_least(major: u32, minor: u32) -> bool {
    // SAFETY: `utsname` is plain data; the call fills it or fails.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    if unsafe { libc::uname(&mut u) } != 0 {
        return false;
    }
    // SAFETY: the kernel NUL-terminates `release`.
    let release = unsafe { std::ffi::CStr::from_ptr(u.release.as_ptr()) };
    version_at_least(&release.to_string_lossy(), major, minor)
}

fn version_at_least(release: &str, major: u32, minor: u32) -> bool {
    let mut parts = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let found = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    found >= (major, minor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fd_paths_are_written_without_allocating() {
        let mut buf = [0u8; 32];
        fd_path(&mut buf, 7);
        assert_eq!(&buf[..16], b"/proc/self/fd/7\0");
        fd_path(&mut buf, 1234567890);
        assert_eq!(&buf[..25], b"/proc/self/fd/1234567890\0");
    }

    #[test]
    fn kernel_versions_compare_by_major_then_minor() {
        assert!(version_at_least("6.18.44-fc-v657", 6, 14));
        assert!(version_at_least("6.14.0", 6, 14));
        assert!(!version_at_least("6.13.9-generic", 6, 14));
        assert!(!version_at_least("5.15.0-105-generic", 6, 14));
        assert!(version_at_least("7.0-rc1", 6, 14));
        assert!(!version_at_least("", 6, 14));
    }
}
