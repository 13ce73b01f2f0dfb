//! The zygote's replies: lines read from a pipe without blocking longer than asked (the driver
//! looks at its clocks between polls), and the pipes themselves.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

pub(crate) fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two descriptors into a two-element array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: descriptors the kernel just returned, owned by nothing else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// The zygote's replies: lines read from a pipe without blocking longer than asked.
pub(crate) struct Replies {
    fd: OwnedFd,
    buf: Vec<u8>,
    eof: bool,
}

impl Replies {
    pub(crate) fn new(fd: OwnedFd) -> Replies {
        Replies {
            fd,
            buf: Vec::new(),
            eof: false,
        }
    }

    /// Waits up to `ms` for the pipe to be readable.
    pub(crate) fn wait(&self, ms: i32) -> bool {
        if self.eof || self.buf.contains(&b'\n') {
            return true;
        }
        let mut p = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd for the duration of the call.
        unsafe { libc::poll(&mut p, 1, ms) > 0 }
    }

    /// The next complete line, waiting up to `ms`; `Ok(None)` when none came, `Err` at the end
    /// of the stream (the zygote is gone).
    pub(crate) fn line(&mut self, ms: i32) -> Result<Option<String>, ()> {
        loop {
            if let Some(i) = self.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=i).collect();
                return Ok(Some(
                    String::from_utf8_lossy(&line[..i]).trim_end().to_owned(),
                ));
            }
            if self.eof {
                return Err(());
            }
            if !self.wait(ms) {
                return Ok(None);
            }
            let mut chunk = [0u8; 4096];
            // SAFETY: reads into a buffer of the given length.
            let n =
                unsafe { libc::read(self.fd.as_raw_fd(), chunk.as_mut_ptr().cast(), chunk.len()) };
            match n {
                0 => self.eof = true,
                n if n > 0 => self.buf.extend_from_slice(&chunk[..n as usize]),
                _ => {
                    let e = std::io::Error::last_os_error();
                    if e.kind() != std::io::ErrorKind::Interrupted {
                        self.eof = true;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn replies_come_line_by_line_and_the_end_is_an_error() {
        let (read, write) = pipe().unwrap();
        let mut replies = Replies::new(read);
        assert_eq!(replies.line(0), Ok(None));
        let mut w = std::fs::File::from(write);
        w.write_all(b"ready\nforked 12\nexit 1").unwrap();
        assert_eq!(replies.line(10), Ok(Some("ready".to_owned())));
        assert_eq!(replies.line(10), Ok(Some("forked 12".to_owned())));
        assert_eq!(replies.line(0), Ok(None), "a partial line waits");
        drop(w);
        assert_eq!(replies.line(10), Err(()));
    }
}
