"""fixgate plugin: pytest's rewritten test modules, made by fixgate before the run and read here.

Every run starts in a fresh sandbox with PYTHONDONTWRITEBYTECODE=1, so pytest would parse,
rewrite and compile every test module and conftest.py in every run; in a user's tree its own
__pycache__ saves that from the second run on. fixgate rewrites the snapshot's test modules
itself, outside any run, into a folder per interpreter (src/pytest/rewrites.rs) that runs see
read-only and is named with --fixgate-rewrite. A rewrite is looked up there by a hash of the
source bytes; a file missing from it (a module fixgate did not expect pytest to rewrite, one whose
rewrite warns) is rewritten by pytest as in a plain run, and nothing is ever written: what a run
wrote would be another run's test. The cache holds only the rewrite with
enable_assertion_pass_hook off and no -O, so either setting skips it. Cache files are read with
the trace hook muted: they are fixgate's, not the test's.
"""

import hashlib
import os
import sys

from fixgate_plugin_trace import _Quiet

OPTION = "--fixgate-rewrite"
# Also in src/pytest/rewrites.rs, which names the files.
_DOMAIN = b"fixgate rewrite v3\0"


def pytest_addoption(parser):
    parser.getgroup("fixgate").addoption(
        OPTION,
        dest="fixgate_rewrite",
        default=None,
        metavar="DIR",
        help="fixgate: read pytest's rewritten test modules from DIR (fixgate writes them).",
    )


def _folder():
    """The folder named on the command line. Read from sys.argv at import: conftest.py files are
    rewritten before pytest has parsed its options."""
    prefix = OPTION + "="
    for arg in sys.argv[1:]:
        if arg.startswith(prefix):
            return arg[len(prefix) :]
    return None


def _install_rewrite_cache():
    folder = _folder()
    if not folder or not sys.dont_write_bytecode or sys.flags.optimize:
        return
    try:
        import _imp
        import importlib.util
        import marshal
        import types

        from _pytest.assertion import rewrite
    except Exception:
        return
    original = getattr(rewrite, "_rewrite_test", None)
    fix_filename = getattr(_imp, "_fix_co_filename", None)
    if original is None or fix_filename is None:
        return
    returns = str(getattr(original, "__annotations__", {}).get("return", ""))

    def first_value(fn, source):
        # what pytest returns beside the code: only used to write its own pyc, which it does
        # not do here (bytecode writing is off), but keep the type it expects
        if "stat" in returns:
            return os.stat(fn)
        return importlib.util.source_hash(source)

    # A file is the sha256 of the marshalled code, then the code: a damaged file (a flipped
    # bit can still unmarshal, into different code) is a miss, never a different test.
    def load(path):
        with _Quiet():
            try:
                with open(path, "rb") as f:
                    data = f.read()
            except OSError:
                return None
        body = data[32:]
        if len(data) < 32 or hashlib.sha256(body).digest() != data[:32]:
            return None
        try:
            co = marshal.loads(body)
        except (EOFError, ValueError, TypeError):
            return None
        return co if isinstance(co, types.CodeType) else None

    def cached_rewrite(fn, config):
        source = fn.read_bytes()  # traced, as pytest's own read would be
        try:
            hook = bool(config.getini("enable_assertion_pass_hook"))
        except Exception:
            hook = True
        if not hook:
            key = hashlib.sha256(_DOMAIN + source).hexdigest()
            co = load(os.path.join(folder, key[:2], key[2:] + ".bin"))
            if co is not None:
                fix_filename(co, str(fn))
                return first_value(fn, source), co
        return original(fn, config)

    rewrite._rewrite_test = cached_rewrite


_install_rewrite_cache()
