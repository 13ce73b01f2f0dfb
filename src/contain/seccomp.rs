//! The system-call filter of runs contained by Landlock: what Landlock does not govern and no
//! test needs. Landlock decides which files and ports a run reaches; these calls reach other
//! processes or the kernel's shared state without a path:
//!
//! - `ptrace`, `process_vm_readv`, `process_vm_writev`, `kcmp`: another process's memory and
//!   descriptors (fixgate's, another run's, when they share a uid);
//! - `keyctl`, `add_key`, `request_key`: the kernel's keyrings, which a run shares with every
//!   process of its user (credentials kept there by a login or a CI agent);
//! - `open_by_handle_at`: opening a file by its handle, without a path.
//!
//! Each fails with `EPERM`, as a call the platform refuses does, so a suite that probes for
//! them carries on. The filter is compiled once per fixgate process and applied in the child,
//! after Landlock, just before exec: `seccompiler::apply_filter` makes two system calls on the
//! compiled program and allocates nothing.

use std::collections::BTreeMap;

use seccompiler::{BpfProgram, SeccompAction, SeccompFilter};

/// The calls refused to a run.
const DENIED: [(i64, &str); 8] = [
    (libc::SYS_ptrace, "ptrace"),
    (libc::SYS_process_vm_readv, "process_vm_readv"),
    (libc::SYS_process_vm_writev, "process_vm_writev"),
    (libc::SYS_kcmp, "kcmp"),
    (libc::SYS_keyctl, "keyctl"),
    (libc::SYS_add_key, "add_key"),
    (libc::SYS_request_key, "request_key"),
    (libc::SYS_open_by_handle_at, "open_by_handle_at"),
];

/// The compiled filter for this machine's architecture, or why there is none.
pub(super) fn runs_filter() -> Result<BpfProgram, String> {
    let rules: BTreeMap<i64, Vec<seccompiler::SeccompRule>> =
        DENIED.iter().map(|&(nr, _)| (nr, Vec::new())).collect();
    let arch = std::env::consts::ARCH
        .try_into()
        .map_err(|e| format!("no seccomp filter for this architecture: {e}"))?;
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(|e| format!("the seccomp filter does not build: {e}"))?;
    filter
        .try_into()
        .map_err(|e| format!("the seccomp filter does not compile: {e}"))
}

/// The names of the refused calls, for the documentation and the report.
pub(crate) fn denied_names() -> Vec<&'static str> {
    DENIED.iter().map(|&(_, name)| name).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filter_refuses_ptrace_and_keyrings_in_a_thread_that_applies_it() {
        let program = runs_filter().unwrap();
        // A thread of its own: a filter applies to the calling thread and cannot be removed.
        let (ptrace, keyctl, getpid) = std::thread::spawn(move || {
            seccompiler::apply_filter(&program).unwrap();
            let errno = || std::io::Error::last_os_error().raw_os_error();
            // SAFETY: plain system calls with no pointers.
            let ptrace = unsafe { libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0) };
            let ptrace = (ptrace, errno());
            let keyctl = unsafe { libc::syscall(libc::SYS_keyctl, 0, 0, 0, 0, 0) };
            let keyctl = (keyctl, errno());
            let getpid = unsafe { libc::getpid() };
            (ptrace, keyctl, getpid)
        })
        .join()
        .unwrap();
        assert_eq!(ptrace, (-1, Some(libc::EPERM)));
        assert_eq!(keyctl, (-1, Some(libc::EPERM)));
        assert_eq!(getpid, std::process::id() as i32);
        assert!(denied_names().contains(&"process_vm_readv"));
    }
}
