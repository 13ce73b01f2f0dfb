//! Containment of the patch's untrusted test code: each run in its own user, mount, PID and
//! network namespaces, in a read-only world where only its sandbox (and the cache paths a run
//! must write) can be written, the user's repository and home hidden, and no process of the run
//! outliving it, not even when fixgate is SIGKILLed.
//!
//! [`apply`] turns any `Command` into a contained one; everything it does in the child happens
//! between fork and exec, so it is raw system calls on data prepared beforehand (no
//! allocation, no locks). The process tree of one run:
//!
//! ```text
//! fixgate ── supervisor (pdeathsig) ── reaper (PID 1 of the run) ── pytest (PID 2) ── ...
//! ```
//!
//! The supervisor is the child fixgate waits for: it exits as pytest did (code or signal). The
//! reaper is PID 1 of the run's PID namespace: when pytest exits it exits, and the kernel kills
//! every other process of the namespace. Each dies when its parent does (`PR_SET_PDEATHSIG`), so
//! a SIGKILL of fixgate takes the whole run with it. Where namespaces are not permitted the
//! supervisor is a child subreaper instead: after pytest exits it kills every descendant left.
//!
//! A forking zygote (one warm interpreter per job slot, a fork per run) spawned through
//! `PreparedCommand::command` gets all of this once, for itself. Per-run containment then needs, in
//! the zygote, before each fork: `unshare(CLONE_NEWPID)` (the zygote has `CAP_SYS_ADMIN` in its
//! user namespace only if it keeps its capabilities, so it must be spawned without
//! `drop_capabilities` and drop them in each forked run instead); in the forked child (PID 1
//! of the new namespace): fork again and reap, as `reap` does, so that the run's end kills
//! the rest; mount a fresh `/proc`; bind the run's sandbox writable (or spawn the zygote with
//! the sandboxes' folder writable); `PR_SET_PDEATHSIG(SIGKILL)`; drop every capability and set
//! `PR_SET_NO_NEW_PRIVS` before any test code runs.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use serde::Serialize;

use crate::environment::Environment;
use crate::error::{Error, Result};
use crate::limits::{Limits, PID_MAX_MIN};

/// How runs are contained, as the reports say it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Mode {
    /// User, mount, PID and network namespaces: a read-only world, no survivors.
    Namespaces,
    /// The platform refused namespaces: the sandbox as before, plus the descendant sweep.
    None,
}

impl Mode {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Mode::Namespaces => "namespaces",
            Mode::None => "none",
        }
    }
}

/// Set in tests (and by operators who want today's sandbox) to act as if the platform refused
/// namespaces (read with the rest of the environment, in src/environment.rs).
const DISABLE_ENV: &str = "FIXGATE_NO_NAMESPACES";

/// What this machine permits, probed once per fixgate process (the context keeps it) and handed
/// to every run through its runner.
pub(crate) struct Host {
    mode: Mode,
    /// Why namespaces are not used (`None` when they are).
    reason: Option<String>,
    /// The caller's home, hidden from runs.
    home: Option<PathBuf>,
    /// The environment read at start: `PATH` to find the interpreter's prefix, the temporary
    /// directory the probe uses, this executable.
    env: Arc<Environment>,
    /// The kernel keeps a `pid_max` per PID namespace (Linux 6.14): a run's is its process
    /// bound. Before that the file is the host's, and is never written.
    pid_max_per_namespace: bool,
}

impl Host {
    /// Finds what this machine permits (a user namespace is tried in a child).
    pub(crate) fn probe(env: &Arc<Environment>) -> Host {
        let reason = if env.no_namespaces {
            Some(format!("{DISABLE_ENV} is set"))
        } else {
            probe(env).err()
        };
        Host {
            mode: if reason.is_none() {
                Mode::Namespaces
            } else {
                Mode::None
            },
            reason,
            home: env.home.clone(),
            env: env.clone(),
            pid_max_per_namespace: kernel_at_least(6, 14),
        }
    }

    /// The containment runs get here.
    pub(crate) fn mode(&self) -> Mode {
        self.mode
    }

    /// With `strict`, a platform without namespaces is an error (queues that must never run
    /// untrusted code uncontained). Otherwise, for [`Mode::None`], the reason to tell the user.
    pub(crate) fn check(&self, strict: bool) -> Result<Option<&str>> {
        let h = self;
        if h.mode == Mode::Namespaces {
            return Ok(None);
        }
        if strict {
            return Err(Error::Infra(format!(
                "--containment strict: runs cannot be contained here ({}); run fixgate where \
                 user and mount namespaces are permitted (e.g. sysctl user.max_user_namespaces \
                 > 0, or a container started with --privileged or a seccomp profile that allows \
                 unshare), or drop --containment strict to run uncontained",
                h.reason
                    .as_deref()
                    .unwrap_or("namespaces are not permitted")
            )));
        }
        Ok(h.reason.as_deref())
    }
}

/// The paths of one run that containment must know.
pub(crate) struct RunPaths<'a> {
    /// The sandbox folder (tree, home, tmp and the files exchanged with the plugin): writable.
    pub(crate) sandbox: &'a Path,
    /// The directory the run starts in (inside the sandbox).
    pub(crate) cwd: &'a Path,
    /// Hidden: fixgate's cache directory (its store, other heads' results, the index), but for
    /// the two folders below.
    pub(crate) cache_dir: &'a Path,
    /// Readable: the plugin's files, compiled.
    pub(crate) plugin_dir: &'a Path,
    /// Readable: pytest's rewritten test modules, made by fixgate.
    pub(crate) rewrite_cache: &'a Path,
    /// Hidden: the user's repository.
    pub(crate) origin_root: &'a Path,
    /// Readable: what the interpreter needs (its executable as named and as resolved).
    pub(crate) interpreter: &'a [&'a Path],
    /// Readable: the interpreter's `sys.path` folders (its site-packages, what `.pth` files
    /// add, under a private `/tmp` too), but none that is or holds a hidden folder, and none
    /// inside the repository, the cache or the sandboxes.
    pub(crate) libraries: &'a [PathBuf],
    /// Leave the network alone.
    pub(crate) allow_network: bool,
    /// The run's bounds.
    pub(crate) limits: &'a Limits,
}

/// Makes `cmd` a contained run: [`Mode::Namespaces`] where permitted, else the supervisor
/// alone. Call after every other setting of `cmd` (it adds the last `pre_exec` step).
pub(crate) fn apply(host: &Host, cmd: &mut Command, paths: &RunPaths) {
    let mut plan = Plan::new(host, paths);
    // SAFETY: the closure runs in the child between fork and exec. It only makes system calls
    // on memory prepared before the fork (no allocation, no locks), which is what a child of
    // a multithreaded process may do.
    unsafe {
        cmd.pre_exec(move || plan.run_in_child());
    }
}

/// One mount of the hidden tree that must stay visible: bound back from the real path.
struct Keep {
    /// Where it is mounted (the path the run uses).
    target: CString,
    /// The real directory or file, opened before the hiding mounts cover it.
    source: CString,
    /// Directories to create in the covering tmpfs, outermost first, ending with `target`
    /// (which is a file to create instead when `file`).
    mkdirs: Vec<CString>,
    file: bool,
    fd: libc::c_int,
}

/// A folder covered by a fresh tmpfs: an empty read-only one (hidden), or the writable scratch
/// `/dev/shm` of a bounded size.
struct Cover {
    path: CString,
    options: CString,
}

/// Everything the child does, prepared in the parent.
struct Plan {
    namespaces: bool,
    net: bool,
    parent: libc::pid_t,
    /// `Some` when not root: the user namespace's single-line maps.
    user_maps: Option<(Vec<u8>, Vec<u8>)>,
    hide: Vec<Cover>,
    /// Hidden folders inside another cover (the repository or the home under `/tmp`): made
    /// empty in it, outermost first, so that they still exist, empty and read-only, and a write
    /// there fails as one to a read-only file system, not as one to a missing folder.
    placeholders: Vec<CString>,
    keep: Vec<Keep>,
    writable: Vec<CString>,
    /// Host sockets that would hand out the machine (a container engine, the system bus):
    /// covered by `/dev/null`. Unix sockets on the file system ignore the network namespace.
    masked: Vec<CString>,
    cwd: CString,
    /// `/proc/self/fd/NNNNNNNNNN`, filled in the child.
    fd_path: [u8; 32],
    /// `setrlimit` calls for pytest and everything it starts.
    rlimits: Vec<(libc::__rlimit_resource_t, libc::rlim_t)>,
    /// The run's PID namespace's `pid_max`, where the kernel keeps one per namespace.
    pid_max: Option<Vec<u8>>,
}

/// Folders whose host content no run may see (Unix sockets, other users' files, other runs'
/// sandboxes): each run gets its own, empty. A test writes to its sandbox's `TMPDIR`, so `/tmp`
/// and `/run` stay read-only (a write there is an outside write, as before); `/dev/shm` is
/// writable, for `multiprocessing`, and bounded.
const PRIVATE: [&str; 2] = ["/tmp", "/run"];
const SCRATCH: &str = "/dev/shm";

const MASKED_SOCKETS: [&str; 7] = [
    "/run/docker.sock",
    "/var/run/docker.sock",
    "/run/containerd/containerd.sock",
    "/run/podman/podman.sock",
    "/run/crio/crio.sock",
    "/run/dbus/system_bus_socket",
    "/run/systemd/private",
];

const PROC_RO: [&str; 4] = ["/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus"];

fn cstr(p: &Path) -> CString {
    // A path with a NUL byte cannot exist; an empty string makes the mount fail loudly.
    CString::new(p.as_os_str().as_bytes()).unwrap_or_default()
}

/// `path` absolute and canonical where it exists; `None` for paths that do not.
fn real(path: &Path) -> Option<PathBuf> {
    std::fs::canonicalize(path).ok()
}

/// The folders of `sys_path` a run may read: canonical, existing, holding no folder of `hidden`
/// (binding `/home` back would show the home) and inside none of `private` (the repository,
/// whose editable-install folder the run reads from its own tree; the cache; the sandboxes).
fn libraries(sys_path: &[PathBuf], hidden: &[PathBuf], private: &[PathBuf]) -> Vec<PathBuf> {
    sys_path
        .iter()
        .filter_map(|p| real(p))
        .filter(|p| p.is_dir() && p.parent().is_some())
        .filter(|p| !hidden.iter().any(|h| h.starts_with(p)))
        .filter(|p| !private.iter().any(|h| p.starts_with(h)))
        .collect()
}

/// Keeps only the outermost of nested paths.
fn outermost(mut paths: Vec<PathBuf>) -> Vec<PathBuf> {
    paths.sort();
    paths.dedup();
    let mut out: Vec<PathBuf> = Vec::new();
    for p in paths {
        if !out.iter().any(|o| p.starts_with(o)) {
            out.push(p);
        }
    }
    out
}

impl Plan {
    fn new(host: &Host, paths: &RunPaths) -> Plan {
        let namespaces = host.mode == Mode::Namespaces;
        let uid = unsafe { libc::geteuid() };
        let gid = unsafe { libc::getegid() };
        let mut plan = Plan {
            namespaces,
            net: !paths.allow_network,
            parent: std::process::id() as libc::pid_t,
            user_maps: (uid != 0).then(|| {
                (
                    format!("{uid} {uid} 1\n").into_bytes(),
                    format!("{gid} {gid} 1\n").into_bytes(),
                )
            }),
            hide: Vec::new(),
            placeholders: Vec::new(),
            keep: Vec::new(),
            writable: Vec::new(),
            masked: Vec::new(),
            cwd: cstr(paths.cwd),
            fd_path: [0; 32],
            rlimits: paths.limits.rlimits(),
            pid_max: None,
        };
        if !namespaces {
            return plan;
        }
        plan.pid_max = host
            .pid_max_per_namespace
            .then(|| format!("{}\n", paths.limits.processes.max(PID_MAX_MIN)).into_bytes());
        let writable: Vec<PathBuf> = real(paths.sandbox).into_iter().collect();
        let mut readable: Vec<PathBuf> = writable.clone();
        readable.extend(
            [paths.plugin_dir, paths.rewrite_cache]
                .into_iter()
                .filter_map(real),
        );
        // Name resolution keeps working where /etc/resolv.conf leads into /run.
        readable.extend(real(Path::new("/etc/resolv.conf")).filter(|p| p.is_file()));
        for exe in paths.interpreter.iter().filter_map(|e| host.env.which(e)) {
            // The interpreter's prefix (a virtualenv, a pyenv version): `bin/python`'s
            // grandparent holds its libraries and configuration; for a virtualenv's link, the
            // base interpreter's too (where the link leads). Keeping `/` would keep
            // everything visible.
            for exe in [Some(exe.clone()), real(&exe)].into_iter().flatten() {
                let prefix = exe.parent().and_then(Path::parent).and_then(real);
                readable.extend(prefix.filter(|p| p.parent().is_some()));
            }
        }
        let sandboxes = paths.sandbox.parent().and_then(real);
        let mut hidden: Vec<PathBuf> = [Some(paths.origin_root), host.home.as_deref()]
            .into_iter()
            .flatten()
            .filter_map(real)
            .chain(sandboxes.clone())
            .filter(|h| h.parent().is_some() && h.is_dir())
            // A hidden folder inside a needed one is left alone (a home inside the
            // interpreter's prefix); `/` is never hidden (HOME=/ in some containers).
            .filter(|h| !readable.iter().any(|r| h.starts_with(r)))
            .collect();
        // The cache is hidden wherever it is: its store holds every head's results.
        hidden.extend(real(paths.cache_dir).filter(|c| c.parent().is_some() && c.is_dir()));
        // The interpreter's library folders are bound back where a cover hides them; they
        // never make a hidden folder visible.
        let private: Vec<PathBuf> = [Some(paths.origin_root), Some(paths.cache_dir)]
            .into_iter()
            .flatten()
            .filter_map(real)
            .chain(sandboxes.clone())
            .collect();
        // Other runs' sandboxes on /dev/shm, sockets in /tmp and /run, and whatever tests
        // leave there for the next run, go behind fresh tmpfs of the run's own.
        let scratch: Vec<PathBuf> = real(Path::new(SCRATCH))
            .filter(|p| p.is_dir() && p.parent().is_some())
            .into_iter()
            .collect();
        hidden.extend(scratch.iter().cloned());
        hidden.extend(
            PRIVATE
                .iter()
                .filter_map(|p| real(Path::new(p)))
                .filter(|p| p.is_dir() && p.parent().is_some()),
        );
        // Checked against every hidden folder, /tmp, /run and /dev/shm included, and every
        // masked socket: a library folder that holds one would show it.
        let mut holders = hidden.clone();
        holders.extend(MASKED_SOCKETS.iter().filter_map(|p| real(Path::new(p))));
        readable.extend(libraries(paths.libraries, &holders, &private));
        let nested = hidden.clone();
        let hidden = outermost(hidden);
        let mut placeholders: Vec<PathBuf> = Vec::new();
        for n in nested.iter().filter(|n| !hidden.contains(n)) {
            let Some(h) = hidden.iter().find(|h| n.starts_with(h)) else {
                continue;
            };
            let mut dir = h.clone();
            for c in n.strip_prefix(h).into_iter().flat_map(Path::components) {
                dir.push(c);
                placeholders.push(dir.clone());
            }
        }
        placeholders.sort();
        placeholders.dedup();
        plan.placeholders = placeholders.iter().map(|p| cstr(p)).collect();
        let scratch_options = if paths.limits.disk == crate::limits::UNLIMITED {
            c"mode=1777".to_owned()
        } else {
            cstr(Path::new(&format!("mode=1777,size={}", paths.limits.disk)))
        };
        for h in &hidden {
            let options = if scratch.contains(h) {
                scratch_options.clone()
            } else {
                c"mode=0755,size=64k".to_owned()
            };
            plan.hide.push(Cover {
                path: cstr(h),
                options,
            });
        }
        for k in outermost(readable) {
            let Some(h) = hidden.iter().find(|h| k.starts_with(h) && k != **h) else {
                continue;
            };
            let mut mkdirs = Vec::new();
            let mut dir = h.clone();
            if let Ok(rest) = k.strip_prefix(h) {
                for c in rest.components() {
                    dir.push(c);
                    mkdirs.push(cstr(&dir));
                }
            }
            plan.keep.push(Keep {
                target: cstr(&k),
                source: cstr(&k),
                mkdirs,
                file: k.is_file(),
                fd: -1,
            });
        }
        // Sockets in a covered folder are gone with it.
        let mut masked: Vec<PathBuf> = MASKED_SOCKETS
            .iter()
            .filter_map(|p| real(Path::new(p)))
            .filter(|m| !hidden.iter().any(|h| m.starts_with(h)))
            .collect();
        masked.sort();
        masked.dedup();
        plan.masked = masked.iter().map(|m| cstr(m)).collect();
        plan.writable = writable.iter().map(|w| cstr(w)).collect();
        plan.writable.extend(
            scratch
                .iter()
                .filter(|s| hidden.contains(s))
                .map(|s| cstr(s)),
        );
        plan
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
            if self.namespaces {
                self.enter_namespaces()?;
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
            let child = libc::fork();
            if child < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if child > 0 {
                libc::close(status_pipe[1]);
                supervise(child, status_pipe[0], self.namespaces);
            }
            libc::close(status_pipe[0]);
            if !self.namespaces {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
                return self.set_rlimits();
            }
            // PID 1 of the run.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
            let pytest = libc::fork();
            if pytest < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if pytest > 0 {
                reap(pytest, status_pipe[1]);
            }
            libc::close(status_pipe[1]);
            self.finish_world()?;
            Ok(())
        }
    }

    /// New namespaces, then the read-only world (all but `/proc`, which needs the new PID
    /// namespace's process to mount it).
    unsafe fn enter_namespaces(&mut self) -> std::io::Result<()> {
        let mut flags = libc::CLONE_NEWNS | libc::CLONE_NEWPID;
        if self.net {
            flags |= libc::CLONE_NEWNET;
        }
        if self.user_maps.is_some() {
            flags |= libc::CLONE_NEWUSER;
        }
        check(libc::unshare(flags))?;
        if let Some((uid_map, gid_map)) = &self.user_maps {
            write_file(c"/proc/self/setgroups", b"deny")?;
            write_file(c"/proc/self/uid_map", uid_map)?;
            write_file(c"/proc/self/gid_map", gid_map)?;
        }
        if self.net {
            lo_up();
        }
        // Nothing mounted here reaches the host.
        check(libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ))?;
        for k in &mut self.keep {
            k.fd = libc::open(k.source.as_ptr(), libc::O_PATH | libc::O_CLOEXEC);
        }
        for h in &self.hide {
            check(libc::mount(
                c"tmpfs".as_ptr(),
                h.path.as_ptr(),
                c"tmpfs".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                h.options.as_ptr().cast(),
            ))?;
        }
        for d in &self.placeholders {
            if libc::mkdir(d.as_ptr(), 0o755) != 0 && *libc::__errno_location() != libc::EEXIST {
                return Err(std::io::Error::last_os_error());
            }
        }
        for i in 0..self.keep.len() {
            let fd = self.keep[i].fd;
            if fd < 0 {
                continue;
            }
            let last = self.keep[i].mkdirs.len().saturating_sub(1);
            for (j, d) in self.keep[i].mkdirs.iter().enumerate() {
                if j == last && self.keep[i].file {
                    let f = libc::open(
                        d.as_ptr(),
                        libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
                        0o644,
                    );
                    if f < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    libc::close(f);
                } else if libc::mkdir(d.as_ptr(), 0o755) != 0
                    && *libc::__errno_location() != libc::EEXIST
                {
                    return Err(std::io::Error::last_os_error());
                }
            }
            fd_path(&mut self.fd_path, fd);
            let target = self.keep[i].target.as_ptr();
            check(libc::mount(
                self.fd_path.as_ptr().cast(),
                target,
                std::ptr::null(),
                libc::MS_BIND | libc::MS_REC,
                std::ptr::null(),
            ))?;
            libc::close(fd);
        }
        for m in &self.masked {
            check(libc::mount(
                c"/dev/null".as_ptr(),
                m.as_ptr(),
                std::ptr::null(),
                libc::MS_BIND,
                std::ptr::null(),
            ))?;
        }
        mount_setattr(c"/", true, MOUNT_ATTR_RDONLY, 0)?;
        for w in &self.writable {
            check(libc::mount(
                w.as_ptr(),
                w.as_ptr(),
                std::ptr::null(),
                libc::MS_BIND | libc::MS_REC,
                std::ptr::null(),
            ))?;
            mount_setattr(w, false, 0, MOUNT_ATTR_RDONLY)?;
        }
        Ok(())
    }

    /// The run's rlimits, for pytest and everything it starts.
    unsafe fn set_rlimits(&self) -> std::io::Result<()> {
        for &(resource, value) in &self.rlimits {
            let limit = libc::rlimit {
                rlim_cur: value,
                rlim_max: value,
            };
            check(libc::setrlimit(resource, &limit))?;
        }
        Ok(())
    }

    /// In the run's PID namespace, just before exec: its own `/proc` (with the host-wide
    /// switches read-only), the working directory again (the old one is on a covered mount),
    /// and no capabilities, so that nothing can undo the mounts.
    unsafe fn finish_world(&mut self) -> std::io::Result<()> {
        check(libc::mount(
            c"proc".as_ptr(),
            c"/proc".as_ptr(),
            c"proc".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            std::ptr::null(),
        ))?;
        // This namespace's own PID space, while /proc/sys is still writable: the process
        // bound of the run (the kernel counts threads too).
        if let Some(max) = &self.pid_max {
            write_file(c"/proc/sys/kernel/pid_max", max)?;
        }
        self.set_rlimits()?;
        for p in PROC_RO {
            let mut buf = [0u8; 32];
            buf[..p.len()].copy_from_slice(p.as_bytes());
            let c = buf.as_ptr().cast::<libc::c_char>();
            if libc::mount(
                c,
                c,
                std::ptr::null(),
                libc::MS_BIND | libc::MS_REC,
                std::ptr::null(),
            ) == 0
            {
                let cs = std::ffi::CStr::from_ptr(c);
                mount_setattr(cs, true, MOUNT_ATTR_RDONLY, 0)?;
            }
        }
        check(libc::chdir(self.cwd.as_ptr()))?;
        drop_capabilities()
    }
}

const MOUNT_ATTR_RDONLY: u64 = 0x1;

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

unsafe fn mount_setattr(
    path: &std::ffi::CStr,
    recursive: bool,
    set: u64,
    clear: u64,
) -> std::io::Result<()> {
    let attr = MountAttr {
        attr_set: set,
        attr_clr: clear,
        propagation: 0,
        userns_fd: 0,
    };
    let flags = if recursive { libc::AT_RECURSIVE } else { 0 };
    let r = libc::syscall(
        libc::SYS_mount_setattr,
        libc::AT_FDCWD,
        path.as_ptr(),
        flags as libc::c_uint,
        &attr as *const MountAttr,
        std::mem::size_of::<MountAttr>(),
    );
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn check(r: libc::c_int) -> std::io::Result<()> {
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

unsafe fn write_file(path: &std::ffi::CStr, bytes: &[u8]) -> std::io::Result<()> {
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
fn fd_path(buf: &mut [u8; 32], fd: libc::c_int) {
    let prefix = b"/proc/self/fd/";
    buf[..prefix.len()].copy_from_slice(prefix);
    let end = write_decimal(buf, prefix.len(), fd.unsigned_abs());
    buf[end] = 0;
}

/// Writes `n` in decimal into `buf` at `at`, without allocating (it runs between fork and
/// exec); returns where the digits end.
fn write_decimal(buf: &mut [u8], at: usize, mut n: u32) -> usize {
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

/// Clears every capability, for good: the bounding set (so that exec as root gains none back),
/// the ambient and inheritable sets, then the effective and permitted ones; and no new
/// privileges through setuid binaries.
unsafe fn drop_capabilities() -> std::io::Result<()> {
    for cap in 0..64 {
        libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong);
    }
    libc::prctl(
        libc::PR_CAP_AMBIENT,
        libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
        0 as libc::c_ulong,
        0 as libc::c_ulong,
        0 as libc::c_ulong,
    );
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let mut header = Header {
        version: 0x2008_0522, // _LINUX_CAPABILITY_VERSION_3
        pid: 0,
    };
    let data = [Data {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    if libc::syscall(libc::SYS_capset, &mut header as *mut Header, data.as_ptr()) != 0 {
        return Err(std::io::Error::last_os_error());
    }
    check(libc::prctl(
        libc::PR_SET_NO_NEW_PRIVS,
        1 as libc::c_ulong,
        0 as libc::c_ulong,
        0 as libc::c_ulong,
        0 as libc::c_ulong,
    ))
}

/// Closes every descriptor from 3 up except `keep`: the supervisor and the reaper must not
/// hold the pipe through which the standard library learns that exec happened.
unsafe fn close_all_but(keep: libc::c_int) {
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
unsafe fn supervise(child: libc::pid_t, status_pipe: libc::c_int, namespaces: bool) -> ! {
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
unsafe fn reap(pytest: libc::pid_t, status_pipe: libc::c_int) -> ! {
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
unsafe fn exit_like(status: libc::c_int) -> ! {
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

/// Brings loopback up in the current network namespace, so that tests can still talk to
/// servers they start on localhost.
unsafe fn lo_up() {
    let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
    if fd < 0 {
        return;
    }
    let mut req: libc::ifreq = std::mem::zeroed();
    for (i, b) in b"lo\0".iter().enumerate() {
        req.ifr_name[i] = *b as libc::c_char;
    }
    if libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut req) == 0 {
        req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        libc::ioctl(fd, libc::SIOCSIFFLAGS, &mut req);
    }
    libc::close(fd);
}

/// Without the other namespaces, a network namespace alone where the platform permits it (as
/// runs always had); otherwise the host's network.
unsafe fn isolate_network_best_effort() {
    if libc::unshare(libc::CLONE_NEWNET) == 0 {
        lo_up();
    }
}

/// Whether the running kernel's version is at least `major.minor` (from `uname`).
fn kernel_at_least(major: u32, minor: u32) -> bool {
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

/// Whether namespaces work here: runs a program contained, in a throwaway sandbox.
fn probe(env: &Arc<Environment>) -> std::result::Result<(), String> {
    let dir = tempfile::Builder::new()
        .prefix("fixgate-probe-")
        .tempdir_in(&env.temp_dir)
        .map_err(|e| format!("failed to make a probe folder: {e}"))?;
    let sandbox = dir.path().join("sandbox");
    let cache = dir.path().join("cache");
    for d in [&sandbox, &cache] {
        std::fs::create_dir_all(d).map_err(|e| format!("failed to make a probe folder: {e}"))?;
    }
    let probe_host = Host {
        mode: Mode::Namespaces,
        reason: None,
        home: None,
        env: env.clone(),
        pid_max_per_namespace: false,
    };
    let mut plan = Plan::new(
        &probe_host,
        &RunPaths {
            sandbox: &sandbox,
            cwd: &sandbox,
            cache_dir: &cache,
            plugin_dir: &cache,
            rewrite_cache: &cache,
            origin_root: &cache,
            interpreter: &[],
            libraries: &[],
            allow_network: false,
            limits: &Limits {
                memory: crate::limits::UNLIMITED,
                processes: crate::limits::UNLIMITED,
                disk: 1 << 20,
                configured: crate::limits::LimitArgs::default(),
            },
        },
    );
    // Any program will do; `true` where there is one, else fixgate itself.
    let program = env
        .which(Path::new("true"))
        .or_else(|| env.current_exe.clone())
        .unwrap_or_else(|| PathBuf::from("true"));
    let mut cmd = Command::new(&program);
    if program.file_name() != Some(std::ffi::OsStr::new("true")) {
        cmd.arg("--version");
    }
    cmd.current_dir(&sandbox)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: as in `apply`.
    unsafe {
        cmd.pre_exec(move || plan.run_in_child());
    }
    match cmd.status() {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(format!("a contained probe process ended with {s}")),
        Err(e) => Err(format!("namespaces are not permitted: {e}")),
    }
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

    #[test]
    fn library_folders_never_show_a_hidden_or_private_folder() {
        let root = tempfile::tempdir().unwrap();
        let at = |s: &str| {
            let p = root.path().join(s);
            std::fs::create_dir_all(&p).unwrap();
            real(&p).unwrap()
        };
        let (home, repo, cache, tmp) = (at("home/me"), at("home/me/repo"), at("cache"), at("tmp"));
        let (user_site, editable) = (at("home/me/.local/site"), at("home/me/repo/src"));
        let (in_cache, shared) = (at("cache/lib"), at("tmp/venv/site-packages"));
        let hidden = vec![home.clone(), repo.clone(), cache.clone(), tmp.clone()];
        let private = vec![repo.clone(), cache.clone()];
        let sys_path = [
            root.path().join("home"),
            home,
            user_site.clone(),
            editable,
            in_cache,
            shared.join("../site-packages"),
            root.path().join("missing"),
        ];
        assert_eq!(
            libraries(&sys_path, &hidden, &private),
            vec![user_site, shared]
        );
    }

    #[test]
    fn only_the_outermost_of_nested_paths_is_kept() {
        let p = |s: &str| PathBuf::from(s);
        assert_eq!(
            outermost(vec![p("/a/b/c"), p("/a/b"), p("/x"), p("/a/bc"), p("/x")]),
            vec![p("/a/b"), p("/a/bc"), p("/x")]
        );
    }
}
