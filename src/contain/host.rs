//! What this machine permits, probed once per fixgate process, and the tier its runs get:
//! namespaces where the kernel and the container permit them, else Landlock, else none, which
//! only `--containment none` accepts. The tier is reported (`containment` and
//! `containment_detail`) and is no part of any run's key: outcomes must not depend on it.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use serde::Serialize;

use super::uid::RunAs;
use crate::environment::Environment;
use crate::error::{Error, Result};
use crate::limits::Scratch;

/// How runs are contained, as the reports say it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Mode {
    /// User, mount, PID and network namespaces: a read-only world, no survivors.
    Namespaces,
    /// Landlock, a seccomp filter and no_new_privs (and, for root, an unprivileged uid): the
    /// file system and the network refused but for what a run needs, no survivors.
    Landlock,
    /// No containment (`--containment none`): the sandbox, rlimits and the sweep of
    /// descendants only, and a private cache.
    None,
}

impl Mode {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Mode::Namespaces => "namespaces",
            Mode::Landlock => "landlock",
            Mode::None => "none",
        }
    }
}

/// What the user asks of containment (`--containment`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Choice {
    /// The best tier this machine has; refuse where it has none.
    #[default]
    Auto,
    /// Namespaces, or Landlock with its file system and TCP rules all enforced; else refuse.
    Strict,
    /// No containment, explicitly: the audit then shares no cache.
    None,
}

/// The containment of a report: the tier and exactly what held. (Fields in sorted order: the
/// run report is written as declared.)
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Containment {
    /// The kernel's Landlock ABI version, in the Landlock tier.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) landlock_abi: Option<u32>,
    /// Why a better tier was not used, and what else the reader should know.
    pub(crate) notes: Vec<String>,
    /// The uid and gid runs dropped to (`uid:gid`), when fixgate is root without namespaces.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) run_as: Option<String>,
    /// Whether the cache other audits read was used (never without containment).
    pub(crate) shared_cache: bool,
    pub(crate) tier: Mode,
    /// The rules this tier could not enforce on this machine, each with what would.
    pub(crate) unenforced: Vec<String>,
}

impl Containment {
    /// One line for a human report's header: the tier, and for Landlock its ABI and uid.
    pub(crate) fn summary(&self) -> String {
        let mut out = self.tier.as_str().to_owned();
        if let Some(abi) = self.landlock_abi {
            out.push_str(&format!(" ABI {abi}"));
        }
        if let Some(who) = &self.run_as {
            out.push_str(&format!(" as {who}"));
        }
        if !self.unenforced.is_empty() {
            out.push_str(&format!(", {} rule(s) not enforced", self.unenforced.len()));
        }
        if !self.shared_cache {
            out.push_str(", private cache");
        }
        out
    }
}

/// Set in tests (and by operators who want the Landlock tier) to act as if the platform
/// refused namespaces (read with the rest of the environment, in src/environment.rs).
pub(super) const DISABLE_ENV: &str = "FIXGATE_NO_NAMESPACES";

/// Where `multiprocessing` makes its semaphores and shared memory (glibc's fixed folder).
pub(super) const SHM: &str = "/dev/shm";

/// What this kernel's Landlock enforces: its ABI version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Support {
    pub(crate) abi: u32,
}

impl Support {
    /// What this ABI cannot enforce of the rules above, each with what would.
    pub(crate) fn unenforced(self) -> Vec<String> {
        let gaps: [(u32, &str); 6] = [
            (
                3,
                "truncating files outside the sandbox (Landlock ABI 3, Linux 6.2)",
            ),
            (4, "TCP bind and connect (Landlock ABI 4, Linux 6.7)"),
            (5, "ioctl on devices (Landlock ABI 5, Linux 6.10)"),
            (
                6,
                "abstract Unix sockets and signals to processes outside the run (Landlock \
                 ABI 6, Linux 6.12)",
            ),
            (
                9,
                "connecting to Unix sockets outside the sandbox (Landlock ABI 9, Linux 7.1)",
            ),
            (10, "UDP bind and send (Landlock ABI 10, Linux 7.2)"),
        ];
        gaps.iter()
            .filter(|(abi, _)| self.abi < *abi)
            .map(|(_, what)| (*what).to_owned())
            .collect()
    }

    /// Whether the file system and TCP rules are all enforced (what `--containment strict`
    /// asks of this tier).
    pub(crate) fn strict(self) -> bool {
        self.abi >= 4
    }

    /// Whether Unix sockets on the file system are governed (else a daemon's socket a run's
    /// user may write is reachable).
    pub(super) fn governs_unix_sockets(self) -> bool {
        self.abi >= 9
    }
}

/// What this machine permits, probed once per fixgate process (the context keeps it) and handed
/// to every run through its runner.
pub(crate) struct Host {
    mode: Mode,
    choice: Choice,
    /// Why namespaces are not used (`None` when they are).
    pub(super) no_namespaces: Option<String>,
    /// Why Landlock is not used, when it is not and was tried.
    pub(super) no_landlock: Option<String>,
    pub(super) landlock: Option<Support>,
    /// Runs drop to this uid (root in the Landlock tier).
    pub(super) run_as: Option<(u32, u32)>,
    /// Set once a run kept `CAP_DAC_READ_SEARCH` (something it reads is out of its uid's reach).
    pub(super) kept_read_search: AtomicBool,
    /// Whether this process may hand `CAP_DAC_READ_SEARCH` on (in its permitted and bounding
    /// sets: a container may have dropped it).
    read_search_available: bool,
    /// Set once a run stayed root (without any capability) because what it reads is out of
    /// the unprivileged uid's reach and the capability could not be kept.
    pub(super) stayed_root: AtomicBool,
    /// The credentials of runs, once the first run decided them ([`Host::run_as`]).
    pub(super) decided: std::sync::OnceLock<Option<RunAs>>,
    /// The compiled seccomp filter of the Landlock tier.
    pub(super) filter: Option<Arc<seccompiler::BpfProgram>>,
    /// Daemon sockets the Landlock tier cannot keep runs from (ABI below 9).
    pub(super) reachable_sockets: Vec<PathBuf>,
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
    pub(super) fn bare(env: &Arc<Environment>, choice: Choice, mode: Mode) -> Host {
        Host {
            mode,
            choice,
            no_namespaces: None,
            no_landlock: None,
            landlock: None,
            run_as: None,
            kept_read_search: AtomicBool::new(false),
            read_search_available: super::uid::read_search_available(),
            stayed_root: AtomicBool::new(false),
            decided: std::sync::OnceLock::new(),
            filter: None,
            reachable_sockets: Vec::new(),
            home: env.home.clone(),
            env: env.clone(),
            pid_max_per_namespace: super::sys::kernel_at_least(6, 14),
        }
    }

    /// The containment runs get here.
    pub(crate) fn mode(&self) -> Mode {
        self.mode
    }

    /// Whether sandboxes may live in `/dev/shm`. Not in the Landlock tier: its runs may create
    /// files in `/dev/shm` (for `multiprocessing`), and that grant covers everything below it.
    pub(crate) fn sandboxes_in_ram(&self) -> bool {
        self.mode != Mode::Landlock
    }

    /// The scratch folder runs write beside their sandbox that no mount of their own bounds:
    /// `/dev/shm` under Landlock (the disk watch counts the run's part of it: what runs' uid
    /// may have written).
    pub(crate) fn shared_scratch(&self) -> Option<Scratch<'_>> {
        (self.mode == Mode::Landlock).then(|| Scratch {
            dir: Path::new(SHM),
            writers: Box::new(|| {
                // SAFETY: geteuid has no preconditions.
                let own = unsafe { libc::geteuid() };
                match (self.run_as, self.decided.get()) {
                    (None, _) | (_, Some(None)) => vec![own],
                    (_, Some(Some(dropped))) => vec![dropped.uid],
                    // Not decided yet: runs drop to that uid, or stay fixgate's.
                    (Some((uid, _)), None) => vec![uid, own],
                }
            }),
        })
    }

    /// Whether this process's audits may use the cache other audits read (not when runs are
    /// not contained: a run that can write the cache directory forges what later audits read).
    pub(crate) fn shares_cache(&self) -> bool {
        self.mode != Mode::None
    }

    /// Refuses what the user did not accept: no tier at all (unless `--containment none`), or,
    /// with `--containment strict`, less than namespaces or a fully enforced Landlock. Else
    /// the warning to print, if any.
    pub(crate) fn check(&self) -> Result<Option<String>> {
        match (self.mode, self.choice) {
            (Mode::Namespaces, _) => Ok(None),
            (Mode::None, Choice::None) => Ok(Some(
                "runs are not contained (--containment none): tests can write outside their \
                 sandbox, and this audit uses a private cache and no remote cache"
                    .to_owned(),
            )),
            (Mode::None, _) => {
                let lacks: Vec<String> = self
                    .no_namespaces
                    .iter()
                    .map(|w| format!("namespaces: {w}"))
                    .chain(self.no_landlock.iter().map(|w| format!("Landlock: {w}")))
                    .collect();
                Err(Error::Infra(format!(
                    "runs cannot be contained here ({}); run fixgate on Linux 5.13 or later \
                     with Landlock enabled (most distributions since 2022), or where user and \
                     mount namespaces are permitted; or pass --containment none to run the \
                     tests uncontained, with a private cache",
                    lacks.join("; ")
                )))
            }
            (Mode::Landlock, Choice::Strict) if !self.strict_gaps().is_empty() => {
                Err(Error::Infra(format!(
                    "--containment strict: runs cannot be fully contained here (namespaces: \
                     {}; {}); run fixgate on Linux 6.7 or later (Landlock ABI 4) where no \
                     daemon's socket is the user's to write, or where user and mount \
                     namespaces are permitted, or drop --containment strict",
                    self.no_namespaces.as_deref().unwrap_or("refused"),
                    self.strict_gaps().join("; ")
                )))
            }
            (Mode::Landlock, _) => {
                let unenforced = self.unenforced();
                Ok((!unenforced.is_empty()).then(|| {
                    format!(
                        "runs are contained by Landlock (ABI {}); not enforced on this \
                         machine: {}",
                        self.landlock.map_or(0, |l| l.abi),
                        unenforced.join("; ")
                    )
                }))
            }
        }
    }

    /// What the Landlock tier lacks for `--containment strict`: TCP rules, and any daemon's
    /// socket a run could connect to.
    fn strict_gaps(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(l) = self.landlock.filter(|l| !l.strict()) {
            out.push(format!(
                "Landlock ABI {} does not enforce TCP rules (ABI 4, Linux 6.7)",
                l.abi
            ));
        }
        out.extend(self.reachable_sockets.iter().map(|s| {
            format!(
                "runs can connect to {} (Landlock governs Unix sockets from ABI 9, Linux 7.1)",
                s.display()
            )
        }));
        out
    }

    fn unenforced(&self) -> Vec<String> {
        let mut out: Vec<String> = self.landlock.map(Support::unenforced).unwrap_or_default();
        out.extend(self.reachable_sockets.iter().map(|s| {
            format!(
                "the daemon socket {} is reachable by runs (their user may write it)",
                s.display()
            )
        }));
        out
    }

    /// The report's account of how runs were contained.
    pub(crate) fn containment(&self) -> Containment {
        let mut notes = Vec::new();
        if self.mode != Mode::Namespaces {
            notes.extend(
                self.no_namespaces
                    .iter()
                    .map(|w| format!("namespaces not used: {w}")),
            );
        }
        notes.extend(
            self.no_landlock
                .iter()
                .map(|w| format!("Landlock not used: {w}")),
        );
        if self.mode == Mode::Landlock {
            notes.push(format!(
                "a seccomp filter refuses {}",
                super::seccomp::denied_names().join(", ")
            ));
            if self.kept_read_search.load(Ordering::Relaxed) {
                notes.push(
                    "runs kept CAP_DAC_READ_SEARCH: something they read (the interpreter, the \
                     plugin) is out of uid 65534's reach; Landlock still limits what they read"
                        .to_owned(),
                );
            }
            if self.stayed_root.load(Ordering::Relaxed) {
                notes.push(
                    "runs stayed uid 0 (with no capability): something they read (the \
                     interpreter, the plugin in the cache directory) is out of uid 65534's reach \
                     and this process may not keep CAP_DAC_READ_SEARCH; make them readable by \
                     others (a cache directory outside /root, --cache-dir) to drop the uid"
                        .to_owned(),
                );
            }
        }
        if self.mode == Mode::None {
            notes.push("the audit used a private cache and no remote cache".to_owned());
        }
        Containment {
            tier: self.mode,
            landlock_abi: self.landlock.map(|l| l.abi),
            unenforced: if self.mode == Mode::Landlock {
                self.unenforced()
            } else {
                Vec::new()
            },
            run_as: self
                .run_as
                .filter(|_| !self.stayed_root.load(Ordering::Relaxed))
                .map(|(u, g)| format!("{u}:{g}")),
            notes,
            shared_cache: self.shares_cache(),
        }
    }

    pub(super) fn env(&self) -> &Environment {
        &self.env
    }

    pub(super) fn home(&self) -> Option<&Path> {
        self.home.as_deref()
    }

    pub(super) fn pid_max_per_namespace(&self) -> bool {
        self.pid_max_per_namespace
    }

    pub(super) fn filter(&self) -> Option<&Arc<seccompiler::BpfProgram>> {
        self.filter.as_ref()
    }

    /// The credentials a run of these reads gets (root in the Landlock tier only): `nobody`,
    /// keeping `CAP_DAC_READ_SEARCH` where it must and may; else, where it must and may not,
    /// none (the run stays root, with no capability), and the report says so.
    ///
    /// Decided at the first run and kept: what runs read (the interpreter, the plugin, the
    /// rewritten modules) is the same for every run of a process, and a warm interpreter's
    /// forks must find its sandbox owned as at its start.
    pub(super) fn run_as(&self, reads: &[PathBuf]) -> Option<RunAs> {
        self.run_as?;
        *self.decided.get_or_init(|| {
            let run_as = RunAs::nobody(reads);
            if run_as.read_search && !self.read_search_available {
                self.stayed_root.store(true, Ordering::Relaxed);
                return None;
            }
            if run_as.read_search {
                self.kept_read_search.store(true, Ordering::Relaxed);
            }
            Some(run_as)
        })
    }

    /// The uid and gid the sandbox is handed over to before a run, when runs drop to one.
    pub(super) fn owner(&self) -> Option<(u32, u32)> {
        self.decided
            .get()
            .copied()
            .flatten()
            .map(|r| (r.uid, r.gid))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_an_abi_cannot_enforce_is_said_and_strict_needs_tcp() {
        let old = Support { abi: 3 };
        assert!(!old.strict());
        assert!(old.unenforced().iter().any(|g| g.contains("TCP")));
        let now = Support { abi: 7 };
        assert!(now.strict());
        let gaps = now.unenforced();
        assert!(!gaps.iter().any(|g| g.contains("TCP")), "{gaps:?}");
        assert!(
            gaps.iter().any(|g| g.contains("Unix sockets outside")),
            "{gaps:?}"
        );
        assert!(Support { abi: 10 }.unenforced().is_empty());
    }
}
