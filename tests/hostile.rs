//! Malformed and hostile inputs: numeric extremes, bad revisions, the parsers' bad files,
//! closed pipes, a missing interpreter, huge outputs and symlink loops. Every one must end in a
//! clear error (exit 2 with a message) or a recorded outcome, never a panic (exit 101).

mod common;

use std::os::fd::{FromRawFd, OwnedFd};
use std::process::{Command, Stdio};

use common::TestRepo;

/// How a case's standard streams are wired.
#[derive(Clone, Copy, PartialEq)]
enum Pipes {
    Captured,
    /// Standard error is a pipe nobody reads (`fixgate ... 2>&1 >report.json | head -1`).
    StderrClosed,
    StdoutClosed,
    BothClosed,
}

struct Case {
    name: &'static str,
    args: Vec<String>,
    /// Acceptable exit codes.
    codes: &'static [i32],
    pipes: Pipes,
}

fn case(name: &'static str, args: &[&str], codes: &'static [i32]) -> Case {
    Case {
        name,
        args: args.iter().map(|s| s.to_string()).collect(),
        codes,
        pipes: Pipes::Captured,
    }
}

/// A pipe whose reading end is already closed: writes to it fail with EPIPE.
fn closed_pipe() -> Stdio {
    let mut fds = [0; 2];
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    unsafe { libc::close(fds[0]) };
    Stdio::from(unsafe { OwnedFd::from_raw_fd(fds[1]) })
}

struct Outcome {
    code: i32,
    stderr: String,
}

fn run_case(repo: &TestRepo, c: &Case) -> Outcome {
    let mut cmd = common::fixgate_command();
    cmd.args(&c.args)
        .arg("--cache-dir")
        .arg(repo.cache.path())
        .current_dir(repo.path())
        .env("NO_COLOR", "1")
        .env("RUST_BACKTRACE", "0");
    if c.pipes != Pipes::Captured {
        // Makes fixgate warn (runs not contained), so that a closed standard error is written to.
        cmd.env("FIXGATE_CONTAINMENT", "none");
    }
    let (out_pipe, err_pipe) = match c.pipes {
        Pipes::Captured => (Stdio::piped(), Stdio::piped()),
        Pipes::StderrClosed => (Stdio::piped(), closed_pipe()),
        Pipes::StdoutClosed => (closed_pipe(), Stdio::piped()),
        Pipes::BothClosed => (closed_pipe(), closed_pipe()),
    };
    let out = cmd
        .stdout(out_pipe)
        .stderr(err_pipe)
        .output()
        .expect("fixgate runs");
    Outcome {
        code: out.status.code().unwrap_or(-1),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn suite_repo() -> TestRepo {
    let repo = TestRepo::new();
    repo.write("pkg/__init__.py", "")
        .write("tests/fixtures/db/a.json", "{}\n")
        .write(
            "tests/test_a.py",
            "def test_a():\n    assert True\n\ndef test_b():\n    assert 1 + 1 == 2\n",
        );
    repo.commit("base");
    repo
}

/// A repository whose base commit holds `file` with `bytes`, for the parsers' bad files.
fn repo_with(file: &str, bytes: &[u8]) -> TestRepo {
    let repo = suite_repo();
    repo.write(file, bytes);
    repo.commit("bad file");
    repo
}

#[test]
fn forty_hostile_inputs_end_in_errors_or_outcomes_never_panics() {
    let py = common::python();
    let py = py.to_str().unwrap();
    let repo = suite_repo();
    let report = repo.cache.path().join("report.json");
    let report_arg = report.to_str().unwrap().to_string();
    let no_pytest = tempfile::tempdir().unwrap();
    let ok = Command::new("python3")
        .args(["-m", "venv", "--without-pip"])
        .arg(no_pytest.path())
        .env("PYTHONNOUSERSITE", "1")
        .status()
        .unwrap()
        .success();
    assert!(
        ok,
        "python3 -m venv failed: the tests need Python 3 with venv"
    );
    let no_pytest_py = no_pytest.path().join("bin/python");
    let no_pytest_py = no_pytest_py.to_str().unwrap();
    let order = repo.cache.path().join("order.txt");
    std::fs::write(&order, "tests/test_a.py::test_nope\n").unwrap();
    let order = order.to_str().unwrap();
    let missing_dir_output = repo.cache.path().join("no/such/dir/report.json");
    let missing_dir_output = missing_dir_output.to_str().unwrap();

    let mut cases = vec![
        // numeric extremes
        case(
            "seeds u64::MAX",
            &["audit", "--base", "HEAD", "--seeds", "18446744073709551615"],
            &[2],
        ),
        case(
            "seeds 2^32",
            &["audit", "--base", "HEAD", "--seeds", "4294967296"],
            &[2],
        ),
        case(
            "seeds 10001",
            &["audit", "--base", "HEAD", "--seeds", "10001"],
            &[2],
        ),
        case(
            "seeds negative",
            &["audit", "--base", "HEAD", "--seeds", "-1"],
            &[2],
        ),
        case("test-timeout 0", &["run", "--test-timeout", "0"], &[2]),
        case(
            "test-timeout beyond a week",
            &["run", "--test-timeout", "604801"],
            &[2],
        ),
        case("jobs 0", &["--jobs", "0", "manifest"], &[2]),
        case(
            "jobs u64::MAX",
            &["--jobs", "18446744073709551615", "manifest"],
            &[2],
        ),
        case(
            "gc max-age u64::MAX",
            &["cache", "gc", "--max-age", "18446744073709551615"],
            &[2],
        ),
        case(
            "gc max-size huge",
            &["cache", "gc", "--max-size", "99999999999999999999999T"],
            &[0],
        ),
        case(
            "gc max-size nan",
            &["cache", "gc", "--max-size", "nanG"],
            &[2],
        ),
        case(
            "run seed u64::MAX",
            &["run", "--seed", "18446744073709551615", "--python", py],
            &[0],
        ),
        case(
            "audit seed-list u64::MAX",
            &[
                "audit",
                "--base",
                "HEAD",
                "--seed-list",
                "18446744073709551615",
                "--python",
                py,
            ],
            &[0],
        ),
        case(
            "max-seconds u64::MAX",
            &[
                "audit",
                "--base",
                "HEAD",
                "--seeds",
                "1",
                "--max-seconds",
                "18446744073709551615",
                "--python",
                py,
            ],
            &[0],
        ),
        // bad revisions
        case("unknown base", &["audit", "--base", "no-such-rev"], &[2]),
        case("unknown delta base", &["delta", "no-such-rev"], &[2]),
        case("revision past the root", &["run", "--rev", "HEAD~99"], &[2]),
        case("empty revision", &["manifest", "--rev", ""], &[2]),
        case(
            "unmatched message search",
            &["audit", "--base", "HEAD", "--head", ":/no commit says this"],
            &[2],
        ),
        case(
            "missing repository",
            &["--repo", "/nonexistent/repo", "manifest"],
            &[2],
        ),
        // the command line's files
        case(
            "order file with unknown ids",
            &["run", "--order", order, "--python", py],
            &[2],
        ),
        case(
            "order file missing",
            &["run", "--order", "/nonexistent/order.txt", "--python", py],
            &[2],
        ),
        case(
            "output in a missing folder",
            &["manifest", "--output", missing_dir_output],
            &[2],
        ),
        // the interpreter
        case(
            "missing interpreter",
            &["run", "--python", "/nonexistent/python3"],
            &[2],
        ),
        case(
            "not an interpreter",
            &["run", "--python", "/bin/true"],
            &[2],
        ),
        case(
            "interpreter without pytest",
            &["run", "--python", no_pytest_py],
            &[2],
        ),
    ];
    // closed pipes: the report still goes to --output and the exit code is the verdict's
    for (name, pipes) in [
        ("audit with standard error closed", Pipes::StderrClosed),
        ("audit with both streams closed", Pipes::BothClosed),
    ] {
        let mut c = case(
            name,
            &[
                "audit",
                "--base",
                "HEAD",
                "--seeds",
                "1",
                "--format",
                "json",
                "--output",
                &report_arg,
                "--python",
                py,
            ],
            &[0],
        );
        c.pipes = pipes;
        cases.push(c);
    }
    let mut c = case(
        "run with standard output closed",
        &["run", "--format", "json", "--python", py],
        &[0],
    );
    c.pipes = Pipes::StdoutClosed;
    cases.push(c);
    let mut c = case(
        "an error with standard error closed",
        &["audit", "--base", "no-such-rev"],
        &[2],
    );
    c.pipes = Pipes::StderrClosed;
    cases.push(c);

    let mut panics = Vec::new();
    let mut wrong = Vec::new();
    let mut count = 0;
    for c in &cases {
        let o = run_case(&repo, c);
        count += 1;
        if o.code == 101 || o.stderr.contains("panicked") {
            panics.push(format!("{}: exit {}\n{}", c.name, o.code, o.stderr));
        } else if !c.codes.contains(&o.code) {
            wrong.push(format!(
                "{}: exit {} (expected {:?})\n{}",
                c.name, o.code, c.codes, o.stderr
            ));
        } else if o.code == 2 && c.pipes == Pipes::Captured && !o.stderr.contains("error") {
            wrong.push(format!("{}: exit 2 without a message", c.name));
        }
        if c.args.contains(&report_arg) {
            let text = std::fs::read_to_string(&report).unwrap_or_default();
            let v: serde_json::Value = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{}: the report is not whole ({e}): {text:?}", c.name));
            assert_eq!(v["verdict"], "pass", "{}", c.name);
            std::fs::remove_file(&report).unwrap();
        }
    }

    // the parsers' bad files, each committed in a repository of its own
    let bad_files: Vec<(&str, &str, &[u8], Vec<&str>)> = vec![
        ("manifest line without a colon", "fixtures.manifest", b"db\n", vec!["manifest"]),
        ("manifest not UTF-8", "fixtures.manifest", b"db: \xff\xfe\n", vec!["manifest"]),
        ("manifest bad glob", "fixtures.manifest", b"db: tests/[\n", vec!["manifest"]),
        ("pyproject not TOML", "pyproject.toml", b"[tool.fixgate\n", vec!["manifest"]),
        ("pyproject groups of the wrong type", "pyproject.toml", b"[tool.fixgate]\ngroups = 3\n", vec!["manifest"]),
        ("lock not JSON", "fixtures.lock", b"{", vec!["lock", "--check"]),
        ("lock of another schema", "fixtures.lock", b"{\"schema\": 99, \"files\": {}}", vec!["lock", "--check"]),
        ("ledger not JSON", ".fixgate/freeze.json", b"{\"t\": ", vec!["audit", "--base", "HEAD", "--seeds", "1"]),
        (
            "ledger with an impossible date",
            ".fixgate/freeze.json",
            b"{\"tests/test_a.py::test_a\": {\"frozen_on\": \"2026-02-30\", \"expires\": \"2026-03-01\", \"owner\": \"a\", \"reason\": \"r\"}}",
            vec!["audit", "--base", "HEAD", "--seeds", "1"],
        ),
    ];
    for (name, file, bytes, args) in &bad_files {
        let r = repo_with(file, bytes);
        let mut args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        args.extend(["--python".to_string(), py.to_string()]);
        let o = run_case(
            &r,
            &Case {
                name,
                args,
                codes: &[2],
                pipes: Pipes::Captured,
            },
        );
        count += 1;
        if o.code == 101 || o.stderr.contains("panicked") {
            panics.push(format!("{name}: exit {}\n{}", o.code, o.stderr));
        } else if o.code != 2 || !o.stderr.contains(file.rsplit('/').next().unwrap()) {
            wrong.push(format!(
                "{name}: exit {} without naming {file}\n{}",
                o.code, o.stderr
            ));
        }
    }

    // recorded outcomes: huge outputs, symlink loops
    let huge = TestRepo::new();
    huge.write(
        "tests/test_huge.py",
        "import os, sys\n\n\
         def test_floods_stdout():\n    sys.stdout.write('x' * (20 << 20))\n\n\
         def test_floods_the_fd():\n    os.write(2, b'y' * (5 << 20))\n\n\
         def test_huge_message():\n    assert 'z' * (1 << 20) == ''\n",
    );
    huge.commit("base");
    let v = huge.fixgate_py(&["run", "--format", "json"]);
    count += 1;
    assert_eq!(v.code, 0, "{}", &v.stderr);
    common::assert_outcomes(
        &v.json(),
        &[
            ("tests/test_huge.py::test_floods_stdout", "passed"),
            ("tests/test_huge.py::test_floods_the_fd", "passed"),
            ("tests/test_huge.py::test_huge_message", "failed"),
        ],
    );

    let loops = TestRepo::new();
    loops.write("tests/test_a.py", "def test_a():\n    pass\n");
    std::fs::create_dir_all(loops.path().join("tests/fixtures/db")).unwrap();
    let link = |target: &str, at: &str| {
        std::os::unix::fs::symlink(target, loops.path().join(at)).unwrap();
    };
    link("b", "tests/fixtures/db/a");
    link("a", "tests/fixtures/db/b");
    link("self", "tests/fixtures/db/self");
    loops.commit("links");
    for args in [
        &["manifest"][..],
        &["run", "--format", "json"],
        &["manifest", "--rev", "HEAD"],
    ] {
        let o = loops.fixgate_py(args);
        count += 1;
        if o.code == 101 || o.stderr.contains("panicked") {
            panics.push(format!("symlink loops {args:?}: {}", o.stderr));
        } else if o.code != 0 {
            wrong.push(format!(
                "symlink loops {args:?}: exit {}\n{}",
                o.code, o.stderr
            ));
        }
    }
    let m = loops.fixgate(&["manifest", "--format", "json"]).json();
    assert!(m.to_string().contains("tests/fixtures/db/self"), "{m}");
    // Links out of the repository are recorded, never followed. (Not run: pytest itself
    // follows a link to `/` while collecting and walks the whole file system.)
    let escape = TestRepo::new();
    std::fs::create_dir_all(escape.path().join("tests/fixtures/db")).unwrap();
    std::os::unix::fs::symlink("/", escape.path().join("tests/fixtures/db/root")).unwrap();
    std::os::unix::fs::symlink("..", escape.path().join("tests/fixtures/db/up")).unwrap();
    escape.write("tests/fixtures/db/a.json", "{}");
    escape.commit("escape");
    for args in [
        &["manifest", "--format", "json"][..],
        &["manifest", "--rev", "HEAD", "--format", "json"],
    ] {
        let o = escape.fixgate(args);
        count += 1;
        if o.code == 101 || o.stderr.contains("panicked") {
            panics.push(format!("escaping links {args:?}: {}", o.stderr));
        } else if o.code != 0
            || !o.stdout.contains("tests/fixtures/db/root")
            || o.stdout.contains("/etc/")
        {
            wrong.push(format!(
                "escaping links {args:?}: exit {}\n{}",
                o.code, o.stderr
            ));
        }
    }

    println!(
        "hostile inputs: {count} cases, {} panics, {} unexpected",
        panics.len(),
        wrong.len()
    );
    assert!(panics.is_empty(), "panics:\n{}", panics.join("\n---\n"));
    assert!(wrong.is_empty(), "unexpected:\n{}", wrong.join("\n---\n"));
    assert!(count >= 40, "{count} cases");
}

/// `fixgate audit ... 2>&1 >report.json | head -1`, as issue 12 reported it: once `head` has its
/// line, standard error is closed; the report must still be whole and the exit code the
/// verdict's.
#[test]
fn regression_a_closed_stderr_pipe_left_an_empty_report_and_exit_101() {
    let repo = suite_repo();
    let py = common::python();
    let script = format!(
        "FIXGATE_CONTAINMENT=none {bin} audit --base HEAD --seeds 1 --format json --cache-dir {cache} --python {py} \
         2>&1 >{cache}/report.json | head -c 0; echo \"${{PIPESTATUS[0]}}\"",
        bin = env!("CARGO_BIN_EXE_fixgate"),
        cache = repo.cache.path().display(),
        py = py.display(),
    );
    let out = Command::new("bash")
        .args(["-c", &script])
        .current_dir(repo.path())
        .output()
        .unwrap();
    let code = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert_eq!(code, "0", "{}", String::from_utf8_lossy(&out.stderr));
    let report = std::fs::read_to_string(repo.cache.path().join("report.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&report).unwrap();
    assert_eq!(v["verdict"], "pass");
    // The run was uncontained, so fixgate did write a warning into the closed pipe.
    assert_eq!(v["containment"], "none");
}
