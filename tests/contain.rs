//! Containment of untrusted test code: writes outside the sandbox are blocked and reported,
//! the repository, the home and the host's processes are out of sight, the environment is
//! clean, and no process a test starts outlives its run, even when fixgate is SIGKILLed.
//! Each test runs in every condition of `common::containment` (namespaces; a container's
//! seccomp profile as root and as an unprivileged user, where Landlock contains the runs) but
//! where it pins what one tier alone does.

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::containment::{Condition, CONTAINED};
use common::{processes_with, tree_bytes, unique, TestRepo};

/// The test interpreter's own executable in this thread's condition.
fn real_python() -> std::path::PathBuf {
    Condition::current().real_python()
}

/// Runs `test` in each condition of [`CONTAINED`], saying which on failure.
fn each_condition(test: impl Fn()) {
    for c in CONTAINED {
        c.run(&test);
    }
}

/// Runs the binary on `repo` with the test interpreter, a given HOME and extra environment, in
/// this thread's condition.
fn fixgate_env(repo: &TestRepo, home: &Path, env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut cmd = common::fixgate_command();
    cmd.args(args)
        .arg("--python")
        .arg(real_python())
        .arg("--cache-dir")
        .arg(repo.cache.path())
        .current_dir(repo.path())
        .env("HOME", home)
        .env("NO_COLOR", "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    Condition::current().configure(&mut cmd, &[repo.path(), repo.cache.path(), home]);
    cmd.output().expect("fixgate runs")
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}): exit {:?}\n{}\n{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn outcome(v: &serde_json::Value, test: &str) -> String {
    v["result"]["tests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["nodeid"].as_str().unwrap().ends_with(test))
        .unwrap_or_else(|| panic!("no {test} in {v}"))["outcome"]
        .as_str()
        .unwrap()
        .to_string()
}

fn outside_writes(v: &serde_json::Value) -> Vec<(String, String)> {
    v["outside_writes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            (
                w["nodeid"].as_str().unwrap_or("").to_string(),
                w["path"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn wait_until(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    cond()
}

/// The outside-write cases of issue 12, one test each: straight to a file, through a shell
/// subprocess, into the user's repository, into the real home, into /tmp.
fn hostile_writes_repo(home: &Path, tmp_target: &Path) -> TestRepo {
    let repo = TestRepo::new();
    let origin = repo.path().display().to_string();
    repo.write("pkg/__init__.py", "VALUE = 1\n").write(
        "tests/test_hostile.py",
        format!(
            "import os, subprocess\n\n\
             def test_direct():\n    open({tmp:?}, 'w').write('x')\n\n\
             def test_subprocess():\n    r = subprocess.run(['sh', '-c', 'echo x > /tmp/{name}.sh'], capture_output=True, text=True)\n    assert r.returncode == 0, r.stderr\n\n\
             def test_user_repo():\n    open(os.path.join({origin:?}, 'pkg', 'INJECTED.py'), 'w').write('x')\n\n\
             def test_real_home():\n    open(os.path.join({home:?}, 'planted'), 'w').write('x')\n\n\
             def test_tmp():\n    open('/tmp/' + os.path.basename({tmp:?}) + '.tmp', 'w').write('x')\n\n\
             def test_own_sandbox_is_writable(tmp_path):\n    (tmp_path / 'ok').write_text('x')\n    open('scratch.txt', 'w').write('x')\n    open(os.path.expanduser('~/dotfile'), 'w').write('x')\n",
            tmp = tmp_target.display().to_string(),
            // Runs get a /tmp of their own, read-only: a shell's write there fails as one to a
            // read-only file system, which is the evidence a subprocess leaves.
            name = tmp_target.file_name().unwrap().to_string_lossy(),
            home = home.display().to_string(),
        ),
    );
    repo.commit("base");
    repo
}

#[test]
fn writes_outside_the_sandbox_are_blocked_and_reported_per_test() {
    each_condition(|| {
        assert_namespaces_permitted();
        let home = tempfile::tempdir().unwrap();
        std::fs::write(home.path().join(".bashrc"), "# mine\n").unwrap();
        let scratch = tempfile::tempdir().unwrap();
        let target = scratch.path().join("evil.txt");
        let repo = hostile_writes_repo(home.path(), &target);
        let tree_before = tree_bytes(repo.path());
        let home_before = tree_bytes(home.path());

        let out = fixgate_env(&repo, home.path(), &[], &["run", "--format", "json"]);
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let v = json(&out);
        assert_eq!(v["containment"], Condition::current().tier(), "{v}");
        for t in [
            "test_direct",
            "test_subprocess",
            "test_user_repo",
            "test_real_home",
            "test_tmp",
        ] {
            assert_eq!(outcome(&v, t), "failed", "{t} must be blocked: {v}");
        }
        assert_eq!(outcome(&v, "test_own_sandbox_is_writable"), "passed", "{v}");

        let writes = outside_writes(&v);
        let reported = |test: &str, path_end: &str| {
            writes
                .iter()
                .any(|(t, p)| t.ends_with(test) && p.ends_with(path_end))
        };
        assert!(reported("test_direct", "evil.txt"), "{writes:?}");
        assert!(reported("test_subprocess", "evil.txt.sh"), "{writes:?}");
        assert!(reported("test_user_repo", "pkg/INJECTED.py"), "{writes:?}");
        assert!(reported("test_real_home", "planted"), "{writes:?}");
        assert!(reported("test_tmp", "evil.txt.tmp"), "{writes:?}");
        assert!(
            !writes.iter().any(|(t, _)| t.ends_with("writable")),
            "{writes:?}"
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("outside its sandbox"), "{stderr}");

        assert_eq!(
            tree_bytes(repo.path()),
            tree_before,
            "the user's tree changed"
        );
        assert_eq!(tree_bytes(home.path()), home_before, "the home changed");
        assert!(!target.exists());
        assert!(!Path::new("/tmp/evil.txt.sh").exists());
        assert!(!Path::new("/tmp")
            .join(format!(
                "{}.tmp",
                target.file_name().unwrap().to_string_lossy()
            ))
            .exists());
    });
}

#[test]
fn tests_see_neither_the_repository_nor_the_home_nor_the_hosts_processes() {
    each_condition(|| {
        assert_namespaces_permitted();
        let home = tempfile::tempdir().unwrap();
        std::fs::write(home.path().join("secret.txt"), "hunter2").unwrap();
        let repo = TestRepo::new();
        let origin = repo.path().display().to_string();
        // Namespaces cover what a run must not see with empty folders and give it a PID namespace;
        // Landlock refuses to list or read them, and lets it inspect no process of the host (the
        // checkout found through /proc/*/cwd included). Runs keep no capability but, under
        // Landlock for root with an interpreter out of uid 65534's reach, CAP_DAC_READ_SEARCH.
        let (hidden, processes, caps, fields) = match Condition::current().tier() {
        "namespaces" => (
            "def hidden(path):\n    return os.listdir(path) == []\n",
            "def test_own_processes():\n    pids = [int(p) for p in os.listdir('/proc') if p.isdigit()]\n    assert max(pids) < 100, pids\n    assert os.getppid() in (1, 2)\n    assert b'fixgate' not in open('/proc/1/cmdline', 'rb').read()\n",
            "0x0",
            "('CapEff', 'CapPrm', 'CapAmb', 'CapBnd')",
        ),
        _ => (
            "def hidden(path):\n    try:\n        os.listdir(path)\n    except PermissionError:\n        return True\n    return False\n",
            "def test_own_processes():\n    seen = []\n    for p in os.listdir('/proc'):\n        if p.isdigit():\n            try:\n                seen.append(os.readlink('/proc/%s/cwd' % p))\n            except OSError:\n                pass\n    assert not [c for c in seen if c.startswith(ORIGIN)], seen\n",
            "0x4",
            // An unprivileged user cannot empty its bounding set; no_new_privs makes it moot.
            "('CapEff', 'CapPrm', 'CapAmb')",
        ),
    };
        repo.write(
        "tests/test_look.py",
        format!(
            "import os\n\nORIGIN = {origin:?}\n\n{hidden}\n\
             def test_repository_hidden():\n    assert hidden({origin:?})\n\n\
             def test_home_hidden():\n    assert hidden({home:?})\n\n\
             {processes}\n\
             def test_proc_sys_read_only():\n    try:\n        open('/proc/sys/kernel/hostname', 'w').write('x')\n    except OSError:\n        return\n    raise AssertionError('wrote /proc/sys')\n\n\
             def test_no_capabilities():\n    status = dict(l.split(':\\t', 1) for l in open('/proc/self/status').read().splitlines() if ':\\t' in l)\n    for field in {fields}:\n        assert int(status[field], 16) & ~{caps} == 0, status\n    assert status['NoNewPrivs'].strip() == '1', status\n",
            home = home.path().display().to_string(),
        ),
    );
        repo.commit("base");
        let out = fixgate_env(&repo, home.path(), &[], &["run", "--format", "json"]);
        let v = json(&out);
        for t in [
            "test_repository_hidden",
            "test_home_hidden",
            "test_own_processes",
            "test_proc_sys_read_only",
            "test_no_capabilities",
        ] {
            assert_eq!(outcome(&v, t), "passed", "{t}: {v}");
        }
    });
}

#[test]
fn tests_see_only_the_documented_environment() {
    each_condition(|| {
        let home = tempfile::tempdir().unwrap();
        let repo = TestRepo::new();
        repo.write(
        "tests/test_env.py",
        "import os, site, sys\n\n\
         def test_interpreter_variables_scrubbed():\n    leaked = sorted(k for k in os.environ if k.startswith('PYTHON') and k not in ('PYTHONPATH', 'PYTHONHASHSEED', 'PYTHONDONTWRITEBYTECODE', 'PYTHONUNBUFFERED', 'PYTHONNOUSERSITE', 'PYTHONBREAKPOINT'))\n    assert leaked == []\n    assert 'PYTEST_ADDOPTS' not in os.environ\n\n\
         def test_user_site_off():\n    assert not site.ENABLE_USER_SITE\n    assert not any('.local' in p for p in sys.path), sys.path\n\n\
         def test_exact_environment():\n    names = set(os.environ) - {'PATH', 'LANG', 'LANGUAGE', 'LC_ALL', 'LC_CTYPE', 'LC_MESSAGES', 'LC_NUMERIC', 'LC_TIME', 'LC_COLLATE'}\n    expected = {'PYTHONPATH', 'HOME', 'TMPDIR', 'TEMP', 'TMP', 'PYTHONHASHSEED', 'PYTHONDONTWRITEBYTECODE', 'PYTHONUNBUFFERED', 'TZ', 'NO_COLOR', 'PYTHONNOUSERSITE', 'PYTHONBREAKPOINT', 'PYTEST_CURRENT_TEST', 'PYTEST_VERSION'}\n    assert names == expected, sorted(names ^ expected)\n\n\
         def test_passed_on_purpose():\n    assert os.environ.get('PYTHONBREAKPOINT') == '0'\n",
    );
        repo.commit("base");
        let hostile = [
            ("PYTHONUSERBASE", "/nonexistent/userbase"),
            ("PYTHONSTARTUP", "/nonexistent/startup.py"),
            ("PYTHONINSPECT", "1"),
            ("PYTHONBREAKPOINT", "0"),
            ("PYTHONWARNINGS", "error"),
            ("PYTHONOPTIMIZE", "2"),
            ("PYTHONSAFEPATH", "1"),
            ("PYTEST_ADDOPTS", "-x"),
            ("PYTEST_PLUGINS", "nonexistent_plugin"),
            ("AWS_SECRET_ACCESS_KEY", "hunter2"),
        ];
        for no_ns in ["", "1"] {
            let mut env = hostile.to_vec();
            env.push(("FIXGATE_NO_NAMESPACES", no_ns));
            let out = fixgate_env(
                &repo,
                home.path(),
                &env,
                &["run", "--format", "json", "--pass-env", "PYTHONBREAKPOINT"],
            );
            let v = json(&out);
            for t in [
                "test_interpreter_variables_scrubbed",
                "test_user_site_off",
                "test_exact_environment",
                "test_passed_on_purpose",
            ] {
                assert_eq!(
                    outcome(&v, t),
                    "passed",
                    "{t} (no namespaces: {no_ns:?}): {v}"
                );
            }
        }
    });
}

/// A suite whose tests leave processes behind: a plain fork, a setsid daemon, a double fork.
fn survivors_repo(marker: &str, hang: bool) -> TestRepo {
    let repo = TestRepo::new();
    let spawn = format!(
        "import os, subprocess, sys, time\n\n\
         def _sleeper():\n    os.execv('/bin/sh', ['/bin/sh', '-c', 'sleep 60; true', {marker:?}])\n\n\
         def test_plain_fork():\n    if os.fork() == 0:\n        _sleeper()\n\n\
         def test_setsid_daemon():\n    subprocess.Popen(['setsid', 'sh', '-c', 'sleep 60; true', {marker:?}], start_new_session=True)\n\n\
         def test_double_fork():\n    if os.fork() == 0:\n        os.setsid()\n        if os.fork() == 0:\n            _sleeper()\n        os._exit(0)\n    time.sleep(0.2)\n"
    );
    let last = if hang {
        "\ndef test_hangs():\n    time.sleep(600)\n"
    } else {
        ""
    };
    repo.write("tests/test_spawn.py", format!("{spawn}{last}"));
    repo.commit("base");
    repo
}

#[test]
fn no_process_a_test_starts_outlives_its_run() {
    each_condition(|| {
        for no_ns in ["", "1"] {
            let marker = unique("fixgate-survivor");
            let repo = survivors_repo(&marker, false);
            let home = tempfile::tempdir().unwrap();
            let out = fixgate_env(
                &repo,
                home.path(),
                &[("FIXGATE_NO_NAMESPACES", no_ns)],
                &["run", "--format", "json"],
            );
            let v = json(&out);
            assert_eq!(outcome(&v, "test_setsid_daemon"), "passed", "{v}");
            let left = processes_with(&marker);
            for pid in &left {
                unsafe { libc::kill(*pid, libc::SIGKILL) };
            }
            assert!(
                left.is_empty(),
                "survivors {left:?} (no namespaces: {no_ns:?})"
            );
        }
    });
}

#[test]
fn a_hanging_test_and_everything_it_started_die_at_the_timeout() {
    each_condition(|| {
        assert_namespaces_permitted();
        let marker = unique("fixgate-hang");
        let repo = survivors_repo(&marker, true);
        let home = tempfile::tempdir().unwrap();
        // The timeout bounds a process outside tests too (its start, its collection): 5 s, not 2,
        // so that a loaded machine's start is not what times out.
        let out = fixgate_env(
            &repo,
            home.path(),
            &[],
            &["run", "--format", "json", "--test-timeout", "5"],
        );
        let v = json(&out);
        assert_eq!(outcome(&v, "test_hangs"), "timeout", "{v}");
        let gone = wait_until(Duration::from_secs(10), || {
            processes_with(&marker).is_empty()
        });
        let left = processes_with(&marker);
        for pid in &left {
            unsafe { libc::kill(*pid, libc::SIGKILL) };
        }
        assert!(gone, "survivors {left:?}");
    });
}

#[test]
fn sigkill_of_fixgate_takes_every_process_of_the_run_with_it() {
    // The PID namespace takes the run with it: the namespaces condition, whatever the suite's.
    Condition::Namespaces.run(|| {
        assert_namespaces_permitted();
        let marker = unique("fixgate-killed");
        let repo = survivors_repo(&marker, true);
        let home = tempfile::tempdir().unwrap();
        // Sandboxes of this test's own: another test's fixgate, sharing /tmp, would otherwise be
        // the next command that finds (and removes) the killed run's sandbox.
        let sandboxes = tempfile::tempdir().unwrap();
        let sandboxes_dir = sandboxes.path().to_str().unwrap();
        let before = tree_bytes(repo.path());
        let mut child = common::fixgate_command()
            .args(["run", "--format", "json", "--python"])
            .arg(real_python())
            .arg("--cache-dir")
            .arg(repo.cache.path())
            .current_dir(repo.path())
            .env("HOME", home.path())
            .env("TMPDIR", sandboxes_dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Where its sandboxes are: under this TMPDIR, or in RAM (/dev/shm) when there is room,
        // which every fixgate of this user shares.
        let uid = unsafe { libc::getuid() };
        let roots = [
            Path::new("/dev/shm").join(format!("fixgate-sandboxes-{uid}")),
            sandboxes.path().join(format!("fixgate-sandboxes-{uid}")),
        ];
        let pid = child.id();
        let left_by_it = || -> Vec<std::path::PathBuf> {
            roots
                .iter()
                .filter_map(|r| std::fs::read_dir(r).ok())
                .flat_map(|rd| rd.flatten())
                .filter(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .starts_with(&format!("{pid}-"))
                })
                .map(|e| e.path())
                .collect()
        };
        // Every survivor kind is running, and the test that hangs holds pytest.
        let started = wait_until(Duration::from_secs(60), || {
            processes_with(&marker).len() >= 3
        });
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        let _ = child.wait();
        assert!(started, "the survivors never started");
        let gone = wait_until(Duration::from_secs(10), || {
            processes_with(&marker).is_empty()
        });
        let left = processes_with(&marker);
        for pid in &left {
            unsafe { libc::kill(*pid, libc::SIGKILL) };
        }
        assert!(gone, "survivors after SIGKILL of fixgate: {left:?}");
        assert_eq!(tree_bytes(repo.path()), before);
        // The next command of any kind removes the killed fixgate's sandbox. In /dev/shm that may
        // be another test's fixgate, running beside this one: only a sandbox under this test's own
        // TMPDIR is sure to be left for this command to remove and say so.
        let private = left_by_it().iter().any(|p| p.starts_with(&roots[1]));
        let out = fixgate_env(
            &repo,
            home.path(),
            &[("TMPDIR", sandboxes_dir)],
            &["manifest"],
        );
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        assert_eq!(left_by_it(), Vec::<std::path::PathBuf>::new(), "{out:?}");
        if private {
            assert!(
                String::from_utf8_lossy(&out.stderr).contains("left by a fixgate that was killed"),
                "{out:?}"
            );
        }
    });
}

/// `fixgate run --format json` on `repo` with the interpreter `py` and the home `home`.
fn run_with(repo: &TestRepo, py: &Path, home: &Path) -> serde_json::Value {
    let mut cmd = common::fixgate_command();
    cmd.args(["run", "--format", "json", "--python"])
        .arg(py)
        .arg("--cache-dir")
        .arg(repo.cache.path())
        .current_dir(repo.path())
        .env("HOME", home);
    Condition::current().configure(&mut cmd, &[repo.path(), repo.cache.path()]);
    json(&cmd.output().unwrap())
}

#[test]
fn regression_a_virtualenv_whose_base_interpreter_is_under_the_hidden_home_still_runs() {
    each_condition(|| {
        assert_namespaces_permitted();
        // The venv's python links to its base interpreter; with the base under the (hidden) home,
        // the link led nowhere and every run failed to start.
        let venv = tempfile::tempdir().unwrap();
        // Any user runs it (an unprivileged condition's fixgate too).
        std::fs::set_permissions(
            venv.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let py = common::private_venv(venv.path());
        let base = Command::new(&py)
            .args(["-c", "import sys; print(sys.base_prefix)"])
            .output()
            .unwrap();
        let base = std::path::PathBuf::from(String::from_utf8(base.stdout).unwrap().trim());
        let home = base.parent().unwrap();
        let repo = TestRepo::new();
        repo.write("tests/test_a.py", "def test_a():\n    pass\n");
        repo.commit("base");
        let v = run_with(&repo, &py, home);
        assert_eq!(v["containment"], Condition::current().tier(), "{v}");
        assert_eq!(outcome(&v, "test_a"), "passed", "{v}");
    });
}

#[test]
fn regression_a_library_folder_under_the_private_tmp_stays_importable() {
    each_condition(|| {
        assert_namespaces_permitted();
        // A venv whose `.pth` adds a folder under /tmp (a checkout under /tmp whose shared venv is
        // there): each run has a private /tmp, which hid the folder, and the import failed.
        let venv = tempfile::tempdir().unwrap();
        let lib = tempfile::Builder::new()
            .prefix("fixgate-lib-")
            .tempdir_in("/tmp")
            .unwrap();
        // Any user reads them (an unprivileged condition's fixgate too).
        for dir in [venv.path(), lib.path()] {
            std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o755))
                .unwrap();
        }
        let py = common::private_venv(venv.path());
        std::fs::write(lib.path().join("extra_lib.py"), "ANSWER = 42\n").unwrap();
        std::fs::write(
            common::purelib(&py).join("extra.pth"),
            format!("{}\n", lib.path().display()),
        )
        .unwrap();
        // Only the library folder comes back: the rest of /tmp stays out of sight.
        let secret = tempfile::Builder::new()
            .prefix("fixgate-secret-")
            .tempdir_in("/tmp")
            .unwrap();
        let key = secret.path().join("key");
        std::fs::write(&key, "s3cret").unwrap();
        let repo = TestRepo::new();
        repo.write(
        "tests/test_a.py",
        format!(
            "import os\nimport extra_lib\n\n\ndef test_a():\n    assert extra_lib.ANSWER == 42\n\n\n\
             def test_the_rest_of_tmp_is_hidden():\n    try:\n        open({:?}).read()\n    except OSError:\n        return\n    raise AssertionError('read the rest of /tmp')\n",
            key.display().to_string()
        ),
    );
        repo.commit("base");
        let v = run_with(
            &repo,
            &py,
            Path::new(&std::env::var_os("HOME").unwrap_or_default()),
        );
        assert_eq!(v["containment"], Condition::current().tier(), "{v}");
        assert_eq!(outcome(&v, "test_a"), "passed", "{v}");
        assert_eq!(
            outcome(&v, "test_the_rest_of_tmp_is_hidden"),
            "passed",
            "{v}"
        );
    });
}

#[test]
fn a_json_module_in_the_checkout_does_not_run_when_fixgate_probes_the_interpreter() {
    // As root, in both tiers (an unprivileged condition could not write the marker's folder:
    // the test would pass whatever ran).
    for condition in [Condition::Namespaces, Condition::ContainerRoot] {
        condition.run(|| {
            // Started in a checkout of the head, `python -c` would import the head's json.py before
            // any sandbox: the probe starts in an empty folder. In the runs it is contained (the write
            // outside the sandbox fails), so the marker appears only if something ran it uncontained.
            let outside = tempfile::tempdir().unwrap();
            let marker = outside.path().join("ran-outside");
            let repo = TestRepo::new();
            repo.write(
                "json.py",
                format!(
                    "try:\n    open({:?}, 'w').write('ran')\nexcept OSError:\n    pass\n\
                     import importlib.machinery, importlib.util, os, sys\n\
                     _here = os.path.dirname(os.path.abspath(__file__))\n\
                     _path = [p for p in sys.path if os.path.abspath(p or '.') != _here]\n\
                     _spec = importlib.machinery.PathFinder.find_spec('json', _path)\n\
                     _real = importlib.util.module_from_spec(_spec)\n\
                     sys.modules['json'] = _real\n\
                     _spec.loader.exec_module(_real)\n",
                    marker.display().to_string()
                ),
            )
            .write("tests/test_a.py", "def test_a():\n    pass\n");
            repo.commit("base");
            let v = run_with(
                &repo,
                &real_python(),
                Path::new(&std::env::var_os("HOME").unwrap_or_default()),
            );
            assert_eq!(v["containment"], Condition::current().tier(), "{v}");
            assert!(
                !marker.exists(),
                "the checkout's json.py ran outside the sandbox"
            );
        });
    }
}

#[test]
fn a_committed_venv_interpreter_is_never_started() {
    // A head that commits .venv/bin/python: fixgate picks `.venv/bin/python` when no
    // --python or VIRTUAL_ENV says otherwise, and starting that would run the head's script
    // outside any sandbox. A committed one is passed over (python3 on PATH instead).
    let outside = tempfile::tempdir().unwrap();
    let marker = outside.path().join("ran-outside");
    let repo = TestRepo::new();
    repo.write(
        ".venv/bin/python",
        format!(
            "#!/bin/sh\necho ran > {:?}\nexec python3 \"$@\"\n",
            marker.display().to_string()
        ),
    )
    .write("tests/test_a.py", "def test_a():\n    pass\n");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        repo.path().join(".venv/bin/python"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    repo.commit("a head with its own interpreter");
    let out = common::fixgate_command()
        .args(["run", "--format", "json", "--cache-dir"])
        .arg(repo.cache.path())
        .current_dir(repo.path())
        .env_remove("VIRTUAL_ENV")
        .output()
        .unwrap();
    assert!(
        !marker.exists(),
        "the committed .venv/bin/python ran: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn without_namespaces_the_next_command_kills_what_a_sigkilled_fixgate_left() {
    // Both commands as root, the first in the Landlock tier (FIXGATE_NO_NAMESPACES): the next may kill what the first left.
    Condition::Namespaces.run(|| {
        let marker = unique("fixgate-fallback-killed");
        let repo = survivors_repo(&marker, true);
        let home = tempfile::tempdir().unwrap();
        let mut child = common::fixgate_command()
            .args(["run", "--format", "json", "--python"])
            .arg(real_python())
            .arg("--cache-dir")
            .arg(repo.cache.path())
            .current_dir(repo.path())
            .env("FIXGATE_NO_NAMESPACES", "1")
            .env("HOME", home.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let started = wait_until(Duration::from_secs(60), || {
            processes_with(&marker).len() >= 3
        });
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        let _ = child.wait();
        assert!(started, "the survivors never started");
        // pytest itself dies with fixgate (a parent-death signal down the chain); daemons that
        // left its process tree are found by the next command, in the killed run's sandbox.
        let out = fixgate_env(
            &repo,
            home.path(),
            &[("FIXGATE_NO_NAMESPACES", "1")],
            &["manifest"],
        );
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let gone = wait_until(Duration::from_secs(10), || {
            processes_with(&marker).is_empty()
        });
        let left = processes_with(&marker);
        for pid in &left {
            unsafe { libc::kill(*pid, libc::SIGKILL) };
        }
        assert!(gone, "survivors after the next command: {left:?}");
    });
}

#[test]
fn uncontained_the_report_says_none_and_outside_writes_are_still_findings() {
    let home = tempfile::tempdir().unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let target = scratch.path().join("fallback.txt");
    let repo = TestRepo::new();
    repo.write(
        "tests/test_w.py",
        format!(
            "def test_writes_outside():\n    open({:?}, 'w').write('x')\n",
            target.display().to_string()
        ),
    );
    repo.commit("base");
    let out = fixgate_env(
        &repo,
        home.path(),
        &[],
        &["run", "--format", "json", "--containment", "none"],
    );
    let _ = std::fs::remove_file(&target);
    let v = json(&out);
    assert_eq!(v["containment"], "none", "{v}");
    assert_eq!(v["containment_detail"]["shared_cache"], false, "{v}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.matches("runs are not contained").count(),
        1,
        "{stderr}"
    );
    // Not blocked here, but a finding all the same.
    assert!(
        outside_writes(&v)
            .iter()
            .any(|(t, p)| t.ends_with("test_writes_outside") && p.ends_with("fallback.txt")),
        "{v}"
    );

    // Where nothing can contain runs (a container whose profile refuses Landlock too), auto
    // and strict refuse, saying what the machine lacks and how to get it.
    for choice in ["auto", "strict"] {
        let refused = Condition::NoTier
            .run(|| fixgate_env(&repo, home.path(), &[], &["run", "--containment", choice]));
        assert_eq!(refused.status.code(), Some(2), "{refused:?}");
        let stderr = String::from_utf8_lossy(&refused.stderr);
        for said in [
            "cannot be contained here",
            "namespaces",
            "Landlock",
            "Linux 5.13",
        ] {
            assert!(stderr.contains(said), "{choice}: {said}: {stderr}");
        }
    }
}

#[test]
fn the_audit_report_names_its_containment() {
    // Namespaces against FIXGATE_NO_NAMESPACES on one machine: the namespaces condition, whatever the suite's.
    Condition::Namespaces.run(|| {
        let home = tempfile::tempdir().unwrap();
        let repo = TestRepo::new();
        repo.write("tests/test_a.py", "def test_a():\n    assert True\n");
        repo.commit("base");
        for (no_ns, expected) in [("", "namespaces"), ("1", "landlock")] {
            let out = fixgate_env(
                &repo,
                home.path(),
                &[("FIXGATE_NO_NAMESPACES", no_ns)],
                &[
                    "audit",
                    "--base",
                    "HEAD",
                    "--seeds",
                    "1",
                    "--format",
                    "json",
                    "--no-cache",
                ],
            );
            let v = json(&out);
            assert_eq!(v["verdict"], "pass", "{v}");
            if no_ns.is_empty() {
                assert_namespaces_permitted();
            }
            assert_eq!(v["containment"], expected, "{v}");
        }
    });
}

/// The machines this project runs on (development and CI, as root) permit namespaces; a test
/// that needs them fails with what to fix rather than passing vacuously.
fn assert_namespaces_permitted() {
    let ok = Command::new("unshare")
        .args(["-Urm", "--pid", "--fork", "true"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "this test needs user, mount and PID namespaces (`unshare -Urm --pid --fork true` \
         failed): run it as root or enable unprivileged user namespaces \
         (sysctl kernel.unprivileged_userns_clone=1 / user.max_user_namespaces)"
    );
}

#[test]
fn an_unprivileged_user_gets_the_same_containment_through_a_user_namespace() {
    assert_namespaces_permitted();
    let python = common::containment::shared_python();
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("secret.txt"), "hunter2").unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let target = scratch.path().join("evil.txt");
    let repo = hostile_writes_repo(home.path(), &target);
    let origin = repo.path().display().to_string();
    repo.write(
        "tests/test_look.py",
        format!(
            "import os\n\n\
             def test_hidden():\n    assert os.listdir({origin:?}) == []\n    assert os.listdir({home:?}) == []\n\n\
             def test_own_pid_namespace():\n    assert os.getppid() in (1, 2)\n\n\
             def test_no_capabilities():\n    assert 'CapEff:\\t0000000000000000' in open('/proc/self/status').read()\n\n\
             def test_unprivileged():\n    assert os.getuid() == {uid}\n",
            home = home.path().display().to_string(),
            uid = match unsafe { libc::geteuid() } {
                0 => 65534,
                uid => uid,
            },
        ),
    );
    repo.commit("look");
    let before = tree_bytes(repo.path());
    let mut cmd = if unsafe { libc::geteuid() } == 0 {
        // Root runs the binary as `nobody`, who must own what it works on.
        for dir in [repo.path(), repo.cache.path(), home.path(), scratch.path()] {
            let ok = Command::new("chown")
                .args(["-R", "65534:65534"])
                .arg(dir)
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "chown failed");
        }
        let mut c = Command::new("setpriv");
        c.args(["--reuid", "65534", "--regid", "65534", "--clear-groups"])
            .arg(env!("CARGO_BIN_EXE_fixgate"));
        c
    } else {
        common::fixgate_command()
    };
    let out = cmd
        .args(["run", "--format", "json", "--python"])
        .arg(&python)
        .arg("--cache-dir")
        .arg(repo.cache.path())
        .current_dir(repo.path())
        .env("HOME", home.path())
        .output()
        .expect("setpriv (util-linux) runs the binary as nobody");
    let v = json(&out);
    assert_eq!(v["containment"], "namespaces", "{v}");
    for t in [
        "test_direct",
        "test_user_repo",
        "test_real_home",
        "test_tmp",
    ] {
        assert_eq!(outcome(&v, t), "failed", "{t} must be blocked: {v}");
    }
    for t in [
        "test_own_sandbox_is_writable",
        "test_hidden",
        "test_own_pid_namespace",
        "test_no_capabilities",
        "test_unprivileged",
    ] {
        assert_eq!(outcome(&v, t), "passed", "{t}: {v}");
    }
    assert!(outside_writes(&v)
        .iter()
        .any(|(t, p)| t.ends_with("test_user_repo") && p.ends_with("pkg/INJECTED.py")));
    assert_eq!(tree_bytes(repo.path()), before);
    assert!(!target.exists());
}

#[test]
fn an_audit_rejects_a_patch_whose_test_writes_outside_its_sandbox() {
    each_condition(|| {
        for no_ns in ["", "1"] {
            let target = std::env::temp_dir().join(unique("fixgate-outside"));
            let repo = TestRepo::new();
            repo.write("tests/test_ok.py", "def test_ok():\n    assert True\n");
            let base = repo.commit("base");
            repo.write(
            "tests/test_sneaky.py",
            format!(
                "def test_sneaky():\n    try:\n        open({:?}, 'w').write('x')\n    except OSError:\n        pass\n",
                target.display().to_string()
            ),
        );
            let head = repo.commit("a test that writes outside");
            let home = tempfile::tempdir().unwrap();
            let out = fixgate_env(
                &repo,
                home.path(),
                &[("FIXGATE_NO_NAMESPACES", no_ns)],
                &[
                    "audit", "--base", &base, "--head", &head, "--seeds", "1", "--format", "json",
                ],
            );
            let v = json(&out);
            let _ = std::fs::remove_file(&target);
            assert_eq!(out.status.code(), Some(1), "{v}");
            let finding = v["findings"]
                .as_array()
                .unwrap()
                .iter()
                .find(|f| f["kind"] == "outside-write")
                .unwrap_or_else(|| panic!("no outside-write finding: {v}"));
            assert_eq!(finding["tests"][0], "tests/test_sneaky.py::test_sneaky");
            assert_eq!(finding["blocking"], true);
            assert!(
                finding["message"]
                    .as_str()
                    .unwrap()
                    .contains(&target.display().to_string()),
                "{finding}"
            );
            assert!(v["reasons"]
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r.as_str().unwrap().starts_with("outside-write")));
        }
    });
}
