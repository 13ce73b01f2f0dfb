"""fixgate's pytest plugin, as `-p fixgate_plugin` loads it: the plugin is the fixgate_plugin_*
modules beside this file (events, outcome, trace, classify, lease, rewrite, deps, state,
record, forkserver, options, flags, run, phase, collection, hooks).

pytest rewrites the asserts of a module named with -p from its source on every run, and runs
write no bytecode, so the plugin would be compiled by every pytest process. fixgate compiles each
module into a file beside it, with a checksum, before any run; this loader runs that code, or
compiles the source in memory when the file is missing, damaged or another interpreter's. It
never writes: the folder is read-only to runs, and anything a run wrote here would be every later
run's plugin.
"""

import _imp
import hashlib
import importlib.util
import marshal
import os
import sys
import types

_DIR = os.path.dirname(os.path.abspath(__file__))
_MAGIC = importlib.util.MAGIC_NUMBER
# In dependency order: a module imports only modules listed before it.
_MODULES = (
    "fixgate_plugin_events",
    "fixgate_plugin_outcome",
    "fixgate_plugin_trace",
    "fixgate_plugin_classify",
    "fixgate_plugin_lease",
    "fixgate_plugin_rewrite",
    "fixgate_plugin_deps",
    "fixgate_plugin_settings",
    "fixgate_plugin_state",
    "fixgate_plugin_record",
    "fixgate_plugin_forkserver",
    "fixgate_plugin_options",
    "fixgate_plugin_flags",
    "fixgate_plugin_run",
    "fixgate_plugin_phase",
    "fixgate_plugin_collection",
    "fixgate_plugin_hooks",
)


def _compiled(name, source):
    """The module's code object: fixgate's compiled file when it checks, else the source."""
    path = os.path.join(_DIR, "__pycache__", "%s.%s.fixgate" % (name, sys.implementation.cache_tag))
    try:
        with open(path, "rb") as f:
            data = f.read()
        n = len(_MAGIC)
        if data[:n] == _MAGIC and hashlib.sha256(data[n + 32 :]).digest() == data[n : n + 32]:
            code = marshal.loads(data[n + 32 :])
            # The code names the file it was compiled from; the cache may have moved since
            # (copied, restored elsewhere, reached through a link), and the trace tells the
            # plugin's frames from the suite's by their file names.
            fix = getattr(_imp, "_fix_co_filename", None)
            if fix is not None:
                fix(code, source)
            return code
    except (OSError, EOFError, ValueError, TypeError):
        pass
    with open(source, "rb") as f:
        return compile(f.read(), source, "exec", dont_inherit=True)


def _load(name):
    module = sys.modules.get(name)
    if module is None:
        source = os.path.join(_DIR, name + ".py")
        module = types.ModuleType(name)
        module.__file__ = source
        sys.modules[name] = module
        try:
            exec(_compiled(name, source), module.__dict__)
        except BaseException:
            del sys.modules[name]
            raise
    return module


for _name in _MODULES:
    _load(_name)
_hooks = sys.modules["fixgate_plugin_hooks"]
pytest_configure = _hooks.pytest_configure
pytest_load_initial_conftests = sys.modules["fixgate_plugin_options"].pytest_load_initial_conftests


def pytest_addoption(parser):
    sys.modules["fixgate_plugin_flags"].pytest_addoption(parser)
    sys.modules["fixgate_plugin_rewrite"].pytest_addoption(parser)
