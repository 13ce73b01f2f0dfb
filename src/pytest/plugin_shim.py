"""fixgate's pytest plugin, as `-p fixgate_plugin` loads it: the plugin is fixgate_plugin_impl.

pytest rewrites the asserts of a module named with -p from its source on every run, and runs
write no bytecode, so the plugin would be compiled by every pytest process. This loader compiles
it once per interpreter into a file beside it, with a checksum: a damaged or foreign file is
compiled again, never run.
"""

import hashlib
import importlib.util
import marshal
import os
import sys
import types

_DIR = os.path.dirname(os.path.abspath(__file__))
_SOURCE = os.path.join(_DIR, "fixgate_plugin_impl.py")
_CODE = os.path.join(_DIR, "__pycache__", "fixgate_plugin_impl.%s.fixgate" % sys.implementation.cache_tag)
_MAGIC = importlib.util.MAGIC_NUMBER


def _compiled():
    """The plugin's code object: the checked file, else the source compiled (and stored)."""
    try:
        with open(_CODE, "rb") as f:
            data = f.read()
        n = len(_MAGIC)
        if data[:n] == _MAGIC and hashlib.sha256(data[n + 32 :]).digest() == data[n : n + 32]:
            return marshal.loads(data[n + 32 :])
    except (OSError, EOFError, ValueError, TypeError):
        pass
    with open(_SOURCE, "rb") as f:
        code = compile(f.read(), _SOURCE, "exec", dont_inherit=True)
    try:
        body = marshal.dumps(code)
        os.makedirs(os.path.dirname(_CODE), exist_ok=True)
        tmp = "%s.%d.tmp" % (_CODE, os.getpid())
        with open(tmp, "wb") as f:
            f.write(_MAGIC + hashlib.sha256(body).digest() + body)
        os.replace(tmp, _CODE)
    except OSError:
        pass  # a read-only directory: compile on every run
    return code


def _load():
    module = sys.modules.get("fixgate_plugin_impl")
    if module is None:
        module = types.ModuleType("fixgate_plugin_impl")
        module.__file__ = _SOURCE
        sys.modules["fixgate_plugin_impl"] = module
        try:
            exec(_compiled(), module.__dict__)
        except BaseException:
            del sys.modules["fixgate_plugin_impl"]
            raise
    return module


_impl = _load()
pytest_addoption = _impl.pytest_addoption
pytest_configure = _impl.pytest_configure
