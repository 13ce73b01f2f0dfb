//! The process environment is read once, at start: a `FIXGATE_*` knob set to a value fixgate
//! cannot use stops the command before it does anything, with a message that names the variable
//! and says how to fix it; an unknown `FIXGATE_*` name is a warning.

mod common;

use fixgate::exit;

use common::TestRepo;

fn fixgate_with(repo: &TestRepo, vars: &[(&str, &str)], args: &[&str]) -> common::Run {
    let mut cmd = common::fixgate_command();
    cmd.args(args)
        .arg("--cache-dir")
        .arg(repo.cache.path())
        .current_dir(repo.path());
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("fixgate runs");
    common::Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn repo() -> TestRepo {
    let repo = TestRepo::new();
    repo.write("tests/fixtures/db/app.sqlite", "rows");
    repo.commit("base");
    repo
}

#[test]
fn a_bad_fixgate_switch_is_a_usage_error_that_names_it() {
    let repo = repo();
    for (name, value) in [
        ("FIXGATE_FORK", "sometimes"),
        ("FIXGATE_NO_NAMESPACES", "2"),
    ] {
        let r = fixgate_with(&repo, &[(name, value)], &["manifest", "--format", "json"]);
        assert_eq!(r.code, exit::ERROR, "{r:?}");
        assert!(r.stdout.is_empty(), "{r:?}");
        assert!(
            r.stderr
                .contains(&format!("{name}={value} is not a switch; set it to 1 or 0")),
            "{r:?}"
        );
    }
}

#[test]
fn good_switch_values_and_an_unknown_name_still_run() {
    let repo = repo();
    let r = fixgate_with(
        &repo,
        &[
            ("FIXGATE_FORK", "1"),
            ("FIXGATE_NO_NAMESPACES", "true"),
            ("FIXGATE_FROK", "0"),
        ],
        &["manifest", "--format", "json"],
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.json()["files"][0]["path"], "tests/fixtures/db/app.sqlite");
    assert!(
        r.stderr
            .contains("warning: FIXGATE_FROK is not a variable fixgate reads"),
        "{r:?}"
    );
}
