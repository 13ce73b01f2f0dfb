//! The processes between fixgate and pytest: the supervisor fixgate waits for, which ends as
//! pytest did, and (in a PID namespace) the reaper that is PID 1 of the run; or, without one,
//! the supervisor as a child subreaper that sweeps every descendant left when pytest exits.
//! All of it runs between fork and exec: system calls only, nothing allocated.

use super::sys::write_decimal;

/// Closes every descriptor from 3 up except `keep`: the supervisor and the reaper must not
/// hold the pipe through which the standard library learns that exec happened.
pub(super) unsafe fn close_all_but(keep: libc::c_int) {
    let close_range = |lo: libc::c_uint, hi: libc::c_uint| {
        if lo <= hi {
            libc::syscall(libc::SYS_close_range, lo, hi, 0 as libc::c_uint);
        }
    };
    let keep = keep.max(3) as libc::c_uint;
    close_range(3, keep - 1);
    close_range(keep + 1, libc::c_uint::MAX);
}

/// The supervisor: waits for its child, sweeps what is left (without namespaces), and ends the
/// way pytest ended, so that fixgate sees pytest's exit code or signal.
pub(super) unsafe fn supervise(
    child: libc::pid_t,
    status_pipe: libc::c_int,
    namespaces: bool,
) -> ! {
    close_all_but(status_pipe);
    let mut status = 0;
    loop {
        let r = libc::waitpid(child, &mut status, 0);
        if r == child {
            break;
        }
        if r < 0 && *libc::__errno_location() != libc::EINTR {
            libc::_exit(125);
        }
    }
    if namespaces {
        // The reaper passes on pytest's status; without it (the reaper was killed) the
        // reaper's own status stands.
        let mut buf = [0u8; 4];
        if libc::read(status_pipe, buf.as_mut_ptr().cast(), 4) == 4 {
            status = i32::from_ne_bytes(buf);
        }
    } else {
        sweep_descendants();
    }
    exit_like(status)
}

/// PID 1 of the run: reaps every process that ends in the namespace, and when pytest ends,
/// passes its status on and exits, which kills whatever is left.
pub(super) unsafe fn reap(pytest: libc::pid_t, status_pipe: libc::c_int) -> ! {
    close_all_but(status_pipe);
    scrub_cmdline();
    let mut status = 0;
    loop {
        let r = libc::waitpid(-1, &mut status, 0);
        if r == pytest {
            let bytes = status.to_ne_bytes();
            libc::write(status_pipe, bytes.as_ptr().cast(), 4);
            libc::_exit(0);
        }
        if r < 0 && *libc::__errno_location() != libc::EINTR {
            libc::_exit(125);
        }
    }
}

/// Blanks this process's command line. The reaper is a fork of fixgate, and tests can read
/// `/proc/1/cmdline`, which would name the user's repository and cache. (Its environment is
/// out of their reach: reading it needs the capabilities the reaper keeps and they do not.)
unsafe fn scrub_cmdline() {
    let fd = libc::open(
        c"/proc/self/stat".as_ptr(),
        libc::O_RDONLY | libc::O_CLOEXEC,
    );
    if fd < 0 {
        return;
    }
    let mut buf = [0u8; 2048];
    let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
    libc::close(fd);
    let Some(text) = buf.get(..n.max(0) as usize) else {
        return;
    };
    // Fields after the command name (which may hold spaces and parentheses) start with the
    // state, field 3; arg_start and arg_end are fields 48 and 49.
    let Some(close) = text.iter().rposition(|&b| b == b')') else {
        return;
    };
    let mut field = 2;
    let mut values = [0u64; 2];
    let mut cur: u64 = 0;
    let mut in_num = false;
    for &b in text.iter().skip(close + 1) {
        if b == b' ' || b == b'\n' {
            if in_num && (48..=49).contains(&field) {
                values[field - 48] = cur;
            }
            if in_num || b == b' ' {
                field += 1;
            }
            cur = 0;
            in_num = false;
            if field > 49 {
                break;
            }
        } else if b.is_ascii_digit() {
            cur = cur.saturating_mul(10).saturating_add(u64::from(b - b'0'));
            in_num = true;
        } else {
            in_num = false;
        }
    }
    let [start, end] = values;
    if start > 0 && end > start && end - start < (1 << 20) {
        std::ptr::write_bytes(start as *mut u8, 0, (end - start) as usize);
    }
}

/// Kills the subreaper's remaining descendants until none is left.
unsafe fn sweep_descendants() {
    let mut path = [0u8; 64];
    let pid = libc::getpid();
    let head = b"/proc/self/task/";
    path[..head.len()].copy_from_slice(head);
    let at = write_decimal(&mut path, head.len(), pid.unsigned_abs());
    let tail = b"/children";
    path[at..at + tail.len()].copy_from_slice(tail);
    // Bounded: a fork bomb outrunning the sweep must not keep the supervisor forever.
    for _ in 0..1000 {
        let mut any = false;
        let fd = libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd >= 0 {
            let mut buf = [0u8; 4096];
            let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
            libc::close(fd);
            let mut cur: libc::pid_t = 0;
            let mut in_num = false;
            for &b in buf.iter().take(n.max(0) as usize) {
                if b.is_ascii_digit() {
                    cur = cur
                        .saturating_mul(10)
                        .saturating_add((b - b'0') as libc::pid_t);
                    in_num = true;
                } else if in_num {
                    libc::kill(cur, libc::SIGKILL);
                    any = true;
                    cur = 0;
                    in_num = false;
                }
            }
            if in_num {
                libc::kill(cur, libc::SIGKILL);
                any = true;
            }
        }
        let mut st = 0;
        let mut reaped = false;
        while libc::waitpid(-1, &mut st, libc::WNOHANG) > 0 {
            reaped = true;
        }
        if !any && !reaped {
            return;
        }
        let pause = libc::timespec {
            tv_sec: 0,
            tv_nsec: 1_000_000,
        };
        libc::nanosleep(&pause, std::ptr::null_mut());
    }
}

/// Ends this process with `status`: the same exit code, or death by the same signal (with no
/// core dump of the supervisor, a copy of fixgate).
pub(super) unsafe fn exit_like(status: libc::c_int) -> ! {
    if libc::WIFSIGNALED(status) {
        let sig = libc::WTERMSIG(status);
        let no_core = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        libc::setrlimit(libc::RLIMIT_CORE, &no_core);
        libc::signal(sig, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::kill(libc::getpid(), sig);
        libc::_exit(128 + sig);
    }
    libc::_exit(libc::WEXITSTATUS(status))
}
