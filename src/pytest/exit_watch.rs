//! Waiting on a running pytest without waking up every few milliseconds: the driver sleeps until
//! the process exits or the next check is due, whichever comes first.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::Child;
use std::time::Duration;

/// How often a running pytest is checked on (new events for the progress bar, the test timeout,
/// Ctrl-C) when its exit wakes the driver at once.
const CHECK_MS: u64 = 40;

/// How often it is checked on where the kernel has no pidfd (Linux before 5.3): its exit is
/// noticed only at a check, so they come often.
const FALLBACK_MS: u64 = 5;

/// A pidfd of one child process, which becomes readable when the process exits.
pub(crate) struct ExitWatch {
    pidfd: Option<OwnedFd>,
    /// The pidfd said the process had exited: a wait that did not reap it must not spin.
    signalled: bool,
}

impl ExitWatch {
    pub(crate) fn new(child: &Child) -> ExitWatch {
        let pid = child.id() as libc::pid_t;
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        let pidfd = (fd >= 0).then(|| {
            // SAFETY: a descriptor the kernel just returned, owned by nothing else.
            unsafe { OwnedFd::from_raw_fd(fd as i32) }
        });
        ExitWatch {
            pidfd,
            signalled: false,
        }
    }

    /// Sleeps until the process exits or the next check is due.
    pub(crate) fn pause(&mut self) {
        if let (Some(fd), false) = (&self.pidfd, self.signalled) {
            let mut p = libc::pollfd {
                fd: fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd for the duration of the call.
            let ready = unsafe { libc::poll(&mut p, 1, CHECK_MS as libc::c_int) };
            if ready >= 0 {
                self.signalled = ready > 0;
                return;
            }
        }
        std::thread::sleep(Duration::from_millis(FALLBACK_MS));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn the_pidfd_signals_the_exit_and_the_process_is_then_reaped() {
        let mut child = Command::new("true").spawn().unwrap();
        let mut watch = ExitWatch::new(&child);
        for _ in 0..1000 {
            watch.pause();
            if watch.signalled {
                break;
            }
        }
        if watch.pidfd.is_some() {
            assert!(watch.signalled, "the pidfd reports the exit");
        }
        // the process is a zombie now: reaped by the first wait
        assert!(child.try_wait().unwrap().unwrap().success());
        watch.pause(); // once signalled, a plain sleep: it returns
    }
}
