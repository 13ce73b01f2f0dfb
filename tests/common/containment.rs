//! The conditions fixgate is contained in where users run it, made by the tests themselves
//! (issue 49). This machine permits namespaces, so a container is imitated as an attacker would
//! find one: a seccomp filter installed before fixgate starts refuses what Docker's default
//! profile refuses to a container without `CAP_SYS_ADMIN` (`unshare`, `clone` with a namespace
//! flag, `clone3` with `ENOSYS` as Docker does so that libc falls back to `clone`, `mount`,
//! `umount2`, `pivot_root`, `setns`), once as root (most containers) and once as an
//! unprivileged user who owns the checkout and the cache (GitHub's hosted runners, uid 1001).
//!
//! `FIXGATE_TEST_CONTAINMENT=namespaces|container-root|container-user|none` runs every test
//! of the suite in one condition (`none`: `FIXGATE_CONTAINMENT=none`); an attack test loops
//! over [`CONTAINED`] itself with [`Condition::run`], which overrides it for its thread.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use seccompiler::{
    SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
};

/// One condition of the suite.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Condition {
    /// This machine as it is: namespaces permitted.
    Namespaces,
    /// A container's seccomp profile, fixgate root.
    ContainerRoot,
    /// A container's seccomp profile, fixgate an unprivileged user ([`USER`]).
    ContainerUser,
    /// `--containment none`, explicitly.
    None,
    /// An older container whose profile refuses Landlock's calls too: no tier at all.
    NoTier,
}

/// The conditions every attack must be blocked in.
pub const CONTAINED: [Condition; 3] = [
    Condition::Namespaces,
    Condition::ContainerRoot,
    Condition::ContainerUser,
];

/// The unprivileged user of [`Condition::ContainerUser`]: GitHub's `runner` is uid 1001.
pub const USER: u32 = 1001;

thread_local!(static OVERRIDE: Cell<Option<Condition>> = const { Cell::new(None) });

impl Condition {
    /// This thread's condition: the one [`Condition::run`] set, else the suite's.
    pub fn current() -> Condition {
        OVERRIDE.with(Cell::get).unwrap_or_else(Condition::suite)
    }

    /// The suite's: `FIXGATE_TEST_CONTAINMENT`, or `FIXGATE_TEST_NO_NAMESPACES=1` as the
    /// container of root, else namespaces.
    pub fn suite() -> Condition {
        match std::env::var("FIXGATE_TEST_CONTAINMENT").as_deref() {
            Ok("container-root") => Condition::ContainerRoot,
            Ok("container-user") => Condition::ContainerUser,
            Ok("none") => Condition::None,
            Ok("namespaces") | Ok("") => Condition::Namespaces,
            Ok(other) => panic!(
                "FIXGATE_TEST_CONTAINMENT={other} is not a condition: write namespaces, \
                 container-root, container-user or none"
            ),
            Err(_) if std::env::var("FIXGATE_TEST_NO_NAMESPACES").as_deref() == Ok("1") => {
                Condition::ContainerRoot
            }
            Err(_) => Condition::Namespaces,
        }
    }

    /// Runs `f` with this condition as the thread's (said on standard error, which a failed
    /// test shows).
    pub fn run<R>(self, f: impl FnOnce() -> R) -> R {
        eprintln!("-- condition: {self:?}");
        let before = OVERRIDE.with(|o| o.replace(Some(self)));
        struct Restore(Option<Condition>);
        impl Drop for Restore {
            fn drop(&mut self) {
                OVERRIDE.with(|o| o.set(self.0));
            }
        }
        let _restore = Restore(before);
        f()
    }

    /// The `containment` a report says in this condition.
    pub fn tier(self) -> &'static str {
        match self {
            Condition::Namespaces => "namespaces",
            Condition::ContainerRoot | Condition::ContainerUser => "landlock",
            Condition::None | Condition::NoTier => "none",
        }
    }

    /// Whether fixgate runs as [`USER`] here.
    pub fn unprivileged(self) -> bool {
        self == Condition::ContainerUser
    }

    /// The interpreter fixgate is given: one the condition's user can run.
    pub fn python(self) -> PathBuf {
        match self.unprivileged() {
            true => shared_python(),
            false => super::python(),
        }
    }

    /// [`Condition::python`]'s own executable, not a wrapper (a pyenv shim adds variables of
    /// its own to the environment tests see).
    pub fn real_python(self) -> PathBuf {
        let out = Command::new(self.python())
            .args(["-c", "import sys; print(sys.executable)"])
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap().trim().into()
    }

    /// Makes `cmd` (the fixgate binary) run in this condition. `owned`: folders its user must
    /// own (the repository, the cache, a home), handed over to it first.
    pub fn configure(self, cmd: &mut Command, owned: &[&Path]) {
        match self {
            Condition::Namespaces => {}
            Condition::None => {
                cmd.env("FIXGATE_CONTAINMENT", "none");
            }
            Condition::ContainerRoot | Condition::NoTier => {
                install_filters(cmd, self == Condition::NoTier);
            }
            Condition::ContainerUser => {
                let home = user_home();
                for dir in owned.iter().copied().chain([home.as_path()]) {
                    chown_tree(dir);
                }
                cmd.uid(USER).gid(USER);
                // A caller that sets a home of its own hands it over itself (in `owned`).
                if !cmd.get_envs().any(|(k, _)| k == "HOME") {
                    cmd.env("HOME", &home);
                }
                install_filters(cmd, false);
            }
        }
    }
}

/// The folder of the repository that holds `cwd` (where `.git` is), else `cwd`.
pub fn repository_of(cwd: &Path) -> PathBuf {
    cwd.ancestors()
        .find(|d| d.join(".git").exists())
        .unwrap_or(cwd)
        .to_path_buf()
}

/// A home of [`USER`]'s own, outside root's.
fn user_home() -> PathBuf {
    let home = std::env::temp_dir().join(format!("fixgate-test-home-{USER}"));
    std::fs::create_dir_all(&home).unwrap();
    home
}

/// Gives `dir` and everything in it to [`USER`] (and lets it through the folders above,
/// which `tempfile` makes 0700).
fn chown_tree(dir: &Path) {
    // Never the project's own checkout (a test's working directory under target/, say): a
    // suite run under this condition must not give the developer's tree to another user. The
    // tests' own scratch folder in it (target/tmp) is theirs to give.
    let project = Path::new(env!("CARGO_MANIFEST_DIR"));
    let scratch = Path::new(env!("CARGO_TARGET_TMPDIR"));
    assert!(
        !project.starts_with(dir) && (!dir.starts_with(project) || dir.starts_with(scratch)),
        "a test asked to give {} to uid {USER}: that is the project's own checkout; hand over \
         the test's repository instead",
        dir.display()
    );
    if !dir.exists() {
        std::fs::create_dir_all(dir).unwrap();
    }
    let ok = Command::new("chown")
        .args(["-R", &format!("{USER}:{USER}")])
        .arg(dir)
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "chown -R {USER} {} failed", dir.display());
}

/// Installs the container's filters in `cmd` before it execs fixgate: `unshare`, `mount`,
/// `umount2`, `pivot_root`, `setns` and `clone` with a namespace flag fail with `EPERM`,
/// `clone3` with `ENOSYS`; with `no_landlock`, Landlock's three calls with `ENOSYS` too.
fn install_filters(cmd: &mut Command, no_landlock: bool) {
    let arch: seccompiler::TargetArch = std::env::consts::ARCH.try_into().unwrap();
    let namespaces: u64 = (libc::CLONE_NEWNS
        | libc::CLONE_NEWUTS
        | libc::CLONE_NEWIPC
        | libc::CLONE_NEWUSER
        | libc::CLONE_NEWPID
        | libc::CLONE_NEWNET
        | libc::CLONE_NEWCGROUP) as u64;
    let mut eperm: BTreeMap<i64, Vec<SeccompRule>> = [
        libc::SYS_unshare,
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_setns,
    ]
    .into_iter()
    .map(|nr| (nr, Vec::new()))
    .collect();
    let flag_rules = (0..64)
        .map(|bit| 1u64 << bit)
        .filter(|f| namespaces & f != 0)
        .map(|f| {
            SeccompRule::new(vec![SeccompCondition::new(
                0,
                SeccompCmpArgLen::Qword,
                SeccompCmpOp::MaskedEq(f),
                f,
            )
            .unwrap()])
            .unwrap()
        })
        .collect();
    eperm.insert(libc::SYS_clone, flag_rules);
    let mut enosys: BTreeMap<i64, Vec<SeccompRule>> =
        [(libc::SYS_clone3, Vec::new())].into_iter().collect();
    if no_landlock {
        for nr in [
            libc::SYS_landlock_create_ruleset,
            libc::SYS_landlock_add_rule,
            libc::SYS_landlock_restrict_self,
        ] {
            enosys.insert(nr, Vec::new());
        }
    }
    let compile = |rules, errno: i32| -> seccompiler::BpfProgram {
        SeccompFilter::new(
            rules,
            SeccompAction::Allow,
            SeccompAction::Errno(errno as u32),
            arch,
        )
        .unwrap()
        .try_into()
        .unwrap()
    };
    let programs = [compile(eperm, libc::EPERM), compile(enosys, libc::ENOSYS)];
    // SAFETY: the closure installs two programs compiled before the fork (two prctl and two
    // seccomp calls, no allocation) in the child, before it execs fixgate.
    unsafe {
        cmd.pre_exec(move || {
            for p in &programs {
                seccompiler::apply_filter(p).map_err(|_| std::io::Error::last_os_error())?;
            }
            Ok(())
        });
    }
}

/// An interpreter with pytest that any user can run: a virtualenv under `target/` made once
/// (under a file lock) from the system's `python3` outside any home (pyenv's Pythons live in
/// `/root`, mode 0700).
pub fn shared_python() -> PathBuf {
    static PYTHON: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PYTHON.get_or_init(make_shared_python).clone()
}

fn make_shared_python() -> PathBuf {
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("..")
        .join("contain-shared-venv");
    let python = venv.join("bin").join("python");
    let has_pytest = super::has_pytest;
    if has_pytest(&python) {
        return python;
    }
    std::fs::create_dir_all(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let lock =
        super::exclusive(&Path::new(env!("CARGO_TARGET_TMPDIR")).join("contain-shared-venv.lock"));
    if !has_pytest(&python) {
        let base = ["/usr/bin/python3", "/usr/local/bin/python3"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .expect(
                "the unprivileged conditions need a python3 in /usr/bin or /usr/local/bin \
                 (apt-get install python3-venv)",
            );
        super::install_venv_from(Path::new(base), &venv, &["pytest>=7.4"]);
    }
    drop(lock);
    python
}
