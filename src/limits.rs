//! Each run's bounds (memory, processes, disk): their defaults and settings, and how a test that
//! hit one is told apart, so that a fork bomb, a memory grab or a disk fill ends as a
//! `resource-limit` result for the test that was running, never as a hang or a host outage.
//!
//! How they are enforced (src/contain.rs applies them): memory by `RLIMIT_AS` on every process of
//! the run; processes by the run's own PID namespace's `pid_max` where the kernel keeps one per
//! namespace (Linux 6.14), and by `RLIMIT_NPROC`, which the kernel does not apply to root; disk by
//! `RLIMIT_FSIZE` on every file, a size-limited tmpfs for the run's own `/tmp`, `/run` and
//! `/dev/shm`, and [`DiskWatch`], which stops a run whose sandbox grows past the bound. A cgroup
//! per run would bound the run as a whole (memory of all its processes, tmpfs pages included);
//! fixgate does not use one yet, see docs/threat-model.md.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::config::LimitsConfig;
use crate::error::{Error, Result};
use crate::test_outcome::Outcome;
use crate::units::show_size;

/// No bound.
pub(crate) const UNLIMITED: u64 = u64::MAX;

/// The fewest processes a PID namespace's `pid_max` can be set to (the kernel reserves 300).
pub(crate) const PID_MAX_MIN: u64 = 301;

/// Processes (threads count) a run may have at once unless told otherwise: far above what a
/// test suite starts, far below what takes a machine down.
pub(crate) const DEFAULT_PROCESSES: u64 = 4096;

/// The bounds of every run of one fixgate process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Limits {
    /// Bytes of address space of each process.
    pub(crate) memory: u64,
    /// Processes and threads at once.
    pub(crate) processes: u64,
    /// Bytes of any one file, of the sandbox, and of each scratch folder.
    pub(crate) disk: u64,
    /// The bounds the command line and the configuration set; the others are defaults made
    /// from this machine (its memory, `--jobs`, the free space now), which a normal suite
    /// never meets and which must not split the cache between machines or from one audit to
    /// the next.
    pub(crate) configured: LimitArgs,
}

/// The bounds the command line sets (`None`: not given).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct LimitArgs {
    pub(crate) memory: Option<u64>,
    pub(crate) processes: Option<u64>,
    pub(crate) disk: Option<u64>,
}

/// Which bound a test hit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Hit {
    Memory,
    Processes,
    Disk,
}

impl Hit {
    fn name(self) -> &'static str {
        match self {
            Hit::Memory => "memory",
            Hit::Processes => "processes",
            Hit::Disk => "disk",
        }
    }
}

impl Limits {
    /// The command line over `[tool.fixgate.limits]` (of the base, for an audit) over the
    /// defaults: each of `jobs` parallel runs gets its share of the memory, and half its share
    /// of the free space where sandboxes live (at most 16 GiB, at least 256 MiB).
    pub(crate) fn resolve(
        args: &LimitArgs,
        config: &LimitsConfig,
        jobs: usize,
        sandboxes: &Path,
    ) -> Limits {
        let jobs = jobs.max(1) as u64;
        let memory = physical_memory().map_or(UNLIMITED, |m| (m / jobs).max(1 << 30));
        let disk =
            free_bytes(sandboxes).map_or(16 << 30, |f| (f / (2 * jobs)).clamp(256 << 20, 16 << 30));
        let configured = LimitArgs {
            memory: args.memory.or(config.memory),
            processes: args.processes.or(config.processes),
            disk: args.disk.or(config.disk),
        };
        Limits {
            memory: configured.memory.unwrap_or(memory),
            processes: configured.processes.unwrap_or(DEFAULT_PROCESSES),
            disk: configured.disk.unwrap_or(disk),
            configured,
        }
    }

    /// Part of every run's key: a run under other bounds may end otherwise. Only the bounds
    /// that were set count (see [`Limits::configured`]).
    pub(crate) fn key(&self) -> String {
        let show = |n: Option<u64>| n.map_or("default".to_owned(), |n| n.to_string());
        format!(
            "memory={} processes={} disk={}",
            show(self.configured.memory),
            show(self.configured.processes),
            show(self.configured.disk)
        )
    }

    /// The `setrlimit` calls for pytest and everything it starts: never above the hard limit
    /// fixgate itself has (raising one needs a capability it may lack), none for no bound.
    pub(crate) fn rlimits(&self) -> Vec<(libc::__rlimit_resource_t, libc::rlim_t)> {
        [
            (libc::RLIMIT_AS, self.memory),
            (libc::RLIMIT_FSIZE, self.disk),
            (libc::RLIMIT_NPROC, self.processes),
        ]
        .into_iter()
        .filter(|&(_, n)| n != UNLIMITED)
        .map(|(resource, n)| {
            // SAFETY: `rlimit` is plain data; the call fills it or fails.
            let mut now: libc::rlimit = unsafe { std::mem::zeroed() };
            let hard = if unsafe { libc::getrlimit(resource, &mut now) } == 0 {
                now.rlim_max
            } else {
                libc::RLIM_INFINITY
            };
            (resource, (n as libc::rlim_t).min(hard))
        })
        .collect()
    }

    fn bound(&self, hit: Hit) -> String {
        match hit {
            Hit::Memory => show_size(self.memory),
            Hit::Disk => show_size(self.disk),
            Hit::Processes if self.processes == UNLIMITED => "unlimited".into(),
            Hit::Processes => self.processes.to_string(),
        }
    }

    /// The message of a test that hit `hit`: which bound, how to raise it, and what the test
    /// itself said.
    pub(crate) fn message(&self, hit: Hit, what: &str) -> String {
        let flag = match hit {
            Hit::Memory => "--memory-limit",
            Hit::Processes => "--process-limit",
            Hit::Disk => "--disk-limit",
        };
        format!(
            "hit the run's {} limit ({}): {what}; a test that needs more raises it with {flag} \
             or [tool.fixgate.limits] {} in the base's pyproject.toml",
            hit.name(),
            self.bound(hit),
            hit.name()
        )
    }

    /// Turns a red test whose failure is a bound's (what the kernel answers a process over
    /// its limit: `MemoryError`, `EAGAIN` from fork, `EFBIG`, `ENOSPC`, death by `SIGXFSZ`)
    /// into a `resource-limit` result. A test that raises such an error itself is red either
    /// way.
    pub(crate) fn classify(&self, outcome: &mut Outcome, message: &mut Option<String>) {
        if !matches!(outcome, Outcome::Failed | Outcome::Error | Outcome::Crashed) {
            return;
        }
        let Some(text) = message.as_deref() else {
            return;
        };
        if let Some(hit) = hit_by(text) {
            *message = Some(self.message(hit, text));
            *outcome = Outcome::ResourceLimit;
        }
    }
}

/// The bound a failure message shows was hit, if any.
pub(crate) fn hit_by(message: &str) -> Option<Hit> {
    const MEMORY: [&str; 2] = ["MemoryError", "[Errno 12] Cannot allocate memory"];
    const PROCESSES: [&str; 2] = [
        "[Errno 11] Resource temporarily unavailable",
        "can't start new thread",
    ];
    const DISK: [&str; 4] = [
        "[Errno 27] File too large",
        "[Errno 28] No space left on device",
        "[Errno 122] Disk quota exceeded",
        "died of signal 25 ",
    ];
    let any = |needles: &[&str]| needles.iter().any(|n| message.contains(n));
    if any(&MEMORY) {
        Some(Hit::Memory)
    } else if any(&PROCESSES) {
        Some(Hit::Processes)
    } else if any(&DISK) {
        Some(Hit::Disk)
    } else {
        None
    }
}

/// A bound given on the command line (`--memory-limit 4G`, `--process-limit 4096`,
/// `--disk-limit unlimited`), for clap.
pub(crate) fn size_arg(s: &str) -> std::result::Result<u64, String> {
    crate::units::parse_bound(s, false)
        .ok_or_else(|| format!("{s:?} is not a size; write e.g. 512M, 4G or unlimited"))
}

/// A count given on the command line, for clap.
pub(crate) fn count_arg(s: &str) -> std::result::Result<u64, String> {
    crate::units::parse_bound(s, true)
        .ok_or_else(|| format!("{s:?} is not a number above 0; write e.g. 4096 or unlimited"))
}

fn physical_memory() -> Option<u64> {
    // SAFETY: sysconf takes a name and returns a number or -1.
    let (pages, size) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    (pages > 0 && size > 0).then(|| pages as u64 * size as u64)
}

fn fs_stat(path: &Path) -> Option<libc::statvfs> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: `statvfs` is plain data; the call fills it or fails.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    (unsafe { libc::statvfs(c.as_ptr(), &mut s) } == 0).then_some(s)
}

fn free_bytes(path: &Path) -> Option<u64> {
    let mut p = path;
    // The sandboxes' folder may not exist yet: its nearest existing parent is on the same
    // file system, or tells as well.
    loop {
        if let Some(s) = fs_stat(p) {
            return Some(s.f_bavail.saturating_mul(s.f_frsize));
        }
        p = p.parent()?;
    }
}

fn used_bytes(path: &Path) -> Option<u64> {
    fs_stat(path).map(|s| {
        s.f_blocks
            .saturating_sub(s.f_bfree)
            .saturating_mul(s.f_frsize)
    })
}

/// A scratch folder runs write beside their sandbox that no mount of theirs bounds (`/dev/shm`
/// under Landlock), shared with the rest of the host. What counts there as a run's is what it
/// can have written: files its uid owns (a run creates files there, and writes inside folders
/// its uid owns) and files any uid may write; not another process's sandbox or segment.
pub(crate) struct Scratch<'a> {
    pub(crate) dir: &'a Path,
    /// The uids a run's files there may have, asked at each measure: the first run of a
    /// process decides the uid runs drop to only once it starts; until then, every candidate.
    pub(crate) writers: Box<dyn Fn() -> Vec<u32> + Send + 'a>,
}

/// Watches one run's sandbox for growth past the disk bound. Cheap to ask often: it looks at
/// the file system's use (one `statvfs`) and measures the sandbox itself only when the file
/// system grew by a quarter of the bound since the last measure, or a second has passed.
pub(crate) struct DiskWatch<'a> {
    dir: PathBuf,
    /// The shared scratch folder the run writes too, if any: its growth counts too.
    shared: Option<Shared<'a>>,
    limit: u64,
    /// The sandbox's size when the run started.
    start: u64,
    /// The size past which the run is stopped.
    allowed: u64,
    fs_used: u64,
    measured: Instant,
}

/// The run's part of a shared scratch folder.
struct Shared<'a> {
    scratch: Scratch<'a>,
    /// The run's part when the run started.
    start: u64,
    /// The run's part past which the run is stopped.
    allowed: u64,
    /// The file system's use below which the run's part cannot be past `allowed` (all of its
    /// growth since the last count would have to be the run's): no count is needed.
    fs_quiet: u64,
    counted: Instant,
}

impl Shared<'_> {
    fn new(scratch: Scratch<'_>, limit: u64) -> Option<Shared<'_>> {
        let fs = used_bytes(scratch.dir)?;
        let start = runs_part(&scratch).unwrap_or(0);
        Some(Shared {
            start,
            allowed: start.saturating_add(limit),
            fs_quiet: fs.saturating_add(limit),
            counted: Instant::now(),
            scratch,
        })
    }

    /// The run's part now, when it is past the bound.
    fn over(&mut self) -> Option<u64> {
        let fs = used_bytes(self.scratch.dir).unwrap_or(0);
        // Counted at least every second whatever the file system says: another process may
        // free space there while the run fills it.
        let since = self.counted.elapsed();
        if since < MEASURE_EVERY / 4 || (fs <= self.fs_quiet && since < MEASURE_EVERY) {
            return None;
        }
        self.counted = Instant::now();
        // A folder the walk cannot read (a run may take its own folder's modes away) makes the
        // whole file system's growth the run's, as if no other process wrote there.
        let part = runs_part(&self.scratch).unwrap_or_else(|| {
            fs.saturating_sub(self.fs_quiet)
                .saturating_add(self.allowed)
        });
        if part > self.allowed {
            return Some(part.saturating_sub(self.start));
        }
        self.fs_quiet = fs.saturating_add(self.allowed - part);
        None
    }

    /// A new process starts: what the last left may grow by a little more.
    fn next_process(&mut self, slack: u64) {
        let fs = used_bytes(self.scratch.dir).unwrap_or(0);
        let part = runs_part(&self.scratch).unwrap_or(self.allowed);
        if part.saturating_add(slack) > self.allowed {
            self.allowed = part.saturating_add(slack);
        }
        self.fs_quiet = fs.saturating_add(self.allowed.saturating_sub(part));
        self.counted = Instant::now();
    }
}

/// Bytes of the files under a scratch folder a run can have written (see [`Scratch`]); `None`
/// when a folder there cannot be read.
fn runs_part(scratch: &Scratch) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    let writers = (scratch.writers)();
    let mut total = 0;
    let mut stack = vec![(scratch.dir.to_path_buf(), true)];
    while let Some((d, mine)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            // A folder fixgate cannot read may hold the run's files only if the run could
            // have reached it (its uid owns it, or any uid may enter or write it): else the
            // file system's growth is counted as the run's.
            if mine {
                return None;
            }
            continue;
        };
        for e in entries {
            let path = e.ok()?.path();
            let Ok(meta) = path.symlink_metadata() else {
                continue; // removed meanwhile
            };
            if writers.contains(&meta.uid()) || meta.is_file() && meta.mode() & 0o022 != 0 {
                total += meta.blocks() * 512;
            }
            if meta.is_dir() {
                let mine = writers.contains(&meta.uid()) || meta.mode() & 0o033 != 0;
                stack.push((path, mine));
            }
        }
    }
    Some(total + held_unlinked(scratch.dir, &writers))
}

/// Bytes of files gone from `dir` that a process of one of `writers` still holds open: a run
/// may unlink each file it fills there and keep writing it, which no walk of the folder sees.
fn held_unlinked(dir: &Path, writers: &[u32]) -> u64 {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::MetadataExt;
    let prefix = [dir.as_os_str().as_bytes(), b"/"].concat();
    let mut seen = std::collections::HashSet::new();
    let mut total = 0;
    for process in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let is_pid = process
            .file_name()
            .as_bytes()
            .iter()
            .all(u8::is_ascii_digit);
        // A process's folder is its effective uid's.
        if !is_pid || !process.metadata().is_ok_and(|m| writers.contains(&m.uid())) {
            continue;
        }
        for fd in std::fs::read_dir(process.path().join("fd"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let Ok(target) = std::fs::read_link(fd.path()) else {
                continue;
            };
            let name = target.as_os_str().as_bytes();
            if !name.starts_with(&prefix) || !name.ends_with(b" (deleted)") {
                continue;
            }
            // Through the descriptor's link: the open file itself.
            if let Ok(m) = fd.path().metadata() {
                if seen.insert((m.dev(), m.ino())) {
                    total += m.blocks() * 512;
                }
            }
        }
    }
    total
}

impl<'a> DiskWatch<'a> {
    /// A watch of the sandbox `dir` for a run starting now; `None` for no bound. `shared`: a
    /// scratch folder the run may write beside its sandbox; its part there counts too.
    pub(crate) fn new(dir: &Path, limit: u64, shared: Option<Scratch<'a>>) -> Option<Self> {
        if limit == UNLIMITED {
            return None;
        }
        let start = du(dir);
        Some(DiskWatch {
            shared: shared.and_then(|s| Shared::new(s, limit)),
            dir: dir.to_path_buf(),
            limit,
            start,
            allowed: start.saturating_add(limit),
            fs_used: used_bytes(dir).unwrap_or(0),
            measured: Instant::now(),
        })
    }

    /// A new process of the run starts (after a test that crashed, timed out or was stopped
    /// here). What the earlier ones wrote stays, as the order left it; if that is past the
    /// bound, this process may add little more (a sixteenth of the bound) before it is stopped
    /// too, so that a run of many filling tests does not add a bound each. The same holds in
    /// the shared scratch folder, which fixgate does not empty: a test after the one that
    /// filled it runs.
    pub(crate) fn next_process(&mut self) {
        let now = du(&self.dir);
        let slack = (self.limit / 16).max(1 << 20);
        if now.saturating_add(slack) > self.allowed {
            self.allowed = now.saturating_add(slack);
        }
        if let Some(shared) = &mut self.shared {
            shared.next_process(slack);
        }
        self.fs_used = used_bytes(&self.dir).unwrap_or(0);
        self.measured = Instant::now();
    }

    /// How much the sandbox (or the run's part of the shared scratch folder) grew since the
    /// run started, when it is past the bound.
    pub(crate) fn over(&mut self) -> Option<Grew> {
        if let Some(shared) = &mut self.shared {
            if let Some(by) = shared.over() {
                return Some(Grew::Shared(shared.scratch.dir.to_path_buf(), by));
            }
        }
        let fs_used = used_bytes(&self.dir)?;
        let grew = fs_used.saturating_sub(self.fs_used);
        if grew < self.limit / 4 && self.measured.elapsed() < MEASURE_EVERY {
            return None;
        }
        self.fs_used = fs_used;
        self.measured = Instant::now();
        let size = du(&self.dir);
        (size > self.allowed).then(|| Grew::Sandbox(size.saturating_sub(self.start)))
    }
}

/// What grew past the disk bound, and by how many bytes since the run started.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Grew {
    Sandbox(u64),
    /// The run's files in the shared scratch folder.
    Shared(PathBuf, u64),
}

impl Grew {
    pub(crate) fn bytes(&self) -> u64 {
        match self {
            Grew::Sandbox(n) | Grew::Shared(_, n) => *n,
        }
    }
}

/// How often the sandbox is measured at least, whatever the file system says (other runs may
/// free space while this one fills it).
const MEASURE_EVERY: Duration = Duration::from_secs(1);

/// Bytes of the files under `dir`, links not followed.
fn du(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let Ok(meta) = e.metadata() else { continue };
            total += meta.blocks() * 512;
            if meta.is_dir() {
                stack.push(e.path());
            }
        }
    }
    total
}

/// Checks that a bound set is one runs can have.
pub(crate) fn check(limits: &Limits) -> Result<()> {
    if limits.processes < PID_MAX_MIN {
        return Err(Error::Usage(format!(
            "a process limit of {} is below the {PID_MAX_MIN} a run needs at least; raise \
             --process-limit or [tool.fixgate.limits] processes",
            limits.processes
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regression_the_default_limits_made_from_the_free_space_are_no_part_of_a_runs_key() {
        // The default disk bound follows the free space, which moves between two audits: in
        // the key, every run missed the cache the audit before had filled.
        let config = LimitsConfig::default();
        let here = Limits::resolve(&LimitArgs::default(), &config, 1, Path::new("/"));
        let there = Limits::resolve(&LimitArgs::default(), &config, 7, Path::new("/nowhere"));
        assert_ne!((here.memory, here.disk), (there.memory, there.disk));
        assert_eq!(here.key(), there.key());
        // A bound that is set is: a run under it may end otherwise.
        let set = LimitsConfig {
            disk: Some(64 << 20),
            ..LimitsConfig::default()
        };
        let bounded = Limits::resolve(&LimitArgs::default(), &set, 1, Path::new("/"));
        assert_eq!(bounded.disk, 64 << 20);
        assert_ne!(bounded.key(), here.key());
    }

    #[test]
    fn the_kernels_answers_to_a_process_over_its_bound_name_the_bound() {
        for (message, hit) in [
            ("MemoryError", Some(Hit::Memory)),
            ("MemoryError: cannot allocate", Some(Hit::Memory)),
            (
                "OSError: [Errno 12] Cannot allocate memory",
                Some(Hit::Memory),
            ),
            (
                "BlockingIOError: [Errno 11] Resource temporarily unavailable",
                Some(Hit::Processes),
            ),
            ("RuntimeError: can't start new thread", Some(Hit::Processes)),
            ("OSError: [Errno 27] File too large", Some(Hit::Disk)),
            (
                "OSError: [Errno 28] No space left on device",
                Some(Hit::Disk),
            ),
            (
                "the interpreter died of signal 25 during the test",
                Some(Hit::Disk),
            ),
            ("the interpreter died of signal 9 during the test", None),
            ("AssertionError: assert 1 == 2", None),
        ] {
            assert_eq!(hit_by(message), hit, "{message}");
        }
        let limits = Limits {
            memory: 512 << 20,
            processes: 400,
            disk: 64 << 20,
            configured: LimitArgs::default(),
        };
        let mut outcome = Outcome::Failed;
        let mut message = Some("MemoryError".to_string());
        limits.classify(&mut outcome, &mut message);
        assert_eq!(outcome, Outcome::ResourceLimit);
        assert!(message
            .unwrap()
            .starts_with("hit the run's memory limit (512 MiB): MemoryError"));
        // A pass that printed such words is a pass.
        let mut outcome = Outcome::Passed;
        let mut message = Some("MemoryError".to_string());
        limits.classify(&mut outcome, &mut message);
        assert_eq!(outcome, Outcome::Passed);
    }

    #[test]
    fn the_command_line_wins_over_the_configuration_which_wins_over_the_defaults() {
        let tmp = tempfile::tempdir().unwrap();
        let config = LimitsConfig {
            memory: Some(1 << 30),
            processes: Some(500),
            disk: None,
            read_paths: Vec::new(),
        };
        let args = LimitArgs {
            memory: Some(2 << 30),
            ..LimitArgs::default()
        };
        let l = Limits::resolve(&args, &config, 2, tmp.path());
        assert_eq!(l.memory, 2 << 30);
        assert_eq!(l.processes, 500);
        assert!(l.disk >= 256 << 20 && l.disk <= 16 << 30);
        let d = Limits::resolve(
            &LimitArgs::default(),
            &LimitsConfig::default(),
            1,
            tmp.path(),
        );
        assert_eq!(d.processes, DEFAULT_PROCESSES);
        assert!(d.memory >= 1 << 30);
    }

    #[test]
    fn a_sandbox_past_the_bound_is_seen_and_a_next_process_adds_little() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("tree"), vec![1u8; 4 << 20]).unwrap();
        let mut watch = DiskWatch::new(tmp.path(), 2 << 20, None).unwrap();
        assert_eq!(watch.over(), None);
        std::fs::write(tmp.path().join("a"), vec![1u8; 1 << 20]).unwrap();
        watch.measured -= MEASURE_EVERY;
        assert_eq!(
            watch.over(),
            None,
            "the tree there at the start is not counted"
        );
        std::fs::write(tmp.path().join("b"), vec![1u8; 2 << 20]).unwrap();
        watch.measured -= MEASURE_EVERY;
        assert!(watch.over().is_some_and(|g| g.bytes() >= 3 << 20));
        // The next process finds the sandbox full: it may write a little, not another bound.
        watch.next_process();
        watch.measured -= MEASURE_EVERY;
        assert_eq!(watch.over(), None);
        std::fs::write(tmp.path().join("c"), vec![1u8; 2 << 20]).unwrap();
        watch.measured -= MEASURE_EVERY;
        assert!(watch.over().is_some());
        assert!(DiskWatch::new(tmp.path(), UNLIMITED, None).is_none());
    }

    fn own_uid() -> u32 {
        // SAFETY: geteuid has no preconditions.
        unsafe { libc::geteuid() }
    }

    /// `/dev/shm` (a folder of it here) as runs of `uid` share it.
    fn scratch(dir: &Path, uid: u32) -> Scratch<'_> {
        Scratch {
            dir,
            writers: Box::new(move || vec![uid]),
        }
    }

    /// A file unlinked from the folder while still open is the run's as long as it is held.
    #[test]
    fn a_file_unlinked_but_held_open_is_charged() {
        use std::io::Write;
        let sandbox = tempfile::tempdir().unwrap();
        let shm = tempfile::tempdir_in("/dev/shm").expect("a folder in /dev/shm (tmpfs)");
        let mut watch = DiskWatch::new(
            sandbox.path(),
            8 << 20,
            Some(scratch(shm.path(), own_uid())),
        )
        .unwrap();
        let path = shm.path().join("held");
        let mut held = std::fs::File::create(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        held.write_all(&vec![1u8; 12 << 20]).unwrap();
        assert!(over_later(&mut watch).is_some_and(|g| g.bytes() >= 12 << 20));
        drop(held);
    }

    /// Asks the watch as if its last count were a while ago.
    fn over_later(watch: &mut DiskWatch) -> Option<Grew> {
        if let Some(shared) = &mut watch.shared {
            shared.counted -= MEASURE_EVERY;
        }
        watch.measured -= MEASURE_EVERY;
        watch.over()
    }

    /// Under Landlock a run writes the host's `/dev/shm`, which fixgate does not empty: the
    /// process that filled it is stopped, the next one runs (and is stopped only if it adds
    /// more than a little).
    #[test]
    fn a_shared_scratch_past_the_bound_stops_the_filler_not_the_next_process() {
        let sandbox = tempfile::tempdir().unwrap();
        let shm = tempfile::tempdir_in("/dev/shm").expect("a folder in /dev/shm (tmpfs)");
        let mut watch = DiskWatch::new(
            sandbox.path(),
            8 << 20,
            Some(scratch(shm.path(), own_uid())),
        )
        .unwrap();
        assert_eq!(over_later(&mut watch), None);
        std::fs::write(shm.path().join("a"), vec![1u8; 12 << 20]).unwrap();
        assert!(over_later(&mut watch).is_some_and(|g| g.bytes() >= 12 << 20));
        watch.next_process();
        assert_eq!(
            over_later(&mut watch),
            None,
            "what the filler left does not stop the next"
        );
        std::fs::write(shm.path().join("b"), vec![1u8; 4 << 20]).unwrap();
        assert!(
            over_later(&mut watch).is_some(),
            "the next process may add little"
        );
    }

    /// What other processes of the host put in `/dev/shm` (another fixgate's sandboxes in
    /// RAM, a database's segments) is not the run's: it stopped runs that wrote nothing. What
    /// the run can write is: a file its uid owns, in a folder there or not, and a file any
    /// uid may write.
    #[test]
    fn the_run_is_charged_for_its_own_files_in_a_shared_scratch_not_the_hosts() {
        use std::os::unix::fs::PermissionsExt;
        let sandbox = tempfile::tempdir().unwrap();
        let shm = tempfile::tempdir_in("/dev/shm").expect("a folder in /dev/shm (tmpfs)");
        // The run's uid is another than the one writing here (fixgate's, as the host's).
        let run = own_uid().wrapping_add(1);
        let mut watch =
            DiskWatch::new(sandbox.path(), 8 << 20, Some(scratch(shm.path(), run))).unwrap();
        std::fs::create_dir(shm.path().join("other")).unwrap();
        std::fs::write(shm.path().join("other/sandbox"), vec![1u8; 12 << 20]).unwrap();
        assert_eq!(
            over_later(&mut watch),
            None,
            "the host's files are not the run's"
        );
        let open = shm.path().join("open");
        std::fs::write(&open, vec![1u8; 12 << 20]).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(
            over_later(&mut watch).is_some_and(|g| g.bytes() >= 12 << 20),
            "a file any uid may write may be the run's"
        );
        // Charged to the uid that owns them: the run's own files, in a folder or not.
        std::fs::remove_file(&open).unwrap();
        let mut mine = DiskWatch::new(
            sandbox.path(),
            8 << 20,
            Some(scratch(shm.path(), own_uid())),
        )
        .unwrap();
        assert_eq!(
            over_later(&mut mine),
            None,
            "what was there at the start is not"
        );
        std::fs::write(shm.path().join("other/fill"), vec![1u8; 12 << 20]).unwrap();
        assert!(over_later(&mut mine).is_some_and(
            |g| (12 << 20..16 << 20).contains(&g.bytes()) && matches!(g, Grew::Shared(..))
        ));
    }
}
