"""fixgate's pytest plugin, as `-p fixgate_plugin` loads it: the plugin is the fixgate_plugin_*
modules beside this file (events, trace, classify, lease, rewrite, deps, state, record,
forkserver, options, hooks).

pytest rewrites the asserts of a module named with -p from its source on every run, and runs
write no bytecode, so the plugin would be compiled by every pytest process. This loader compiles
each module once per interpreter into a file beside it, with a checksum: a damaged or foreign
file is compiled again, never run.
"""

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
    "fixgate_plugin_trace",
    "fixgate_plugin_classify",
    "fixgate_plugin_lease",
    "fixgate_plugin_rewrite",
    "fixgate_plugin_deps",
    "fixgate_plugin_state",
    "fixgate_plugin_record",
    "fixgate_plugin_forkserver",
    "fixgate_plugin_options",
    "fixgate_plugin_hooks",
)


def _compiled(name, source):
    """The module's code object: the checked file, else the source compiled (and stored)."""
    path = os.path.join(_DIR, "__pycache__", "%s.%s.fixgate" % (name, sys.implementation.cache_tag))
    try:
        with open(path, "rb") as f:
            data = f.read()
        n = len(_MAGIC)
        if data[:n] == _MAGIC and hashlib.sha256(data[n + 32 :]).digest() == data[n : n + 32]:
            return marshal.loads(data[n + 32 :])
    except (OSError, EOFError, ValueError, TypeError):
        pass
    with open(source, "rb") as f:
        code = compile(f.read(), source, "exec", dont_inherit=True)
    try:
        body = marshal.dumps(code)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = "%s.%d.tmp" % (path, os.getpid())
        with open(tmp, "wb") as f:
            f.write(_MAGIC + hashlib.sha256(body).digest() + body)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only directory: compile on every run
    return code


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
pytest_addoption = _hooks.pytest_addoption
pytest_configure = _hooks.pytest_configure
pytest_load_initial_conftests = sys.modules["fixgate_plugin_options"].pytest_load_initial_conftests
