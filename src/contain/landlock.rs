//! The Landlock tier, for where namespaces are refused (Docker's and Kubernetes' default seccomp
//! profiles, Ubuntu 24.04's AppArmor rule for unprivileged users): no privilege and no namespace
//! needed. A run's process tree may
//!
//! - write only its sandbox (tree, `HOME`, `TMPDIR`) and, for `multiprocessing`'s semaphores
//!   and shared memory, create files in `/dev/shm` by name (not list it);
//! - read only what it needs: the interpreter's prefixes and library folders, the system's
//!   library folders and the few files of `/etc` programs read, `/proc`, the plugin and the
//!   rewritten test modules, the folders `read-paths` names, and its sandbox;
//! - bind or connect no TCP port (ABI 4) and no UDP port (ABI 10), unless `--allow-network`;
//!   connect to no Unix socket outside its sandbox (ABI 9), reach no abstract Unix socket and
//!   signal no process outside its own tree (ABI 6).
//!
//! Nothing else: not the user's repository, the home, the cache or another sandbox, even
//! where one of them lies inside a folder that is read (its siblings are granted instead).
//! The ruleset is built in the parent ([`LandlockPlan::new`]: every path opened there) and only
//! enforced in the child ([`LandlockPlan::enforce`]), between fork and exec, where
//! `RulesetCreated::restrict_self` makes two system calls and allocates nothing on success.

use std::path::{Path, PathBuf};

use landlock::{
    make_bitflags, Access, AccessFs, AccessNet, BitFlags, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreated, RulesetCreatedAttr, Scope, ABI,
};

use super::host::{Host, Support, SHM};
use super::reads::{interpreter_prefixes, libraries, outermost, private, real, RunPaths};

/// The newest ABI fixgate asks for; the crate gives what the kernel has of it.
const TARGET: ABI = ABI::V10;

/// System folders a run reads: programs, libraries, data (time zones, locales, certificates).
const SYSTEM_DIRS: [&str; 7] = [
    "/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin",
];

/// What programs read of `/etc` (the dynamic loader's cache, users and groups, name
/// resolution, time zone, certificates, MIME types, the distribution's Python settings); the
/// rest of it (and `/etc/shadow` above all) is not read.
const ETC: [&str; 24] = [
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/timezone",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/hosts",
    "/etc/host.conf",
    "/etc/gai.conf",
    "/etc/resolv.conf",
    "/etc/services",
    "/etc/protocols",
    "/etc/mime.types",
    "/etc/os-release",
    "/etc/ssl",
    "/etc/pki",
    "/etc/ca-certificates",
    "/etc/ca-certificates.conf",
    "/etc/locale.alias",
    "/etc/locale.conf",
    "/etc/fonts",
    "/etc/alternatives",
];

/// Readable system information: CPU counts and the cgroup's quota (`os.cpu_count`, joblib).
const SYS_INFO: [&str; 2] = ["/sys/devices/system/cpu", "/sys/fs/cgroup"];

/// Devices a run may read and write, and those it may only read.
const DEV_RW: [&str; 3] = ["/dev/null", "/dev/zero", "/dev/full"];
const DEV_RO: [&str; 2] = ["/dev/urandom", "/dev/random"];

/// Landlock's ABI here, found by enforcing a ruleset on a thread of its own (the thread ends
/// with it; nothing else of fixgate is restricted).
pub(super) fn probe() -> Result<Support, String> {
    let status = std::thread::spawn(|| {
        Ruleset::default()
            .handle_access(AccessFs::from_all(ABI::V1))
            .and_then(|r| r.create())
            .and_then(RulesetCreated::restrict_self)
            .map(|s| (s.ruleset, s.landlock))
            .map_err(|e| e.to_string())
    })
    .join()
    .map_err(|_| "the Landlock probe panicked".to_owned())??;
    match status {
        (landlock::RulesetStatus::NotEnforced, landlock) => Err(match landlock {
            landlock::LandlockStatus::NotEnabled => {
                "the kernel has Landlock but it is not enabled (add landlock to the lsm= boot \
                 parameter or CONFIG_LSM)"
                    .to_owned()
            }
            _ => "the kernel has no Landlock (Linux 5.13 or later with CONFIG_SECURITY_LANDLOCK)"
                .to_owned(),
        }),
        (
            _,
            landlock::LandlockStatus::Available {
                effective_abi,
                kernel_abi,
            },
        ) => Ok(Support {
            abi: kernel_abi.map_or(effective_abi as u32, |k| k.max(0) as u32),
        }),
        (_, other) => Err(format!("Landlock answered {other:?}")),
    }
}

/// A run's ruleset, created in the parent, enforced in the child.
pub(super) struct LandlockPlan {
    ruleset: Option<RulesetCreated>,
}

impl LandlockPlan {
    /// The ruleset of one run. `home`: the user's home, never granted.
    pub(super) fn new(host: &Host, paths: &RunPaths) -> Result<LandlockPlan, String> {
        let all = AccessFs::from_all(TARGET);
        let fail = |e: landlock::RulesetError| format!("the Landlock ruleset does not build: {e}");
        let mut ruleset = Ruleset::default().handle_access(all).map_err(fail)?;
        if !paths.allow_network {
            ruleset = ruleset
                .handle_access(AccessNet::from_all(TARGET))
                .map_err(fail)?
                .scope(Scope::from_all(TARGET))
                .map_err(fail)?;
        } else {
            // Signals stay within the run; abstract sockets are the network's, as in the
            // host's network namespace.
            ruleset = ruleset.scope(Scope::Signal).map_err(fail)?;
        }
        let mut created = ruleset.create().map_err(fail)?;
        let hidden = hidden(paths, host.home());
        for (path, access) in granted(host, paths, &hidden) {
            created = add(created, &path, access).map_err(fail)?;
        }
        Ok(LandlockPlan {
            ruleset: Some(created),
        })
    }

    /// Restricts this process, and so everything it execs and starts, for good.
    ///
    /// # Safety
    /// Call only in a child of fork about to exec. On success `restrict_self` makes two
    /// system calls (`prctl` for no_new_privs, `landlock_restrict_self`) and drops plain data
    /// and a descriptor; an error is reported by its errno alone, its value forgotten, so that
    /// nothing is freed in a child whose allocator another thread may have held at the fork.
    pub(super) unsafe fn enforce(&mut self) -> std::io::Result<()> {
        let Some(ruleset) = self.ruleset.take() else {
            return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
        };
        match ruleset.restrict_self() {
            Ok(status) if status.ruleset != landlock::RulesetStatus::NotEnforced => Ok(()),
            Ok(_) => Err(std::io::Error::from_raw_os_error(libc::ENOSYS)),
            Err(e) => {
                let errno = std::io::Error::last_os_error();
                std::mem::forget(e);
                Err(errno)
            }
        }
    }
}

fn add(
    ruleset: RulesetCreated,
    path: &Path,
    access: BitFlags<AccessFs>,
) -> Result<RulesetCreated, landlock::RulesetError> {
    // A path that vanished since it was listed grants nothing.
    let Ok(fd) = PathFd::new(path) else {
        return Ok(ruleset);
    };
    let access = if path.is_dir() {
        access
    } else {
        access & AccessFs::from_file(TARGET)
    };
    ruleset.add_rule(PathBeneath::new(fd, access))
}

/// What no grant may reach into: the user's repository, the home, the cache and the
/// sandboxes' folder (every other run's).
fn hidden(paths: &RunPaths, home: Option<&Path>) -> Vec<PathBuf> {
    let mut out = private(paths);
    out.extend(home.and_then(real).filter(|h| h.parent().is_some()));
    out
}

/// Every path the run is granted, and how.
fn granted(
    host: &Host,
    paths: &RunPaths,
    hidden: &[PathBuf],
) -> Vec<(PathBuf, BitFlags<AccessFs>)> {
    let read = AccessFs::from_read(TARGET);
    let mut readable: Vec<PathBuf> = [paths.plugin_dir, paths.rewrite_cache]
        .into_iter()
        .filter_map(real)
        .collect();
    readable.extend(interpreter_prefixes(host.env(), paths.interpreter));
    let private = private(paths);
    readable.extend(libraries(paths.libraries, hidden, &private));
    readable.extend(libraries(paths.read_paths, hidden, &private));
    readable.extend(
        SYSTEM_DIRS
            .iter()
            .chain(&ETC)
            .filter_map(|p| real(Path::new(p))),
    );
    let mut out: Vec<(PathBuf, BitFlags<AccessFs>)> = Vec::new();
    for r in outermost(readable) {
        for p in carve(&r, hidden) {
            out.push((p, read));
        }
    }
    let info = make_bitflags!(AccessFs::{ReadFile | ReadDir});
    out.extend(
        ["/proc"]
            .iter()
            .chain(&SYS_INFO)
            .filter_map(|p| real(Path::new(p)))
            .map(|p| (p, info)),
    );
    let device_rw = make_bitflags!(AccessFs::{ReadFile | WriteFile | Truncate | IoctlDev});
    out.extend(DEV_RW.iter().map(|p| (PathBuf::from(p), device_rw)));
    out.extend(
        DEV_RO
            .iter()
            .map(|p| (PathBuf::from(p), make_bitflags!(AccessFs::{ReadFile}))),
    );
    let sandbox = real(paths.sandbox);
    if let Some(shm) = real(Path::new(SHM)) {
        // Only where no sandbox lives below it: the grant covers everything beneath.
        if !sandbox.iter().chain(hidden).any(|p| p.starts_with(&shm)) {
            let named =
                make_bitflags!(AccessFs::{ReadFile | WriteFile | MakeReg | RemoveFile | Truncate});
            out.push((shm, named));
        }
    }
    out.extend(sandbox.map(|s| (s, AccessFs::from_all(TARGET))));
    out
}

/// `root` as grants that reach none of `hidden`: itself when it holds none of them, else each
/// of its entries but those on the way to one (those carved in turn). A hidden folder inside
/// a granted folder that is itself inside a hidden one (an interpreter under the home) is
/// carved out of it all the same; the granted folder is what was asked for.
fn carve(root: &Path, hidden: &[PathBuf]) -> Vec<PathBuf> {
    if hidden.iter().any(|h| h == root) {
        return Vec::new();
    }
    let inside: Vec<&PathBuf> = hidden.iter().filter(|h| h.starts_with(root)).collect();
    if inside.is_empty() {
        return vec![root.to_path_buf()];
    }
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in entries.flatten() {
        let p = e.path();
        if inside.iter().any(|h| h.starts_with(&p)) {
            out.extend(carve(&p, hidden));
        } else {
            out.push(p);
        }
    }
    out.sort();
    out
}

/// The path a test's failure says it was refused (`[Errno 13] Permission denied: '/x'`,
/// `cannot open /x: Permission denied`), when Landlock refused it and the namespaces tier
/// would not have: it exists, it lies outside everything the run may read, and outside what
/// every tier hides (the repository, the home, the cache, the sandboxes, `/tmp`, `/run`).
pub(super) fn refused_read(host: &Host, paths: &RunPaths, message: &str) -> Option<PathBuf> {
    let hidden = hidden(paths, host.home());
    let granted = granted(host, paths, &hidden);
    for path in denied_paths(message) {
        let Some(p) = real(&path) else { continue };
        let everywhere_hidden = hidden
            .iter()
            .chain(&[PathBuf::from("/tmp"), PathBuf::from("/run")])
            .any(|h| p.starts_with(h));
        let readable = granted.iter().any(|(g, _)| p.starts_with(g));
        if !everywhere_hidden && !readable {
            return Some(path);
        }
    }
    None
}

/// The absolute paths a failure message says permission was denied on.
fn denied_paths(message: &str) -> Vec<PathBuf> {
    crate::pytest::outside::error_paths(message, "Permission denied", |_| true)
        .into_iter()
        .map(PathBuf::from)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_granted_folder_that_holds_a_hidden_one_is_granted_around_it() {
        let root = tempfile::tempdir().unwrap();
        let at = |s: &str| {
            let p = root.path().join(s);
            std::fs::create_dir_all(&p).unwrap();
            real(&p).unwrap()
        };
        let (usr, src, app, lib) = (at("usr"), at("usr/src"), at("usr/src/app"), at("usr/lib"));
        let other = at("usr/src/other");
        let share = at("usr/share");
        let hidden = vec![app.clone()];
        assert_eq!(
            carve(&usr, &hidden),
            vec![lib.clone(), share, src.join("other")]
        );
        assert_eq!(other, src.join("other"));
        assert_eq!(carve(&lib, &hidden), vec![lib]);
        assert_eq!(carve(&app, &hidden), Vec::<PathBuf>::new());
    }

    #[test]
    fn permission_errors_name_their_paths() {
        assert_eq!(
            denied_paths("PermissionError: [Errno 13] Permission denied: '/data/x.csv'"),
            vec![PathBuf::from("/data/x.csv")]
        );
        assert_eq!(
            denied_paths("sh: 1: cannot open /data/x: Permission denied"),
            vec![PathBuf::from("/data/x")]
        );
        assert!(denied_paths("AssertionError: assert 1 == 2").is_empty());
    }
}
