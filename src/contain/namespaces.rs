//! The namespaces tier: each run in new user (when fixgate is not root), mount, PID and
//! network namespaces, in a read-only world where only its sandbox and a private `/dev/shm` can
//! be written, the user's repository, home, the cache and the other sandboxes covered by empty
//! folders, the host's `/tmp` and `/run` replaced by empty ones of its own.
//!
//! [`NsPlan::new`] prepares every path in the parent; [`NsPlan::enter`] and [`NsPlan::finish`]
//! run in the child between fork and exec: system calls on that memory only (no allocation,
//! no locks).

use std::ffi::{CStr, CString};
use std::path::{Path, PathBuf};

use super::host::Host;
use super::reads::{cstr, interpreter_prefixes, libraries, outermost, private, real, RunPaths};
use super::sys::{check, fd_path, write_file};
use crate::limits::{PID_MAX_MIN, UNLIMITED};

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

/// The namespaces' part of a run, prepared in the parent.
pub(super) struct NsPlan {
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
    /// `/proc/self/fd/NNNNNNNNNN`, filled in the child.
    fd_path: [u8; 32],
    /// The run's PID namespace's `pid_max`, where the kernel keeps one per namespace.
    pid_max: Option<Vec<u8>>,
}

/// Folders whose host content no run may see (Unix sockets, other users' files, other runs'
/// sandboxes): each run gets its own, empty. A test writes to its sandbox's `TMPDIR`, so `/tmp`
/// and `/run` stay read-only (a write there is an outside write, as before); `/dev/shm` is
/// writable, for `multiprocessing`, and bounded.
const PRIVATE: [&str; 2] = ["/tmp", "/run"];
const SCRATCH: &str = "/dev/shm";

/// Daemon sockets that hand out the machine to whoever connects.
pub(super) const MASKED_SOCKETS: [&str; 7] = [
    "/run/docker.sock",
    "/var/run/docker.sock",
    "/run/containerd/containerd.sock",
    "/run/podman/podman.sock",
    "/run/crio/crio.sock",
    "/run/dbus/system_bus_socket",
    "/run/systemd/private",
];

const PROC_RO: [&str; 4] = ["/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus"];

impl NsPlan {
    /// Every mount of a run's world, from what it must write and read.
    pub(super) fn new(host: &Host, paths: &RunPaths) -> NsPlan {
        let uid = unsafe { libc::geteuid() };
        let gid = unsafe { libc::getegid() };
        let mut plan = NsPlan {
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
            fd_path: [0; 32],
            // No bound, no file to write: the kernel refuses a pid_max above its own.
            pid_max: (host.pid_max_per_namespace() && paths.limits.processes != UNLIMITED)
                .then(|| format!("{}\n", paths.limits.processes.max(PID_MAX_MIN)).into_bytes()),
        };
        let writable: Vec<PathBuf> = real(paths.sandbox).into_iter().collect();
        let mut readable: Vec<PathBuf> = writable.clone();
        readable.extend(
            [paths.plugin_dir, paths.rewrite_cache]
                .into_iter()
                .filter_map(real),
        );
        // Name resolution keeps working where /etc/resolv.conf leads into /run.
        readable.extend(real(Path::new("/etc/resolv.conf")).filter(|p| p.is_file()));
        readable.extend(interpreter_prefixes(host.env(), paths.interpreter));
        let sandboxes = paths.sandbox.parent().and_then(real);
        let mut hidden: Vec<PathBuf> = [Some(paths.origin_root), host.home()]
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
        let private = private(paths);
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
        readable.extend(super::reads::extra(paths, &holders, &private));
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

    /// New namespaces, then the read-only world (all but `/proc`, which needs the new PID
    /// namespace's process to mount it). `net`: a network namespace of its own too.
    pub(super) unsafe fn enter(&mut self, net: bool) -> std::io::Result<()> {
        let mut flags = libc::CLONE_NEWNS | libc::CLONE_NEWPID;
        if net {
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
        if net {
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

    /// In the run's PID namespace, just before exec: its own `/proc` (with the host-wide
    /// switches read-only), the working directory again (the old one is on a covered mount),
    /// and no capabilities, so that nothing can undo the mounts. (The caller set the rlimits.)
    pub(super) unsafe fn finish(&mut self, cwd: &CStr) -> std::io::Result<()> {
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
        check(libc::chdir(cwd.as_ptr()))?;
        super::uid::drop_capabilities()
    }
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
pub(super) unsafe fn isolate_network_best_effort() {
    if libc::unshare(libc::CLONE_NEWNET) == 0 {
        lo_up();
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

/// Sets and clears mount attributes on the mount at `path` (and below it, `recursive`).
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
