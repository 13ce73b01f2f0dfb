"""fixgate plugin: pytest's rewritten test modules, cached by content outside the sandbox."""

import hashlib
import os
import sys

import pytest

from fixgate_plugin_trace import _Quiet

# Every run starts in a fresh sandbox with PYTHONDONTWRITEBYTECODE=1, so pytest would parse,
# rewrite and compile every test module and conftest.py in every run; in a user's tree its own
# __pycache__ saves that from the second run on. fixgate names a directory outside the sandbox
# in FIXGATE_PYC_CACHE, and the rewrite is looked up there by a hash of everything it depends
# on: the source bytes, the interpreter, pytest's version, the optimisation level and the one
# setting that changes rewriting (enable_assertion_pass_hook). A rewrite that warned is never
# cached, so its warnings are seen (and can fail the run under -W error) every time, as in a
# run without the cache. Cache files are read and written with the trace hook muted: they are
# fixgate's, not the test's. Anything unexpected falls back to pytest's own path.


def _install_rewrite_cache():
    cache = os.environ.pop("FIXGATE_PYC_CACHE", None)
    if not cache or not sys.dont_write_bytecode:
        return
    try:
        import _imp
        import importlib.util
        import marshal
        import types
        import warnings

        from _pytest.assertion import rewrite
    except Exception:
        return
    original = getattr(rewrite, "_rewrite_test", None)
    fix_filename = getattr(_imp, "_fix_co_filename", None)
    if original is None or fix_filename is None:
        return
    returns = str(getattr(original, "__annotations__", {}).get("return", ""))
    salt = repr(
        (
            "fixgate-rewrite-v2",
            sys.version,
            importlib.util.MAGIC_NUMBER,
            pytest.__version__,
            sys.flags.optimize,
        )
    ).encode("utf-8")

    def first_value(fn, source):
        # what pytest returns beside the code: only used to write its own pyc, which it does
        # not do here (bytecode writing is off), but keep the type it expects
        if "stat" in returns:
            return os.stat(fn)
        return importlib.util.source_hash(source)

    def muted(action):
        with _Quiet():
            try:
                return action()
            except Exception:
                return None

    # A file is the sha256 of the marshalled code, then the code: a damaged file (a flipped
    # bit can still unmarshal, into different code) is a miss, never a different test.
    def load(path):
        with open(path, "rb") as f:
            data = f.read()
        body = data[32:]
        if len(data) < 32 or hashlib.sha256(body).digest() != data[:32]:
            return None
        co = marshal.loads(body)
        return co if isinstance(co, types.CodeType) else None

    def store(path, co):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = "%s.%d.tmp" % (path, os.getpid())
        body = marshal.dumps(co)
        try:
            with open(tmp, "wb") as f:
                f.write(hashlib.sha256(body).digest() + body)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)

    def cached_rewrite(fn, config):
        source = fn.read_bytes()  # traced, as pytest's own read would be
        try:
            hook = bool(config.getini("enable_assertion_pass_hook"))
        except Exception:
            hook = None
        key = hashlib.sha256(salt + repr(hook).encode("utf-8") + b"\0" + source).hexdigest()
        path = os.path.join(cache, key[:2], key[2:] + ".bin")
        co = muted(lambda: load(path))
        if co is not None:
            fix_filename(co, str(fn))
            return first_value(fn, source), co
        # A quiet pass first: when rewriting these bytes warns about nothing at all, the
        # filters in force could not have changed anything, so its code is pytest's and may be
        # cached (if the file still holds the key's bytes). Otherwise pytest's own rewrite runs
        # under the filters in force, so its warnings and errors (a SyntaxWarning that -W error
        # makes a SyntaxError) are exactly a plain run's, and nothing is cached.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                quiet = original(fn, config)
            except Exception:
                quiet = None
        if quiet is None or caught:
            return original(fn, config)
        if fn.read_bytes() == source:
            muted(lambda: store(path, quiet[1]))
        return quiet

    rewrite._rewrite_test = cached_rewrite


_install_rewrite_cache()
