//! Issue 24: the plugin compatibility matrix (docs/plugins.md). The real plugins from PyPI are
//! installed once, under a lock, into one virtualenv under target/ (they coexist), and every
//! setup is a small repository with an honest head, which must pass, and a head with a real
//! order-dependence bug, which must be rejected with its pair; each setup then checks that the
//! plugin's own behaviour survived (async tests awaited, rows created, snapshots compared, ...)
//! or that fixgate neutralised what it must own, and said so. The venv has every plugin at
//! once, so pytest-randomly, pytest-xdist and pytest-rerunfailures are installed in every setup:
//! each audit also shows that the order stays fixgate's and that the warm interpreter forks.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::audit::test;
use common::{tree_bytes, Run, TestRepo};
use serde_json::Value;

/// The plugins, pinned: the versions the matrix in docs/plugins.md was verified with.
const PLUGINS: &[&str] = &[
    "pytest==9.2.0",
    "pytest-asyncio==1.5.0",
    "pytest-django==4.14.0",
    "Django==5.2.19",
    "hypothesis==6.170.17",
    "pytest-xdist==3.8.0",
    "pytest-randomly==5.1.0",
    "pytest-rerunfailures==16.7",
    "pytest-timeout==2.4.0",
    "pytest-mock==3.17.0",
    "pytest-cov==7.1.0",
    "syrupy==7.0.2",
    "pytest-env==1.8.5",
    "anyio==4.16.0",
    "pytest-benchmark==5.3.1",
    "pytest-bdd==9.0.1",
    "freezegun==1.5.5",
    "responses==0.26.3",
    "requests==2.34.2",
    "pytest-subtests==0.15.0",
    // For the editable install (the venv's own setuptools builds it with bdist_wheel).
    "wheel==0.45.1",
];

/// The venv's interpreter: `target/plugins-venv` with [`PLUGINS`] ([`common::pinned_venv`]).
fn python() -> PathBuf {
    static PYTHON: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PYTHON
        .get_or_init(|| common::pinned_venv("plugins-venv", PLUGINS))
        .clone()
}

/// Runs `python -m pytest ARGS` in the repository with the venv (to write snapshots or a
/// hypothesis database before a commit, as a developer would).
fn pytest_in(repo: &TestRepo, args: &[&str]) -> std::process::Output {
    Command::new(python())
        .args([
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:randomly",
            "-p",
            "no:cacheprovider",
        ])
        .args(args)
        .current_dir(repo.path())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .unwrap()
}

/// A step run on a setup's repository.
type Hook = Box<dyn Fn(&TestRepo)>;

/// One setup of the matrix.
struct Case {
    base: Vec<(&'static str, String)>,
    honest: Vec<(&'static str, String)>,
    buggy: Vec<(&'static str, String)>,
    /// (state-setter, victim) of the buggy head: one of its pairs.
    pair: (&'static str, &'static str),
    /// Run before each commit, with the files written (snapshots, a database).
    prepare: Option<fn(&TestRepo)>,
    /// Run once the base is committed (an install from the checkout).
    after_base: Option<Hook>,
    /// The interpreter (a private venv for the editable install).
    python: Option<PathBuf>,
    /// What the honest head's tests leave changed (test, its `leaks-state:` signals); every
    /// other test leaves nothing, whatever the plugin does around it.
    leaks: Vec<(&'static str, Vec<&'static str>)>,
}

/// What a setup's two audits said.
struct Audited {
    repo: TestRepo,
    honest: Value,
    buggy: Value,
}

fn case(base: &[(&'static str, &str)]) -> Case {
    let mut files: Vec<(&'static str, String)> =
        base.iter().map(|(p, t)| (*p, t.to_string())).collect();
    files.push((
        ".gitignore",
        ".pytest_cache/\n.benchmarks/\n__pycache__/\n*.egg-info/\n".to_owned(),
    ));
    Case {
        base: files,
        honest: Vec::new(),
        buggy: Vec::new(),
        pair: ("", ""),
        prepare: None,
        after_base: None,
        python: None,
        leaks: Vec::new(),
    }
}

impl Case {
    fn honest(mut self, files: &[(&'static str, &str)]) -> Case {
        self.honest = files.iter().map(|(p, t)| (*p, t.to_string())).collect();
        self
    }

    fn buggy(mut self, files: &[(&'static str, &str)], pair: (&'static str, &'static str)) -> Case {
        self.buggy = files.iter().map(|(p, t)| (*p, t.to_string())).collect();
        self.pair = pair;
        self
    }

    /// A test of the honest head that leaves state changed, and what (the part after
    /// `leaks-state:` of its signals).
    fn leaks(mut self, nodeid: &'static str, what: &[&'static str]) -> Case {
        self.leaks.push((nodeid, what.to_vec()));
        self
    }

    fn prepare(mut self, f: fn(&TestRepo)) -> Case {
        self.prepare = Some(f);
        self
    }

    /// Commits base, honest head and buggy head (the buggy head on the honest one), audits
    /// both heads against the base, and checks what every setup must show: the honest head
    /// passes with every test stable, the buggy one is rejected with its pair (in file order
    /// its victim passed: the patch's claim), the warm interpreter forked, and nothing of the
    /// user's tree changed.
    fn run(self) -> Audited {
        let repo = TestRepo::new();
        let commit = |files: &[(&str, String)], message: &str| {
            for (path, text) in files {
                repo.write(path, text);
            }
            if let Some(prepare) = self.prepare {
                prepare(&repo);
            }
            repo.commit(message)
        };
        let base = commit(&self.base, "base");
        if let Some(after_base) = &self.after_base {
            after_base(&repo);
        }
        let honest = commit(&self.honest, "honest head");
        let buggy = commit(&self.buggy, "buggy head");
        let before = tree_bytes(repo.path());
        let python = self.python.clone().unwrap_or_else(python);
        let audit_with = |head: &str, extra: &[&str]| audit_in(&repo, &python, &base, head, extra);
        let audit = |head: &str| audit_with(head, &[]);
        let (run, honest_v) = audit(&honest);
        assert_eq!(
            (run.code, honest_v["verdict"].as_str()),
            (0, Some("pass")),
            "the honest head: {run:?}"
        );
        for t in honest_v["tests"].as_array().unwrap() {
            assert_eq!(t["bucket"], "stable", "{t}");
        }
        let (run, buggy_v) = audit(&buggy);
        assert_eq!(
            (run.code, buggy_v["verdict"].as_str()),
            (1, Some("reject")),
            "the buggy head: {run:?}"
        );
        let pairs: Vec<(&str, &str)> = buggy_v["pairs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    p["polluter"].as_str().unwrap_or_default(),
                    p["victim"].as_str().unwrap(),
                )
            })
            .collect();
        // The bug's pair; a leak (a patch, a frozen clock) may break later tests too, each its
        // own pair.
        assert!(pairs.contains(&self.pair), "{}", buggy_v["pairs"]);
        assert_eq!(
            outcome(&buggy_v, self.pair.1, "0"),
            "passed",
            "the victim is green in file order"
        );
        // Scoped, with every test's code and state recorded under the plugin: the same verdicts,
        // and the bug's pair.
        let (run, honest_scoped) = audit_with(&honest, &["--scoped"]);
        assert_eq!(
            (run.code, honest_scoped["verdict"].as_str()),
            (0, Some("pass")),
            "the honest head, scoped: {run:?}"
        );
        for t in honest_scoped["tests"].as_array().unwrap() {
            let id = t["nodeid"].as_str().unwrap();
            let leaks: Vec<&str> = t["signals"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|s| s.as_str().unwrap().strip_prefix("leaks-state:"))
                .collect();
            let wanted = self
                .leaks
                .iter()
                .find(|(n, _)| *n == id)
                .map_or(Vec::new(), |(_, w)| w.clone());
            assert_eq!(leaks, wanted, "what {id} leaves changed");
        }
        for (id, _) in &self.leaks {
            test(&honest_scoped, id);
        }
        let (run, v) = audit_with(&buggy, &["--scoped"]);
        assert_eq!(
            (run.code, v["verdict"].as_str()),
            (1, Some("reject")),
            "the buggy head, scoped: {run:?}"
        );
        let pair = serde_json::json!([self.pair.0, self.pair.1]);
        assert!(
            v["pairs"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| serde_json::json!([p["polluter"], p["victim"]]) == pair),
            "scoped: {}",
            v["pairs"]
        );
        for v in [&honest_v, &buggy_v] {
            let fs = &v["forkserver"];
            assert_eq!(fs["mode"], "fork", "{fs}");
            // The base-suite replay (a patch that touches the tests) runs with the base's test
            // bytes laid over the head's: those runs start fresh by design. Any other fallback
            // is the fork server failing the plugin.
            let unexpected: Vec<&serde_json::Value> = fs["fallbacks"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|f| {
                    !f.as_str()
                        .is_some_and(|f| f.contains("(replay) start fresh"))
                })
                .collect();
            assert!(unexpected.is_empty(), "{fs}");
        }
        assert_eq!(
            tree_bytes(repo.path()),
            before,
            "the audits changed the user's tree"
        );
        Audited {
            repo,
            honest: honest_v,
            buggy: buggy_v,
        }
    }
}

/// `fixgate audit BASE..HEAD` in file and reversed order with the venv, and EXTRA.
fn audit_in(
    repo: &TestRepo,
    python: &Path,
    base: &str,
    head: &str,
    extra: &[&str],
) -> (Run, Value) {
    let python = python.to_str().unwrap();
    // File and reversed order: each buggy head's victim is red reversed.
    let args = [
        "audit", "--base", base, "--head", head, "--seeds", "0", "--format", "json", "--quiet",
        "--python", python,
    ];
    let run = common::fixgate_at(
        repo.path(),
        repo.cache.path(),
        &[],
        &[&args[..], extra].concat(),
    );
    let v = run.json();
    (run, v)
}

fn outcome(v: &Value, nodeid: &str, label: &str) -> String {
    test(v, nodeid)["outcomes"][label]
        .as_str()
        .unwrap_or_else(|| panic!("{nodeid} has no outcome in order {label}"))
        .to_owned()
}

/// Every test of the report passed in every order.
#[track_caller]
fn all_passed(v: &Value, ids: &[&str]) {
    for id in ids {
        let t = test(v, id);
        for (label, o) in t["outcomes"].as_object().unwrap() {
            assert_eq!(o, "passed", "{id} in order {label}: {t}");
        }
    }
}

fn warned(v: &Value, what: &str) -> bool {
    v["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|w| w.as_str().unwrap().contains(what))
}

/// The module every setup tests: state shared by its callers, the usual source of an order
/// dependence.
const APP: &str = "CART = []\n\n\ndef add(item):\n    CART.append(item)\n    return len(CART)\n";

// ---------------------------------------------------------------------------------------------
// Plugins whose behaviour is honoured
// ---------------------------------------------------------------------------------------------

#[test]
fn pytest_asyncio_in_auto_mode_awaits_every_test() {
    let a = case(&[
        ("pytest.ini", "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n"),
        ("app.py", APP),
        (
            "tests/test_async.py",
            "import asyncio\n\nimport app\n\n\nasync def double(x):\n    await asyncio.sleep(0)\n    return 2 * x\n\n\n\
             async def test_double():\n    assert asyncio.get_running_loop() is not None\n    assert await double(2) == 4\n",
        ),
    ])
    .honest(&[(
        "tests/test_gather.py",
        "import asyncio\n\nfrom tests.test_async import double\n\n\n\
         async def test_gather():\n    assert await asyncio.gather(double(1), double(2)) == [2, 4]\n",
    )])
    .buggy(
        &[(
            "tests/test_cart.py",
            "import app\nfrom tests.test_async import double\n\n\n\
             async def test_fill():\n    app.add(await double(1))\n\n\n\
             async def test_cart_has_two():\n    assert app.CART == [2]\n",
        )],
        ("tests/test_cart.py::test_fill", "tests/test_cart.py::test_cart_has_two"),
    )
    .run();
    // Awaited: under plain pytest an async test without the plugin fails.
    all_passed(
        &a.honest,
        &[
            "tests/test_async.py::test_double",
            "tests/test_gather.py::test_gather",
        ],
    );
}

const DJANGO_SETTINGS: &str = "SECRET_KEY = 'test'\nINSTALLED_APPS = ['shop']\n\
    DATABASES = {'default': {'ENGINE': 'django.db.backends.sqlite3', 'NAME': ':memory:'}}\n\
    DEFAULT_AUTO_FIELD = 'django.db.models.AutoField'\nUSE_TZ = True\n";

#[test]
fn pytest_django_creates_rows_of_a_real_model_in_memory() {
    let a = case(&[
        ("pytest.ini", "[pytest]\nDJANGO_SETTINGS_MODULE = proj.settings\npythonpath = .\n"),
        ("proj/__init__.py", ""),
        ("proj/settings.py", DJANGO_SETTINGS),
        ("shop/__init__.py", ""),
        (
            "shop/models.py",
            "from django.db import models\n\n\nclass Item(models.Model):\n    name = models.CharField(max_length=20)\n",
        ),
        (
            "shop/lookup.py",
            "from shop.models import Item\n\n_CACHE = {}\n\n\ndef named(name):\n    \
             if name not in _CACHE:\n        item = Item.objects.filter(name=name).first()\n        \
             if item is None:\n            return None\n        _CACHE[name] = item\n    \
             return _CACHE[name]\n",
        ),
        (
            "tests/test_items.py",
            "import pytest\n\nfrom shop.models import Item\n\n\n@pytest.mark.django_db\n\
             def test_create():\n    Item.objects.create(name='a')\n    assert Item.objects.count() == 1\n",
        ),
    ])
    .honest(&[(
        "tests/test_more.py",
        "import pytest\n\nfrom shop.models import Item\n\n\n@pytest.mark.django_db\n\
         def test_rows_roll_back():\n    assert Item.objects.count() == 0\n    \
         Item.objects.bulk_create([Item(name='b'), Item(name='c')])\n    \
         assert sorted(Item.objects.values_list('name', flat=True)) == ['b', 'c']\n",
    )])
    .buggy(
        &[(
            "tests/test_lookup.py",
            "import pytest\n\nfrom shop import lookup\nfrom shop.models import Item\n\n\n\
             @pytest.mark.django_db\ndef test_find():\n    Item.objects.create(name='x')\n    \
             assert lookup.named('x') is not None\n\n\n\
             @pytest.mark.django_db\ndef test_found_again():\n    assert lookup.named('x') is not None\n",
        )],
        ("tests/test_lookup.py::test_find", "tests/test_lookup.py::test_found_again"),
    )
    .run();
    all_passed(
        &a.honest,
        &[
            "tests/test_items.py::test_create",
            "tests/test_more.py::test_rows_roll_back",
        ],
    );
}

/// The victim fails for large `n` until the setter ran; once it has, it fails only for exactly
/// LIMIT, which generation never draws (3**17 is no literal of the source) and only a replayed
/// database example can give: a failing order saves LIMIT, so a database that leaked into
/// another order's run would turn the file order red and break the pair.
const HYPOTHESIS_TESTS: &str = "from hypothesis import HealthCheck, given, settings, strategies as st\n\
from hypothesis.database import DirectoryBasedExampleDatabase\n\nimport app\n\n\
LIMIT = 3 ** 17\n\
# The database named, so that hypothesis's CI profile (CI=true) does not turn it off.\n\
SLOW = settings(deadline=None, max_examples=60, suppress_health_check=list(HealthCheck),\n    \
database=DirectoryBasedExampleDatabase('.hypothesis/examples'))\n\n\n\
@SLOW\n@given(st.lists(st.integers()))\ndef test_sorted_is_idempotent(xs):\n    assert sorted(sorted(xs)) == sorted(xs)\n";

const HYPOTHESIS_BUGGY: &str = "from hypothesis import given, strategies as st\n\nimport app\nfrom tests.test_props import LIMIT, SLOW\n\n\n\
def test_ready():\n    app.add('ready')\n\n\n\
@SLOW\n@given(st.integers(min_value=0, max_value=2 ** 40))\ndef test_below_limit_once_ready(n):\n    \
if app.CART:\n        assert n != LIMIT\n    else:\n        assert n < LIMIT\n";

fn hypothesis_case() -> Case {
    case(&[("app.py", APP), ("tests/__init__.py", ""), ("tests/test_props.py", HYPOTHESIS_TESTS)])
        .honest(&[(
            "tests/test_more_props.py",
            "from hypothesis import given, strategies as st\n\nfrom tests.test_props import SLOW\n\n\n\
             @SLOW\n@given(st.text())\ndef test_strip_is_idempotent(s):\n    assert s.strip().strip() == s.strip()\n",
        )])
        .buggy(
            &[("tests/test_ready.py", HYPOTHESIS_BUGGY)],
            ("tests/test_ready.py::test_ready", "tests/test_ready.py::test_below_limit_once_ready"),
        )
}

#[test]
fn hypothesis_without_a_database_runs_its_examples_and_saves_nothing_across_orders() {
    // What Hypothesis and its plugin keep around every test (its time in garbage collection,
    // its flags) is no test's state: nothing leaks (Case::run), and the scope is not made
    // whole for it.
    let a = hypothesis_case().run();
    all_passed(
        &a.honest,
        &["tests/test_props.py::test_sorted_is_idempotent"],
    );
    assert!(!a.repo.path().join(".hypothesis").exists());
}

#[test]
fn hypothesis_with_a_committed_database_reads_it_and_never_leaks_between_orders() {
    // The database a developer committed: the failing example of a parser bug, since fixed.
    let a = hypothesis_case()
        .prepare(|repo| {
            if repo.path().join(".hypothesis").exists() {
                return;
            }
            repo.write("parsing.py", "def parse(s):\n    return int(s) if len(s) < 3 else 0\n")
                .write(
                    "tests/test_parse.py",
                    "from hypothesis import given, strategies as st\n\nimport parsing\nfrom tests.test_props import SLOW\n\n\n\
                     @SLOW\n@given(st.integers(min_value=0, max_value=10 ** 6))\ndef test_round_trip(n):\n    \
                     assert parsing.parse(str(n)) == n\n",
                );
            let out = pytest_in(repo, &["tests/test_parse.py"]);
            let said = String::from_utf8_lossy(&out.stdout).into_owned();
            assert!(said.contains("1 failed"), "the parser bug is found: {said}");
            repo.write("parsing.py", "def parse(s):\n    return int(s)\n");
            assert!(
                repo.path().join(".hypothesis/examples").is_dir(),
                "a database was saved: {said}"
            );
        })
        .run();
    all_passed(&a.honest, &["tests/test_parse.py::test_round_trip"]);
}

#[test]
fn pytest_timeout_is_honoured() {
    let a = case(&[
        (
            "pytest.ini",
            "[pytest]\ntimeout = 60\naddopts = --strict-markers\n",
        ),
        ("app.py", APP),
        (
            "tests/test_t.py",
            // The timer armed for the test (the signal method): the marker's, and the ini's.
            "import signal\n\nimport pytest\n\n\n@pytest.mark.timeout(30)\ndef test_marked(request):\n    \
             assert request.config.getini('timeout') == '60'\n    \
             assert 0 < signal.getitimer(signal.ITIMER_REAL)[0] <= 30\n\n\n\
             def test_ini_timeout():\n    assert 30 < signal.getitimer(signal.ITIMER_REAL)[0] <= 60\n",
        ),
    ])
    .honest(&[("tests/test_u.py", "def test_quick():\n    assert True\n")])
    .buggy(&[("tests/test_cart.py", SETTER_VICTIM)], SV)
    .run();
    all_passed(
        &a.honest,
        &[
            "tests/test_t.py::test_marked",
            "tests/test_t.py::test_ini_timeout",
        ],
    );
}

/// The plain pair most setups use for their buggy head: the victim needs what the setter left.
const SETTER_VICTIM: &str = "import app\n\n\ndef test_fill():\n    app.add('book')\n\n\n\
def test_cart_holds_the_book():\n    assert app.CART == ['book']\n";
const SV: (&str, &str) = (
    "tests/test_cart.py::test_fill",
    "tests/test_cart.py::test_cart_holds_the_book",
);

#[test]
fn pytest_mock_undoes_its_patches_and_a_leaked_patch_is_found() {
    let greet = "import time\n\n\ndef now():\n    return time.strftime('%Y')\n\n\ndef greeting():\n    return 'hello ' + now()\n";
    let a = case(&[
        ("greet.py", greet),
        (
            "tests/test_greet.py",
            "import greet\n\n\ndef test_patched(mocker):\n    m = mocker.patch('greet.now', return_value='fake')\n    \
             assert greet.greeting() == 'hello fake'\n    m.assert_called_once()\n",
        ),
    ])
    .honest(&[(
        "tests/test_real.py",
        "import greet\n\n\ndef test_real():\n    assert greet.greeting() != 'hello fake'\n",
    )])
    .buggy(
        &[(
            "tests/test_leak.py",
            "from unittest import mock\n\nimport greet\n\n\ndef test_patch_and_forget():\n    \
             mock.patch('greet.now', return_value='fake').start()\n\n\n\
             def test_greets_fake():\n    assert greet.greeting() == 'hello fake'\n",
        )],
        ("tests/test_leak.py::test_patch_and_forget", "tests/test_leak.py::test_greets_fake"),
    )
    .run();
    all_passed(
        &a.honest,
        &[
            "tests/test_greet.py::test_patched",
            "tests/test_real.py::test_real",
        ],
    );
}

#[test]
fn syrupy_snapshots_are_compared() {
    let a = case(&[
        ("app.py", APP),
        (
            "tests/test_snap.py",
            "def test_render(snapshot):\n    assert {'items': [1, 2]} == snapshot\n",
        ),
    ])
    .honest(&[(
        "tests/test_snap2.py",
        "def test_render_text(snapshot):\n    assert 'hello' == snapshot\n",
    )])
    .buggy(
        &[(
            "tests/test_snapcart.py",
            "import app\n\n\ndef test_fill():\n    app.add('book')\n\n\n\
             def test_cart_snapshot(snapshot):\n    assert app.CART == snapshot\n",
        )],
        (
            "tests/test_snapcart.py::test_fill",
            "tests/test_snapcart.py::test_cart_snapshot",
        ),
    )
    // The snapshots, written as a developer does: in file order.
    .prepare(|repo| {
        let out = pytest_in(repo, &["--snapshot-update"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
    })
    .run();
    // The victim fails in reversed order only because its snapshot (['book']) is compared.
    let victim = test(&a.buggy, "tests/test_snapcart.py::test_cart_snapshot");
    assert_eq!(victim["outcomes"]["rev"], "failed", "{victim}");
    assert!(a
        .repo
        .path()
        .join("tests/__snapshots__/test_snapcart.ambr")
        .exists());
}

#[test]
fn pytest_env_sets_its_variables() {
    let a = case(&[
        ("pytest.ini", "[pytest]\nenv =\n    APP_MODE=test\n"),
        ("app.py", APP),
        (
            "tests/test_env.py",
            "import os\n\n\ndef test_mode():\n    assert os.environ['APP_MODE'] == 'test'\n",
        ),
    ])
    .honest(&[(
        "tests/test_env2.py",
        "import os\n\n\ndef test_mode_again():\n    assert os.environ.get('APP_MODE') == 'test'\n",
    )])
    .buggy(
        &[(
            "tests/test_token.py",
            "import os\n\n\ndef test_login():\n    os.environ['APP_TOKEN'] = 'secret'\n\n\n\
             def test_uses_token():\n    assert os.environ.get('APP_TOKEN') == 'secret'\n",
        )],
        (
            "tests/test_token.py::test_login",
            "tests/test_token.py::test_uses_token",
        ),
    )
    .run();
    all_passed(
        &a.honest,
        &[
            "tests/test_env.py::test_mode",
            "tests/test_env2.py::test_mode_again",
        ],
    );
}

#[test]
fn anyio_tests_run_on_their_backend() {
    let a = case(&[
        ("app.py", APP),
        ("tests/conftest.py", "import pytest\n\n\n@pytest.fixture\ndef anyio_backend():\n    return 'asyncio'\n"),
        (
            "tests/test_io.py",
            "import anyio\nimport pytest\n\n\n@pytest.mark.anyio\nasync def test_sleep():\n    \
             await anyio.sleep(0)\n    assert anyio.get_current_task() is not None\n",
        ),
    ])
    .honest(&[(
        "tests/test_io2.py",
        "import anyio\nimport pytest\n\n\n@pytest.mark.anyio\nasync def test_task_group():\n    \
         out = []\n    async with anyio.create_task_group() as tg:\n        tg.start_soon(anyio.sleep, 0)\n    \
         out.append(1)\n    assert out == [1]\n",
    )])
    .buggy(
        &[(
            "tests/test_cart.py",
            "import anyio\nimport pytest\n\nimport app\n\n\n@pytest.mark.anyio\nasync def test_fill():\n    \
             await anyio.sleep(0)\n    app.add('book')\n\n\n@pytest.mark.anyio\n\
             async def test_cart_holds_the_book():\n    assert app.CART == ['book']\n",
        )],
        SV,
    )
    .run();
    all_passed(
        &a.honest,
        &[
            "tests/test_io.py::test_sleep",
            "tests/test_io2.py::test_task_group",
        ],
    );
}

#[test]
fn pytest_benchmark_measures_its_functions() {
    let a = case(&[
        (
            "pytest.ini",
            "[pytest]\naddopts = --benchmark-min-rounds=1 --benchmark-max-time=0.000001 --benchmark-warmup=off\n",
        ),
        ("app.py", APP),
        (
            "tests/test_bench.py",
            "def double(x):\n    return 2 * x\n\n\ndef test_double(benchmark):\n    \
             assert benchmark(double, 21) == 42\n    assert benchmark.stats['rounds'] >= 1\n",
        ),
    ])
    .honest(&[("tests/test_bench2.py", "def test_sum(benchmark):\n    assert benchmark(sum, [1, 2]) == 3\n")])
    .buggy(&[("tests/test_cart.py", SETTER_VICTIM)], SV)
    .run();
    all_passed(&a.honest, &["tests/test_bench.py::test_double"]);
}

#[test]
fn pytest_bdd_scenarios_run_their_steps() {
    let feature = "Feature: Cart\n  Scenario: Add a book\n    Given an empty cart\n    When I add a book\n    Then the cart holds 1 item\n";
    let steps = "from pytest_bdd import given, parsers, scenarios, then, when\n\nimport app\n\nscenarios('cart.feature')\n\n\n\
@given('an empty cart')\ndef empty():\n    app.CART.clear()\n\n\n@when('I add a book')\ndef add():\n    app.add('book')\n\n\n\
@then(parsers.parse('the cart holds {n:d} item'))\ndef holds(n):\n    assert len(app.CART) == n\n\n\n\
@then('the cart holds the book')\ndef holds_the_book():\n    assert app.CART == ['book']\n";
    // The victim asks for the book the first scenario added (not for one item, which the honest
    // head's plain test also leaves when it runs first, in reversed order).
    let buggy_feature = "Feature: Cart\n  Scenario: Add a book\n    Given an empty cart\n    When I add a book\n    Then the cart holds 1 item\n\n  \
Scenario: The book is still there\n    Then the cart holds the book\n";
    let a = case(&[("app.py", APP), ("tests/cart.feature", feature), ("tests/test_cart.py", steps)])
        .honest(&[(
            "tests/test_plain.py",
            "import app\n\n\ndef test_add_returns_the_count():\n    app.CART.clear()\n    assert app.add('x') == 1\n",
        )])
        .leaks("tests/test_cart.py::test_add_a_book", &["global:app.py:CART"])
        .leaks("tests/test_plain.py::test_add_returns_the_count", &["global:app.py:CART"])
        .buggy(
            &[("tests/cart.feature", buggy_feature)],
            ("tests/test_cart.py::test_add_a_book", "tests/test_cart.py::test_the_book_is_still_there"),
        )
        .run();
    all_passed(&a.honest, &["tests/test_cart.py::test_add_a_book"]);
}

#[test]
fn freezegun_freezes_time_and_a_leaked_freeze_is_found() {
    let clock = "import datetime\n\n\ndef year():\n    return datetime.date.today().year\n";
    let a = case(&[
        ("clock.py", clock),
        (
            "tests/test_clock.py",
            "from freezegun import freeze_time\n\nimport clock\n\n\n@freeze_time('2020-02-29')\n\
             def test_frozen():\n    assert clock.year() == 2020\n",
        ),
    ])
    .honest(&[("tests/test_now.py", "import clock\n\n\ndef test_now():\n    assert clock.year() > 2020\n")])
    .buggy(
        &[(
            "tests/test_leak.py",
            "from freezegun import freeze_time\n\nimport clock\n\n\ndef test_freeze_and_forget():\n    \
             freeze_time('2020-02-29').start()\n\n\ndef test_leap_year():\n    assert clock.year() == 2020\n",
        )],
        ("tests/test_leak.py::test_freeze_and_forget", "tests/test_leak.py::test_leap_year"),
    )
    .run();
    all_passed(
        &a.honest,
        &[
            "tests/test_clock.py::test_frozen",
            "tests/test_now.py::test_now",
        ],
    );
}

#[test]
fn responses_mocks_http_and_a_leaked_mock_is_found() {
    let client = "import requests\n\n\ndef price():\n    return requests.get('http://prices.example/book').json()['price']\n";
    let a = case(&[
        ("client.py", client),
        (
            "tests/test_client.py",
            "import responses\n\nimport client\n\n\n@responses.activate\ndef test_price():\n    \
             responses.get('http://prices.example/book', json={'price': 12})\n    assert client.price() == 12\n",
        ),
    ])
    .honest(&[(
        "tests/test_client2.py",
        "import responses\n\nimport client\n\n\ndef test_price_in_context():\n    \
         with responses.RequestsMock() as r:\n        r.get('http://prices.example/book', json={'price': 3})\n        \
         assert client.price() == 3\n",
    )])
    .buggy(
        &[(
            "tests/test_leak.py",
            "import responses\n\nimport client\n\n\ndef test_mock_and_forget():\n    responses.start()\n    \
             responses.get('http://prices.example/book', json={'price': 7})\n\n\n\
             def test_price_is_seven():\n    assert client.price() == 7\n",
        )],
        ("tests/test_leak.py::test_mock_and_forget", "tests/test_leak.py::test_price_is_seven"),
    )
    .run();
    all_passed(&a.honest, &["tests/test_client.py::test_price"]);
}

#[test]
fn unittest_subtests_and_pytest_subtests_report_every_failing_subtest() {
    let a = case(&[
        ("app.py", APP),
        (
            "tests/test_sub.py",
            "import unittest\n\n\nclass TestSquares(unittest.TestCase):\n    def test_squares(self):\n        \
             for i in range(3):\n            with self.subTest(i=i):\n                self.assertEqual(i * i, i ** 2)\n\n\n\
             def test_fixture(subtests):\n    for i in range(3):\n        with subtests.test(i=i):\n            assert i >= 0\n",
        ),
    ])
    .honest(&[("tests/test_sub2.py", "def test_plain():\n    assert True\n")])
    .buggy(
        &[(
            "tests/test_cart.py",
            "import unittest\n\nimport app\n\n\nclass TestCart(unittest.TestCase):\n    def test_a_fill(self):\n        \
             app.add('book')\n\n    def test_b_each_item(self):\n        for i, item in enumerate(['book']):\n            \
             with self.subTest(i=i):\n                self.assertEqual(app.CART[i:i + 1], [item])\n",
        )],
        ("tests/test_cart.py::TestCart::test_a_fill", "tests/test_cart.py::TestCart::test_b_each_item"),
    )
    .run();
    all_passed(
        &a.honest,
        &[
            "tests/test_sub.py::TestSquares::test_squares",
            "tests/test_sub.py::test_fixture",
        ],
    );
    // The victim's only failure is a subtest's: it is the test's failure.
    let victim = test(&a.buggy, "tests/test_cart.py::TestCart::test_b_each_item");
    assert_eq!(victim["outcomes"]["rev"], "failed", "{victim}");
}

#[test]
fn doctest_modules_run_as_tests() {
    let zcart = "import app\n\n\ndef total():\n    \"\"\"The cart's size.\n\n    >>> total() >= 0\n    True\n    \"\"\"\n    return len(app.CART)\n";
    let buggy_zcart = "import app\n\n\ndef total():\n    \"\"\"The cart's size.\n\n    >>> total()\n    1\n    \"\"\"\n    return len(app.CART)\n";
    let a = case(&[
        ("pytest.ini", "[pytest]\naddopts = --doctest-modules\n"),
        ("app.py", APP),
        (
            "tests/test_fill.py",
            "import app\n\n\ndef test_fill():\n    app.add('book')\n",
        ),
        ("zcart.py", zcart),
    ])
    .honest(&[(
        "zmore.py",
        "def double(x):\n    \"\"\"\n    >>> double(2)\n    4\n    \"\"\"\n    return 2 * x\n",
    )])
    .leaks("tests/test_fill.py::test_fill", &["global:app.py:CART"])
    .buggy(
        &[("zcart.py", buggy_zcart)],
        ("tests/test_fill.py::test_fill", "zcart.py::zcart.total"),
    )
    .run();
    all_passed(
        &a.honest,
        &["zcart.py::zcart.total", "zmore.py::zmore.double"],
    );
}

#[test]
fn tox_ini_only_configuration_is_read() {
    config_only_case("tox.ini", "[pytest]");
}

#[test]
fn setup_cfg_only_configuration_is_read() {
    config_only_case("setup.cfg", "[tool:pytest]");
}

/// A repository configured only by `file`: its markers under --strict-markers and testpaths.
fn config_only_case(file: &'static str, section: &str) {
    let config = format!("{section}\ntestpaths = tests\naddopts = --strict-markers\nmarkers =\n    slow: slow tests\n");
    let a = case(&[
        (file, &config),
        ("app.py", APP),
        (
            "tests/test_slow.py",
            "import pytest\n\n\n@pytest.mark.slow\ndef test_slow():\n    assert True\n",
        ),
        // Outside testpaths: never collected.
        (
            "other/test_elsewhere.py",
            "def test_elsewhere():\n    assert False\n",
        ),
    ])
    .honest(&[(
        "tests/test_more.py",
        "import pytest\n\n\n@pytest.mark.slow\ndef test_more():\n    assert True\n",
    )])
    .buggy(&[("tests/test_cart.py", SETTER_VICTIM)], SV)
    .run();
    all_passed(
        &a.honest,
        &[
            "tests/test_slow.py::test_slow",
            "tests/test_more.py::test_more",
        ],
    );
    let ids: Vec<&str> = a.honest["tests"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["nodeid"].as_str())
        .collect();
    assert!(!ids.iter().any(|i| i.starts_with("other/")), "{ids:?}");
}

#[test]
fn a_src_layout_with_an_editable_install_tests_the_snapshot() {
    // A private venv that sees the plugins and has the package installed editable from the
    // user's checkout, as a developer's does.
    let dir = tempfile::tempdir().unwrap();
    let venv = dir.path().join("venv");
    let site = Command::new(python())
        .args([
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        ])
        .output()
        .unwrap();
    let site = String::from_utf8(site.stdout).unwrap().trim().to_owned();
    assert!(Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .status()
        .unwrap()
        .success());
    let own_py = venv.join("bin/python");
    let own_site = Command::new(&own_py)
        .args([
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        ])
        .output()
        .unwrap();
    let own_site = PathBuf::from(String::from_utf8(own_site.stdout).unwrap().trim());
    std::fs::write(own_site.join("plugins.pth"), format!("{site}\n")).unwrap();
    let pyproject =
        "[build-system]\nrequires = ['setuptools']\nbuild-backend = 'setuptools.build_meta'\n\n\
[project]\nname = 'shop'\nversion = '0.1'\n\n[tool.setuptools.packages.find]\nwhere = ['src']\n";
    let mut c = case(&[
        ("pyproject.toml", pyproject),
        ("src/shop/__init__.py", "CART = []\n\n\ndef add(item):\n    CART.append(item)\n    return len(CART)\n"),
        ("tests/test_shop.py", "import shop\n\n\ndef test_add():\n    shop.CART.clear()\n    assert shop.add('x') == 1\n"),
    ])
    .honest(&[(
        "tests/test_version.py",
        "import shop\n\n\ndef test_from_the_sandbox():\n    assert '/tree/src/shop' in shop.__file__\n",
    )])
    // The base's test fills the cart and leaves its item there.
    .leaks("tests/test_shop.py::test_add", &["global:src/shop/__init__.py:CART"])
    .buggy(
        &[(
            "tests/test_cart.py",
            "import shop\n\n\ndef test_fill():\n    shop.add('book')\n\n\ndef test_cart_holds_the_book():\n    \
             assert shop.CART == ['book']\n",
        )],
        SV,
    );
    c.python = Some(own_py.clone());
    c.after_base = Some(Box::new(move |repo: &TestRepo| {
        let out = Command::new(&own_py)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--no-deps",
                "--no-build-isolation",
                "-e",
            ])
            .arg(repo.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "pip install -e: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }));
    let a = c.run();
    all_passed(
        &a.honest,
        &[
            "tests/test_version.py::test_from_the_sandbox",
            "tests/test_shop.py::test_add",
        ],
    );
    assert!(
        !warned(&a.honest, "editable install"),
        "{}",
        a.honest["warnings"]
    );
}

// ---------------------------------------------------------------------------------------------
// Options fixgate must own: neutralised, and said
// ---------------------------------------------------------------------------------------------

#[test]
fn pytest_xdist_n_in_addopts_is_neutralised() {
    let a = case(&[
        ("pytest.ini", "[pytest]\naddopts = -n 2\n"),
        ("app.py", APP),
        (
            "tests/test_w.py",
            "import os\n\n\ndef test_in_one_process(worker_id):\n    assert worker_id == 'master'\n    \
             assert 'PYTEST_XDIST_WORKER' not in os.environ\n",
        ),
    ])
    .honest(&[("tests/test_x.py", "def test_x():\n    assert True\n")])
    .buggy(&[("tests/test_cart.py", SETTER_VICTIM)], SV)
    .run();
    all_passed(&a.honest, &["tests/test_w.py::test_in_one_process"]);
    for v in [&a.honest, &a.buggy] {
        assert!(
            warned(v, "`-n 2` (pytest-xdist) is removed"),
            "{}",
            v["warnings"]
        );
    }
}

#[test]
fn pytest_randomly_installed_is_disabled_and_its_seed_option_ignored() {
    // pytest-randomly reseeds `random` before every test and shuffles the order: both would
    // show here (two tests drawing the same number; an order other than the one requested).
    let a = case(&[
        ("pytest.ini", "[pytest]\naddopts = --randomly-seed=12345\n"),
        ("app.py", APP),
        (
            "tests/test_random.py",
            "import random\n\nDRAWN = []\n\n\ndef test_draw():\n    DRAWN.append(random.random())\n\n\n\
             def test_draw_again():\n    if DRAWN:\n        assert random.random() != DRAWN[0]\n",
        ),
    ])
    .honest(&[("tests/test_x.py", "def test_x():\n    assert True\n")])
    .leaks("tests/test_random.py::test_draw", &["global:tests/test_random.py:DRAWN"])
    .buggy(&[("tests/test_cart.py", SETTER_VICTIM)], SV)
    .run();
    all_passed(
        &a.honest,
        &[
            "tests/test_random.py::test_draw",
            "tests/test_random.py::test_draw_again",
        ],
    );
    assert!(warned(
        &a.honest,
        "`--randomly-seed=12345` (pytest-randomly) is removed"
    ));
}

#[test]
fn pytest_rerunfailures_reruns_in_addopts_are_disabled_and_said() {
    let a = case(&[
        ("pytest.ini", "[pytest]\naddopts = --reruns 2\n"),
        ("app.py", APP),
        ("tests/test_a.py", "def test_a():\n    assert True\n"),
    ])
    .honest(&[("tests/test_b.py", "def test_b():\n    assert True\n")])
    .buggy(&[("tests/test_cart.py", SETTER_VICTIM)], SV)
    .run();
    // The victim failed in reversed order and was not rerun; the budget saw no rerun.
    assert_eq!(outcome(&a.buggy, SV.1, "rev"), "failed");
    assert_eq!(
        a.buggy["budget"]["used"]["reruns"], 0,
        "{}",
        a.buggy["budget"]
    );
    assert!(warned(
        &a.buggy,
        "`--reruns 2` (pytest-rerunfailures) is overridden"
    ));
}

#[test]
fn pytest_cov_in_addopts_measures_nothing_and_writes_nothing() {
    let a = case(&[
        (
            "pytest.ini",
            "[pytest]\naddopts = --cov=app --cov-report=xml\n",
        ),
        ("app.py", APP),
        (
            "tests/test_trace.py",
            "import sys\n\n\ndef test_no_tracer():\n    assert sys.gettrace() is None\n",
        ),
    ])
    .honest(&[("tests/test_x.py", "def test_x():\n    assert True\n")])
    .buggy(&[("tests/test_cart.py", SETTER_VICTIM)], SV)
    .run();
    all_passed(&a.honest, &["tests/test_trace.py::test_no_tracer"]);
    assert!(warned(&a.honest, "`--cov=app` (pytest-cov) is overridden"));
    for f in [".coverage", "coverage.xml"] {
        assert!(!a.repo.path().join(f).exists(), "{f}");
    }
}

#[test]
fn a_leaked_freeze_that_breaks_a_test_of_the_base_is_found_by_a_scoped_audit_too() {
    // The base's test_now reads nothing the patch changed and nothing on the base writes what it
    // reads, so a scoped audit would carry it from the base. The patch adds a test that starts
    // freezegun and never stops it: freezegun rebinds datetime.date for good, and test_now, after
    // it in file order, fails. The head's recording sees the rebinding outside the repository,
    // so its file-order and reversed runs are whole, and the scoped audit rejects as the whole
    // one does.
    let repo = TestRepo::new();
    // pytest-benchmark runs git, hg and file at session start, which no trace follows: a
    // scoped audit of a suite that loads it runs whole orders (the reason says so).
    repo.write(
        "pyproject.toml",
        "[tool.pytest.ini_options]\naddopts = \"-p no:benchmark\"\n",
    )
    .write(
        "clock.py",
        "import datetime\n\n\ndef year():\n    return datetime.date.today().year\n",
    )
    .write(
        "tests/test_now.py",
        "import clock\n\n\ndef test_now():\n    assert clock.year() > 2020\n",
    );
    let base = repo.commit("base");
    repo.write(
        "tests/test_a_leak.py",
        "from freezegun import freeze_time\n\n\ndef test_freeze_and_forget():\n    \
         freeze_time('2020-02-29').start()\n",
    );
    let head = repo.commit("head: a freeze left running");
    let python = python();
    for extra in [&[][..], &["--scoped"][..]] {
        let (run, v) = audit_in(&repo, &python, &base, &head, extra);
        assert_eq!(
            (run.code, v["verdict"].as_str()),
            (1, Some("reject")),
            "{extra:?}: {run:?}"
        );
        let pairs: Vec<_> = v["pairs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p["polluter"].clone(), p["victim"].clone()))
            .collect();
        assert!(
            pairs.contains(&(
                "tests/test_a_leak.py::test_freeze_and_forget".into(),
                "tests/test_now.py::test_now".into()
            )),
            "{extra:?}: {}",
            v["pairs"]
        );
        if !extra.is_empty() {
            let why = v["scope"]["whole_reason"].as_str().unwrap_or_default();
            assert!(why.contains("datetime."), "{}", v["scope"]);
        }
    }
}
