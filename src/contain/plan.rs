//! One run's containment: prepared in the parent from the run's paths and the host's tier,
//! carried out in the child between fork and exec.

use std::ffi::CString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use super::host::{Host, Mode};
use super::landlock::LandlockPlan;
use super::namespaces::{isolate_network_best_effort, NsPlan};
use super::process::supervise;
use super::reads::{cstr, interpreter_prefixes, real, RunPaths};
use super::uid::RunAs;
use crate::error::{Error, Result};

/// Makes `cmd` a contained run in the host's tier. Call after every other setting of `cmd`
/// (it adds the last `pre_exec` step). A run that drops to an unprivileged uid gets its
/// sandbox handed over first.
pub(crate) fn apply(host: &Host, cmd: &mut Command, paths: &RunPaths) -> Result<()> {
    // The plan decides the run's uid first; its sandbox is then that uid's.
    let mut plan = Plan::new(host, paths)?;
    hand_over(host, paths.sandbox)?;
    // SAFETY: the closure runs in the child between fork and exec. It only makes system calls
    // on memory prepared before the fork (no allocation, no locks), which is what a child of
    // a multithreaded process may do; each tier's child part says how it keeps to that.
    unsafe {
        cmd.pre_exec(move || plan.run_in_child());
    }
    Ok(())
}

/// Gives the sandbox `dir` to the uid runs drop to, if they drop to one: after fixgate made or
/// restored files in it (a forked run's events file, a warm interpreter's restored tree).
pub(crate) fn hand_over(host: &Host, dir: &Path) -> Result<()> {
    let Some((uid, gid)) = host.owner() else {
        return Ok(());
    };
    super::uid::hand_over(dir, uid, gid).map_err(|e| {
        Error::Infra(format!(
            "failed to give the sandbox {} to uid {uid}: {e}",
            dir.display()
        ))
    })
}

/// The path a failed test's message says was refused by Landlock where the namespaces tier
/// would have let it be read (see `landlock::refused_read`); `None` in any other tier.
pub(crate) fn refused_read(host: &Host, paths: &RunPaths, message: &str) -> Option<PathBuf> {
    (host.mode() == Mode::Landlock)
        .then(|| super::landlock::refused_read(host, paths, message))
        .flatten()
}

/// Each tier's part of the child.
enum Tier {
    Namespaces(Box<NsPlan>),
    Landlock {
        ruleset: LandlockPlan,
        run_as: Option<RunAs>,
        filter: Arc<seccompiler::BpfProgram>,
    },
    None,
}

/// Everything the child does, prepared in the parent.
struct Plan {
    tier: Tier,
    net: bool,
    parent: libc::pid_t,
    cwd: CString,
    /// `setrlimit` calls for pytest and everything it starts.
    rlimits: Vec<(libc::__rlimit_resource_t, libc::rlim_t)>,
}

impl Plan {
    fn new(host: &Host, paths: &RunPaths) -> Result<Plan> {
        let tier = match host.mode() {
            Mode::Namespaces => Tier::Namespaces(Box::new(NsPlan::new(host, paths))),
            Mode::Landlock => {
                let ruleset = LandlockPlan::new(host, paths).map_err(Error::Infra)?;
                let mut reads: Vec<PathBuf> = [paths.plugin_dir, paths.rewrite_cache]
                    .into_iter()
                    .filter_map(real)
                    .collect();
                reads.extend(interpreter_prefixes(host.env(), paths.interpreter));
                reads.extend(paths.interpreter.iter().filter_map(|p| host.env().which(p)));
                Tier::Landlock {
                    ruleset,
                    run_as: host.run_as(&reads),
                    filter: host
                        .filter()
                        .cloned()
                        .ok_or_else(|| Error::Infra("the Landlock tier has no filter".into()))?,
                }
            }
            Mode::None => Tier::None,
        };
        Ok(Plan {
            tier,
            net: !paths.allow_network,
            parent: std::process::id() as libc::pid_t,
            cwd: cstr(paths.cwd),
            rlimits: paths.limits.rlimits(),
        })
    }

    /// The child's part: supervisor, then (in a new PID namespace) the reaper, then pytest,
    /// which returns `Ok` to exec.
    fn run_in_child(&mut self) -> std::io::Result<()> {
        // SAFETY: system calls only, on memory owned by `self`.
        unsafe {
            // Die with the fixgate thread that started the run, even when it is SIGKILLed; a
            // parent already gone before the call means the run must not start.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
            if libc::getppid() != self.parent {
                libc::_exit(137);
            }
            let namespaces = matches!(self.tier, Tier::Namespaces(_));
            if let Tier::Namespaces(ns) = &mut self.tier {
                ns.enter(self.net)?;
            } else {
                if self.net {
                    isolate_network_best_effort();
                }
                // Orphans of the run (double forks, setsid daemons) become our children, so
                // that the sweep after pytest's exit finds them.
                libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong);
            }
            let mut status_pipe = [-1 as libc::c_int; 2];
            if libc::pipe2(status_pipe.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            let supervisor = libc::getpid();
            let child = libc::fork();
            if child < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if child > 0 {
                libc::close(status_pipe[1]);
                supervise(child, status_pipe[0], namespaces);
            }
            libc::close(status_pipe[0]);
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
            if !namespaces {
                self.set_rlimits()?;
                if let Tier::Landlock {
                    ruleset,
                    run_as,
                    filter,
                } = &mut self.tier
                {
                    match run_as {
                        Some(r) => {
                            r.become_it()?;
                            // A change of uid clears the parent-death signal: set it again,
                            // and start nothing if the supervisor is already gone.
                            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
                            if libc::getppid() != supervisor {
                                libc::_exit(137);
                            }
                        }
                        None => super::uid::drop_capabilities()?,
                    }
                    ruleset.enforce()?;
                    // Last: the filter refuses nothing exec or the forkserver's own steps
                    // after it need. Its errors hold a plain errno; nothing is freed.
                    if let Err(e) = seccompiler::apply_filter(filter) {
                        let errno = std::io::Error::last_os_error();
                        std::mem::forget(e);
                        return Err(errno);
                    }
                }
                return Ok(());
            }
            // PID 1 of the run.
            let pytest = libc::fork();
            if pytest < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if pytest > 0 {
                super::process::reap(pytest, status_pipe[1]);
            }
            libc::close(status_pipe[1]);
            self.set_rlimits()?;
            if let Tier::Namespaces(ns) = &mut self.tier {
                ns.finish(&self.cwd)?;
            }
            Ok(())
        }
    }

    /// The run's rlimits, for pytest and everything it starts.
    unsafe fn set_rlimits(&self) -> std::io::Result<()> {
        for &(resource, value) in &self.rlimits {
            let limit = libc::rlimit {
                rlim_cur: value,
                rlim_max: value,
            };
            super::sys::check(libc::setrlimit(resource, &limit))?;
        }
        Ok(())
    }
}
