//! Which tier this machine permits: namespaces are tried in a child, then Landlock (its ABI,
//! its filter, and a run contained by it); what runs the probe is the plan of a real run.

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use super::host::{Choice, Host, Mode, DISABLE_ENV};
use super::namespaces::MASKED_SOCKETS;
use super::plan::apply;
use super::reads::{cstr, real, RunPaths};
use crate::environment::Environment;
use crate::limits::Limits;

impl Host {
    /// Finds what this machine permits: a run contained in namespaces is tried in a child, then
    /// Landlock. With [`Choice::None`] nothing is tried.
    pub(crate) fn probe(env: &Arc<Environment>, choice: Choice) -> Host {
        if choice == Choice::None {
            let mut host = Host::bare(env, choice, Mode::None);
            host.no_namespaces = Some("--containment none".to_owned());
            return host;
        }
        let no_namespaces = if env.no_namespaces {
            Some(format!("{DISABLE_ENV} is set"))
        } else {
            works(&Host::bare(env, choice, Mode::Namespaces)).err()
        };
        if no_namespaces.is_none() {
            return Host::bare(env, choice, Mode::Namespaces);
        }
        let mut host = Host::landlock(env, choice).unwrap_or_else(|why| {
            let mut none = Host::bare(env, choice, Mode::None);
            none.no_landlock = Some(why);
            none
        });
        host.no_namespaces = no_namespaces;
        host
    }

    /// The Landlock tier, probed: its ABI, its filter, and a run contained by it.
    fn landlock(env: &Arc<Environment>, choice: Choice) -> std::result::Result<Host, String> {
        let support = super::landlock::probe()?;
        let filter = super::seccomp::runs_filter()?;
        let mut host = Host::bare(env, choice, Mode::Landlock);
        host.landlock = Some(support);
        host.filter = Some(Arc::new(filter));
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            host.run_as = Some((super::uid::NOBODY, super::uid::NOBODY));
        }
        if !support.governs_unix_sockets() {
            host.reachable_sockets = reachable_sockets(host.run_as);
        }
        works(&host).map_err(|e| format!("a run contained by Landlock failed ({e})"))?;
        // The probe read nothing of a real run's: the first real run decides its uid.
        host.decided = std::sync::OnceLock::new();
        *host.kept_read_search.get_mut() = false;
        *host.stayed_root.get_mut() = false;
        Ok(host)
    }
}

/// Whether `host`'s tier works here: runs a program contained by it, in a throwaway sandbox.
fn works(host: &Host) -> std::result::Result<(), String> {
    let env = host.env();
    let dir = tempfile::Builder::new()
        .prefix("fixgate-probe-")
        .tempdir_in(&env.temp_dir)
        .map_err(|e| format!("failed to make a probe folder: {e}"))?;
    let sandbox = dir.path().join("sandbox");
    let cache = dir.path().join("cache");
    for d in [&sandbox, &cache] {
        std::fs::create_dir_all(d).map_err(|e| format!("failed to make a probe folder: {e}"))?;
    }
    // Any program will do; `true` where there is one, else fixgate itself.
    let program = env
        .which(Path::new("true"))
        .or_else(|| env.current_exe.clone())
        .unwrap_or_else(|| PathBuf::from("true"));
    let interpreter = [program.as_path()];
    let limits = Limits {
        memory: crate::limits::UNLIMITED,
        processes: crate::limits::UNLIMITED,
        disk: 1 << 20,
        configured: crate::limits::LimitArgs::default(),
    };
    let paths = RunPaths {
        sandbox: &sandbox,
        cwd: &sandbox,
        cache_dir: &cache,
        plugin_dir: &cache,
        rewrite_cache: &cache,
        origin_root: &cache,
        interpreter: &interpreter,
        libraries: &[],
        read_paths: &[],
        allow_network: false,
        limits: &limits,
    };
    let mut cmd = Command::new(&program);
    if program.file_name() != Some(std::ffi::OsStr::new("true")) {
        cmd.arg("--version");
    }
    cmd.current_dir(&sandbox)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    apply(host, &mut cmd, &paths).map_err(|e| e.to_string())?;
    match cmd.status() {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(format!("a contained probe process ended with {s}")),
        Err(e) => Err(format!("{} is not permitted: {e}", host.mode().as_str())),
    }
}

/// The daemon sockets on this machine a run could connect to: those the run's user may write
/// (`run_as`: the uid and gid runs drop to; else fixgate's own credentials, groups included).
fn reachable_sockets(run_as: Option<(u32, u32)>) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = MASKED_SOCKETS
        .iter()
        .filter_map(|p| real(Path::new(p)))
        .filter(|p| std::fs::metadata(p).is_ok_and(|m| m.file_type().is_socket()))
        .filter(|p| match run_as {
            Some((uid, gid)) => super::uid::writable_by(p, uid, gid),
            None => {
                let c = cstr(p);
                // SAFETY: a valid C string; the call only checks.
                unsafe {
                    libc::faccessat(libc::AT_FDCWD, c.as_ptr(), libc::W_OK, libc::AT_EACCESS) == 0
                }
            }
        })
        .collect();
    out.sort();
    out.dedup();
    out
}
