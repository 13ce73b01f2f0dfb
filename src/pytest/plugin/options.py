"""fixgate plugin: the suite's own command-line options that fixgate must own, neutralised before
pytest parses them.

fixgate owns three things of a run: which tests run (every test of the order, nothing chosen by
an earlier run), the order they run in, and that each runs once, in this process. A suite's
`addopts` (or any option it passes) may claim one of them: pytest-xdist's `-n 2`,
pytest-rerunfailures' `--reruns 2`, pytest-randomly's `--randomly-seed`, the cache's `--lf`,
pytest-cov's `--cov`. Disabling the plugin that owns such an option would make the option
unrecognised (a usage error), so the plugin stays loaded and the option loses its effect:

- options of the plugins fixgate disables with `-p no:NAME`, and options that choose tests or
  their order from an earlier run, are removed from the arguments;
- options of plugins fixgate keeps loaded get a later option that overrides them (`-n 0`,
  `--force-reruns 0`, `--no-cov`).

This runs in `pytest_load_initial_conftests`, the one hook that sees the whole argument list
(addopts included) before pytest's final parse, and only in fixgate's runs. What was found is
kept in `NEUTRALISED` and sent with every `start` event, so that reports say it.
"""

import pytest

# What was neutralised in this process, in argument order: {"option" (as written), "plugin",
# "treatment" ("removed" or "overridden"), "why"}.
NEUTRALISED = []

_SHUFFLES = "fixgate disables the plugin and sets the order itself"
_FROM_EARLIER_RUN = "fixgate chooses and orders the tests itself, never from an earlier run"
_DISTRIBUTES = "fixgate runs an order in one process, in its own order"

# Options removed from the arguments: (spellings, whether each takes a value, the plugin, why).
_REMOVED = (
    (("--randomly-seed",), True, "pytest-randomly", _SHUFFLES),
    (("--randomly-dont-reset-seed", "--randomly-dont-reorganize"), False, "pytest-randomly",
     _SHUFFLES),
    (("--random-order",), False, "pytest-random-order", _SHUFFLES),
    (("--random-order-bucket", "--random-order-seed"), True, "pytest-random-order", _SHUFFLES),
    (("--lf", "--last-failed", "--ff", "--failed-first", "--nf", "--new-first", "--cache-show"),
     False, "pytest's cache", _FROM_EARLIER_RUN),
    (("--lfnf", "--last-failed-no-failures"), True, "pytest's cache", _FROM_EARLIER_RUN),
    (("--sw", "--stepwise", "--sw-skip", "--stepwise-skip", "--sw-reset", "--stepwise-reset"),
     False, "pytest's stepwise", _FROM_EARLIER_RUN),
    # pytest-xdist stays loaded (its worker_id fixture is "master" then), distributing nothing.
    (("-n", "--numprocesses", "--maxprocesses", "--max-worker-restart", "--dist", "--tx",
      "--px", "--rsyncdir", "--rsyncignore"), True, "pytest-xdist", _DISTRIBUTES),
    (("-d", "-f", "--looponfail"), False, "pytest-xdist", _DISTRIBUTES),
)

# Options overridden by a later one when their plugin is loaded (its name in pytest's plugin
# manager): the spellings to report (all take a value), and why.
_COV = (
    "pytest_cov",
    "pytest-cov",
    ("--cov", "--cov-report", "--cov-config", "--cov-fail-under", "--cov-context"),
    ("--cov-append", "--cov-branch"),
    "coverage is not measured in fixgate's runs (--no-cov)",
)
_RERUNS = (
    "rerunfailures",
    "pytest-rerunfailures",
    ("--reruns", "--force-reruns", "--reruns-delay", "--only-rerun", "--rerun-except"),
    (),
    "a rerun would hide the flakiness that fixgate measures by running orders again (reruns "
    "off)",
)
_OURS = "--maxfail=2147483647"


def _matches(arg, spellings, takes_value):
    """Whether `arg` is one of `spellings`, and whether its value is the next argument."""
    for s in spellings:
        if arg == s:
            return True, takes_value
        if takes_value and arg.startswith(s + "="):
            return True, False
        # a short option's value may be attached: -n2, -nauto
        if takes_value and len(s) == 2 and arg.startswith(s) and arg[1] != "-":
            return True, False
    return False, False


def _find(args, spellings, takes_value, remove):
    """The occurrences of an option in `args` (as written, value included), removed from `args`
    when `remove`."""
    found = []
    i = 0
    while i < len(args):
        arg = str(args[i])
        hit, value_follows = _matches(arg, spellings, takes_value)
        if not hit or arg == _OURS:
            i += 1
            continue
        end = i + 2 if value_follows and i + 1 < len(args) else i + 1
        found.append(" ".join(str(a) for a in args[i:end]))
        if remove:
            del args[i:end]
        else:
            i = end
    return found


def _fixgate_run(args):
    return any(str(a).startswith("--fixgate-events=") for a in args)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args):
    # A wrapper, so that this runs before every plugin's own implementation (pytest-cov starts
    # coverage in its own, from the options parsed so far).
    if _fixgate_run(args):
        neutralise(early_config, parser, args)
    yield


def neutralise(config, parser, args):
    """Neutralises, in place, the options of `args` that fixgate must own."""
    del NEUTRALISED[:]

    def say(options, plugin, treatment, why):
        for o in options:
            NEUTRALISED.append({"option": o, "plugin": plugin, "treatment": treatment, "why": why})

    for spellings, takes_value, plugin, why in _REMOVED:
        say(_find(args, spellings, takes_value, True), plugin, "removed", why)

    manager = config.pluginmanager
    ns = config.known_args_namespace
    for name, plugin, valued, flags, why in (_COV, _RERUNS):
        if not manager.hasplugin(name):
            continue
        found = _find(args, valued, True, False) + _find(args, flags, False, False)
        if name == "rerunfailures":
            try:
                ini = config.getini("reruns")
            except (ValueError, KeyError):
                ini = None
            if ini:
                found.append("reruns = %s (configuration)" % ini)
            # --force-reruns (pytest-rerunfailures 15+) wins over the flaky marker too.
            args.append("--force-reruns=0" if hasattr(ns, "force_reruns") else "--reruns=0")
        else:
            args.append("--no-cov")
            # pytest-cov decides whether to start coverage from the options parsed so far.
            ns.no_cov = True
        say(found, plugin, "overridden", why)
    say(
        _find(args, ("-x", "--exitfirst"), False, False) + _find(args, ("--maxfail",), True, False),
        "pytest",
        "overridden",
        "fixgate runs every test of an order (--maxfail)",
    )

    if not manager.has_plugin("cacheprovider"):
        # fixgate names the run's private cache directory with -o cache_dir; the suite disabled
        # the cache, so the name must not be reported as an unknown option.
        parser.addini("cache_dir", "fixgate: the run's private cache directory (unused)")
