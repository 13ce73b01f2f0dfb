//! `fixgate demo`: a built-in example repository, a patch of the kind agents write, and its
//! audit. The base has a pricing module whose tests share a module-level cart; the head "fixes"
//! the failing tax test by changing its expectation to the polluted value.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::cli::{AuditOptionArgs, DemoArgs, SandboxArgs};
use crate::context::Ctx;
use crate::error::{Error, Result};
use crate::exit;
use crate::pytest::interpreter;
use crate::snapshot::Repo;

const PRICING: &str = r#""""Prices a cart. The cart is module-level state, shared by every caller."""

CART = []
TAX_RATE = 0.25


def add_item(name, price):
    CART.append((name, price))


def clear():
    CART.clear()


def subtotal():
    return sum(price for _, price in CART)


def total_with_tax():
    return round(subtotal() * (1 + TAX_RATE), 2)
"#;

const TESTS_BASE: &str = r#"import pricing


def test_add_book():
    pricing.add_item("book", 10.0)
    assert pricing.subtotal() >= 10.0


def test_tax_on_lamp():
    pricing.add_item("lamp", 20.0)
    assert pricing.total_with_tax() == 25.0


def test_discount_free_cart():
    pricing.clear()
    assert pricing.total_with_tax() == 0
"#;

const CONFTEST: &str = "import os, sys\n\nsys.path.insert(0, os.path.join(os.path.dirname(__file__), \"..\", \"src\"))\n";

pub(crate) fn run(ctx: &Ctx, args: &DemoArgs) -> Result<i32> {
    let tmp;
    let dir: PathBuf = match &args.keep {
        Some(d) => {
            std::fs::create_dir_all(d).map_err(|e| Error::io("create", d, e))?;
            if std::fs::read_dir(d)
                .map(|mut r| r.next().is_some())
                .unwrap_or(false)
            {
                return Err(Error::Usage(format!(
                    "--keep {}: the directory is not empty; name a new or empty one",
                    d.display()
                )));
            }
            d.clone()
        }
        None => {
            tmp = tempfile::Builder::new()
                .prefix("fixgate-demo-")
                .tempdir_in(&ctx.env.temp_dir)
                .map_err(|e| Error::io("create a temporary directory in", &ctx.env.temp_dir, e))?;
            tmp.path().to_path_buf()
        }
    };
    write_repo(&dir)?;
    if !ctx.quiet {
        crate::context::stderr_line(&format!(
            "fixgate demo: the base's tax test fails because another test leaves a book in the \
             shared cart;\nthe head \"fixes\" it by expecting 37.5 (the polluted total) instead \
             of 25.0. Auditing HEAD~1..HEAD in {}",
            dir.display()
        ));
    }
    let python = demo_python(ctx)?;
    let demo_ctx = ctx.on(Repo::open(Some(&dir), ctx.env.cwd.as_deref())?, python);
    let args = AuditOptionArgs {
        seeds: 4,
        seed_list: None,
        strict: false,
        strict_source: false,
        nio: false,
        full: false,
        scoped: false,
        no_cache: false,
        check: false,
        deps: None,
        max_seconds: None,
        max_tests: None,
        max_frozen: None,
        max_new_skips: None,
        max_reruns: None,
        today: None,
        sandbox: SandboxArgs {
            pass_env: Vec::new(),
            test_timeout: 60,
            allow_network: false,
            containment: crate::cli::ContainmentArg::Auto,
            read_paths: Vec::new(),
            memory_limit: None,
            process_limit: None,
            disk_limit: None,
        },
        remote_exec: Default::default(),
    };
    let opts = crate::cmd::audit::options("HEAD~1", &args, Some("HEAD".into()), None, &ctx.env)?;
    let report = crate::engine::audit::audit(&demo_ctx, &opts)?;
    crate::cmd::audit::emit(&demo_ctx, &report)?;
    if !ctx.quiet {
        crate::context::stderr_line(&format!(
            "fixgate demo: verdict {} (exit {} in a real audit); the demo itself exits 0 when the \
             audit completed",
            report.verdict, report.exit_code
        ));
    }
    Ok(exit::PASS)
}

fn write_repo(dir: &Path) -> Result<()> {
    let write = |rel: &str, text: &str| -> Result<()> {
        let p = dir.join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).map_err(|e| Error::io("create", parent, e))?;
        }
        std::fs::write(&p, text).map_err(|e| Error::io("write", &p, e))
    };
    write("src/pricing.py", PRICING)?;
    write("tests/conftest.py", CONFTEST)?;
    write("tests/test_pricing.py", TESTS_BASE)?;
    write("README.md", "A tiny pricing module (fixgate's demo).\n")?;
    git(dir, &["init", "-q", "-b", "main"])?;
    git(dir, &["add", "-A"])?;
    git(
        dir,
        &["commit", "-q", "-m", "pricing: cart, tax and discount"],
    )?;
    write(
        "tests/test_pricing.py",
        &TESTS_BASE.replace(
            "assert pricing.total_with_tax() == 25.0",
            "assert pricing.total_with_tax() == 37.5  # fixed: matches the actual total",
        ),
    )?;
    git(dir, &["commit", "-q", "-a", "-m", "fix test_tax_on_lamp"])?;
    Ok(())
}

/// Runs git on the demo's own repository: none of the user's or the machine's git settings
/// (hooks, signing, advice) apply to it, and what git says is shown only when it fails.
fn git(dir: &Path, args: &[&str]) -> Result<()> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "fixgate demo")
        .env("GIT_AUTHOR_EMAIL", "demo@fixgate.invalid")
        .env("GIT_COMMITTER_NAME", "fixgate demo")
        .env("GIT_COMMITTER_EMAIL", "demo@fixgate.invalid")
        .output()
        .map_err(|e| Error::Infra(format!("failed to run git (is it installed?): {e}")))?;
    if !out.status.success() {
        return Err(Error::Infra(format!(
            "git {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

/// Runs `cmd` (the step `what`) with its output kept off the terminal; when it fails, the error
/// says what failed and what it printed.
fn quietly(cmd: &mut Command, what: &str) -> Result<()> {
    let fix = "install pytest yourself and pass --python";
    let out = cmd
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| Error::Infra(format!("{what} could not start: {e}; {fix}")))?;
    if out.status.success() {
        return Ok(());
    }
    // What it said last: where pip and venv say why.
    let said = match String::from_utf8_lossy(&out.stderr).trim() {
        "" => String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        s => s.to_owned(),
    };
    let lines: Vec<&str> = said.lines().collect();
    let last = lines[lines.len().saturating_sub(20)..].join("\n");
    Err(Error::Infra(format!(
        "{what} failed ({}); {fix}. It said:\n{last}",
        out.status
    )))
}

/// An interpreter with pytest: the usual choice when it has pytest, else a virtualenv in the
/// cache directory made once with `pip install pytest`.
fn demo_python(ctx: &Ctx) -> Result<PathBuf> {
    let chosen = interpreter::choose(ctx.python.as_deref(), &ctx.repo.root, &ctx.env);
    if interpreter::probe(&chosen, None).is_ok() {
        return Ok(chosen);
    }
    let venv = ctx.cache_dir.join("demo-venv");
    let python = venv.join("bin").join("python");
    if interpreter::probe(&python, None).is_ok() {
        return Ok(python);
    }
    if !ctx.quiet {
        crate::context::stderr_line(&format!(
            "fixgate demo: {} has no pytest; creating {} with pytest (once)",
            chosen.display(),
            venv.display()
        ));
    }
    let base = if ctx.python.is_some() {
        chosen.clone()
    } else {
        PathBuf::from("python3")
    };
    quietly(
        Command::new(&base)
            .args(["-m", "venv", "--clear"])
            .arg(&venv),
        &format!(
            "creating a virtualenv with `{} -m venv {}`",
            base.display(),
            venv.display()
        ),
    )?;
    quietly(
        Command::new(&python).args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "pytest",
        ]),
        &format!("`{} -m pip install pytest`", python.display()),
    )?;
    interpreter::probe(&python, None)?;
    Ok(python)
}
