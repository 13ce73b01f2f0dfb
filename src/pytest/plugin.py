"""fixgate's pytest plugin.

Embedded in the fixgate binary, written to disk as ``fixgate_plugin_impl.py`` in a directory that
is put on PYTHONPATH, beside ``fixgate_plugin.py`` (``plugin_shim.py`` here), which pytest loads
with ``-p fixgate_plugin`` and which runs this module from a checksummed compiled copy (pytest
would rewrite and compile a module named with ``-p`` on every run).  The protocol it speaks
(options and JSON-lines events) is documented in ``docs/plugin-protocol.md``; keep the two in
step.

Standard library only.  Supports Python 3.9+ and pytest 7.4, 8 and 9.  Do not use syntax newer
than Python 3.9 here (no ``match``, no ``X | Y`` at run time).

Without ``--fixgate-events`` (and ``--fixgate-order``) the plugin only registers its markers.
"""

import hashlib
import json
import math
import os
import stat
import sys
import threading
import time
import traceback

import pytest

PROTOCOL_VERSION = 1
_TestReport = getattr(pytest, "TestReport", None)


def _has_new_style_wrappers():
    try:
        pytest.hookimpl(wrapper=True)
        return True
    except TypeError:  # pluggy before 1.2
        return False


_NEW_STYLE_WRAPPERS = _has_new_style_wrappers()

_THIS_FILE = os.path.abspath(__file__)
if _THIS_FILE.endswith((".pyc", ".pyo")):  # pragma: no cover - only when run from bytecode
    _THIS_FILE = _THIS_FILE[:-1]



# --------------------------------------------------------------------------------------------
# options and markers
# --------------------------------------------------------------------------------------------


def pytest_addoption(parser):
    group = parser.getgroup("fixgate", "fixgate audit plugin")
    group.addoption(
        "--fixgate-events",
        dest="fixgate_events",
        default=None,
        metavar="PATH",
        help="fixgate: append JSON-lines events to PATH (enables tracing and the lease check).",
    )
    group.addoption(
        "--fixgate-order",
        dest="fixgate_order",
        default=None,
        metavar="PATH",
        help="fixgate: run exactly the node ids listed in PATH (one per line), in that order; "
        "deselect everything else.",
    )
    group.addoption(
        "--fixgate-watch",
        dest="fixgate_watch",
        default=None,
        metavar="PATH",
        help='fixgate: JSON file {"roots": [...]} of repo-relative directories whose files are '
        "checked for changes around every test.",
    )
    group.addoption(
        "--fixgate-root",
        dest="fixgate_root",
        default=None,
        metavar="PATH",
        help="fixgate: the sandbox root; recorded paths are relative to it (default: rootdir).",
    )
    group.addoption(
        "--fixgate-collect",
        dest="fixgate_collect",
        action="store_true",
        default=False,
        help="fixgate: emit one 'collected' event listing every collected item.",
    )


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "writes(*groups): the fixture groups this test may change (fixgate lease).",
    )
    config.addinivalue_line(
        "markers",
        "serial: keep this test in collection order; fixgate never shuffles it.",
    )
    events = config.getoption("fixgate_events", None)
    order = config.getoption("fixgate_order", None)
    if events is None and order is None:
        return
    plugin = _FixgatePlugin(config)
    config.pluginmanager.register(plugin, "fixgate-session")


# --------------------------------------------------------------------------------------------
# small helpers
# --------------------------------------------------------------------------------------------


def _path_text(s):
    """A str path as JSON-safe text.

    UTF-8 paths stay as they are.  A path holding bytes that are not UTF-8 (surrogate-escaped by
    os.fsdecode) is written the way fixgate's RepoPath::display_lossless writes it: every invalid
    byte becomes ``\\xNN`` and, only in such a path, a literal backslash becomes ``\\\\``.
    """
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        pass
    try:
        b = s.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return s.encode("utf-8", "replace").decode("utf-8")
    out = []
    while b:
        try:
            out.append(b.decode("utf-8").replace("\\", "\\\\"))
            break
        except UnicodeDecodeError as e:
            out.append(b[: e.start].decode("utf-8").replace("\\", "\\\\"))
            for x in bytearray(b[e.start : e.end]):
                out.append("\\x%02X" % x)
            b = b[e.end :]
    return "".join(out)


def _jsonable(value, depth=0):
    """Marker arguments as JSON values: scalars and lists stay, anything else is repr()'d."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if depth > 20:
        return repr(value)
    if isinstance(value, (list, tuple)):
        return [_jsonable(v, depth + 1) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: _jsonable(v, depth + 1) for k, v in value.items()}
    try:
        return repr(value)
    except Exception:  # a broken __repr__ must not break the run
        return "<unrepresentable %s>" % type(value).__name__


def _first_line(text, limit=1000):
    if text is None:
        return None
    text = str(text)
    for line in text.splitlines():
        if line.strip():
            line = line.rstrip()
            return line if len(line) <= limit else line[:limit] + "..."
    return None


def _longrepr_text(longrepr):
    if longrepr is None:
        return ""
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    try:
        return str(longrepr)
    except Exception:
        return repr(longrepr)


def _error_line(text):
    """The most telling line of a pytest failure text: the last 'E ' line, else the last line."""
    last_e = None
    last = None
    for line in text.splitlines():
        if not line.strip():
            continue
        last = line
        if line.startswith("E "):
            last_e = line
    if last_e is not None:
        return _first_line(last_e[1:].strip())
    return _first_line(last)


def _is_subtest_report(report):
    """A report of one subtest rather than of the test itself (pytest 9's SubtestReport,
    pytest-subtests' SubTestReport): both carry a `context`."""
    if type(report) is _TestReport:
        return False  # the common case; subtest reports are subclasses
    if getattr(report, "context", None) is not None:
        return True
    return "subtest" in type(report).__name__.lower()


def _report_message(report):
    """A short message for one phase report: the skip reason, or the first failure line."""
    longrepr = getattr(report, "longrepr", None)
    if report.passed and not hasattr(report, "wasxfail"):
        return None
    if longrepr is None:
        return None
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # a skip: (path, lineno, reason)
        reason = str(longrepr[2])
        if reason.startswith("Skipped: "):
            reason = reason[len("Skipped: ") :]
        return reason
    crash = getattr(longrepr, "reprcrash", None)
    message = getattr(crash, "message", None)
    if message:
        return _first_line(message)
    return _error_line(_longrepr_text(longrepr))


def _skip_reason(report):
    longrepr = getattr(report, "longrepr", None)
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        reason = str(longrepr[2])
        if reason.startswith("Skipped: "):
            reason = reason[len("Skipped: ") :]
        return reason
    return _report_message(report)


# --------------------------------------------------------------------------------------------
# the audit hook
# --------------------------------------------------------------------------------------------

# What the hook records while a trace is active: a set of tuples (op, value), op one of
# read/write/list/remove/mkdir/sqlite/import (value: absolute path), rename (value: (abs, abs)),
# modname (value: module name, resolved through sys.modules when the trace is finished),
# unknown (value: a name such as "subprocess").  Classification (repo-relative, outside,
# ignored) happens once per distinct path when the trace is emitted, not in the hook.
_TRACE = None  # the set the hook adds to; None: not recording
_HOOK_INSTALLED = False
_TLS = threading.local()
_HOOK_ERRORS = []  # messages from inside the hook, drained by the plugin
_HOOK_ERROR_COUNT = 0
_MMAPPED = set()  # absolute paths of files seen mapped with mmap (checked on every lease pass)

# One encoder for every event (json.dumps with options builds a new one per call).
_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode
# A JSON string literal, as _ENCODE writes it (the C version when there is one).
_JSON_STRING = json.encoder.encode_basestring


def _json_number(x):
    """A duration or a clock reading in seconds, to the microsecond (the shortest repr of a
    float costs ten times more, and says nothing more of a test); not finite (never): 0."""
    try:
        x = float(x)
    except (TypeError, ValueError):
        return "0.0"
    return "%.6f" % x if x - x == 0 else "0.0"


_OUTCOMES_JSON = {"passed": '"passed"', "failed": '"failed"', "skipped": '"skipped"'}


def _phase_json(when, outcome, duration, message):
    text = '"%s":{"outcome":%s,"duration":%s' % (
        when,
        _OUTCOMES_JSON.get(outcome) or _JSON_STRING(str(outcome)),
        _json_number(duration),
    )
    if message is not None:
        return text + ',"message":' + _JSON_STRING(str(message)) + "}"
    return text + "}"


def _test_line(nodeid, index, outcome, phases, start, end, extra):
    """The test event as one JSON line, written by hand: it is on the path of every test, where
    the encoder's 30 us were a fifth of the plugin's cost. `phases` are _phase_json texts;
    `extra` holds the optional fields, rare, and goes through the encoder."""
    line = '{"event":"test","nodeid":%s,"index":%d,"outcome":%s,"phases":{%s},"start":%s,"end":%s' % (
        _JSON_STRING(str(nodeid)),
        index,
        _JSON_STRING(outcome),
        ",".join(phases),
        _json_number(start),
        _json_number(end),
    )
    if extra:
        return line + "," + _ENCODE(extra)[1:]
    return line + "}"

_O_WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND

_UNKNOWN_EVENTS = {
    "subprocess.Popen": "subprocess",
    "os.system": "os.system",
    "os.exec": "os.exec",
    "os.spawn": "os.spawn",
    "os.posix_spawn": "os.posix_spawn",
    "os.fork": "os.fork",
    "os.forkpty": "os.forkpty",
    "ctypes.dlopen": "ctypes.dlopen",
    "mmap.__new__": "mmap",
}

_EVENTS = frozenset(
    [
        "open",
        "os.listdir",
        "os.scandir",
        "os.rename",
        "os.remove",
        "os.rmdir",
        "os.mkdir",
        "os.truncate",
        "os.utime",
        "os.chmod",
        "os.chown",
        "os.link",
        "os.symlink",
        "shutil.rmtree",
        "shutil.copyfile",
        "shutil.copymode",
        "shutil.copystat",
        "sqlite3.connect",
        "import",
    ]
    + list(_UNKNOWN_EVENTS)
)


def _fd_dir(dir_fd):
    try:
        return os.readlink("/proc/self/fd/%d" % dir_fd)
    except (OSError, ValueError, TypeError):
        return None


def _abs(path, dir_fd=None):
    """The absolute, normalised str form of an audited path argument; None to ignore it."""
    if path is None or isinstance(path, int):
        return None
    if isinstance(path, str):
        s = path
    elif isinstance(path, bytes):
        s = os.fsdecode(path)
    else:
        try:
            s = os.fspath(path)
        except TypeError:
            return None
        if isinstance(s, bytes):
            s = os.fsdecode(s)
    if not s:
        return None
    if dir_fd is not None and dir_fd != -1 and not os.path.isabs(s):
        base = _fd_dir(dir_fd)
        if base is None:
            return None
        return os.path.normpath(os.path.join(base, s))
    try:
        return os.path.abspath(s)
    except OSError:  # the current directory was removed
        return None


def _caller_kind():
    """'import' when the audited call comes from the import system, pytest's assertion rewriter
    or linecache (source shown in a traceback); None otherwise."""
    try:
        f = sys._getframe(1)
    except Exception:
        return None
    n = 0
    while f is not None and n < 8:
        fn = f.f_code.co_filename
        if fn != _THIS_FILE:
            n += 1
            if fn.startswith("<frozen importlib") or fn.endswith(
                (
                    "importlib/_bootstrap_external.py",
                    "importlib/_bootstrap.py",
                    "_pytest/assertion/rewrite.py",
                    "linecache.py",
                )
            ):
                return "import"
        f = f.f_back
    return None


def _caller_is_rmtree():
    try:
        f = sys._getframe(1)
    except Exception:
        return False
    n = 0
    while f is not None and n < 4:
        if f.f_code.co_filename != _THIS_FILE:
            n += 1
            if f.f_code.co_name.startswith("_rmtree"):
                return True
        f = f.f_back
    return False


def _sqlite_path(db):
    if isinstance(db, bytes):
        db = os.fsdecode(db)
    elif not isinstance(db, str):
        try:
            db = os.fspath(db)
        except TypeError:
            return None
        if isinstance(db, bytes):
            db = os.fsdecode(db)
    if db in ("", ":memory:"):
        return None
    if db.startswith("file:"):
        # A URI filename (uri=True); the audit event does not say, so "file:" is taken as one.
        rest = db[5:]
        query = ""
        for sep in ("?", "#"):
            if sep in rest:
                rest, tail = rest.split(sep, 1)
                if sep == "?":
                    query = tail
        if "mode=memory" in query or rest in ("", ":memory:"):
            return None
        if rest.startswith("//"):
            rest = rest[2:]
            slash = rest.find("/")
            rest = rest[slash:] if slash >= 0 else ""
        try:
            from urllib.parse import unquote

            rest = unquote(rest)
        except Exception:
            pass
        if not rest:
            return None
        db = rest
    return _abs(db)


def _handle(event, args, rec):
    if event == "open":
        path = args[0]
        if isinstance(path, int):
            return
        mode = args[1] if len(args) > 1 else None
        flags = args[2] if len(args) > 2 else 0
        p = _abs(path)
        if p is None:
            return
        read = write = False
        if isinstance(mode, str):
            if "r" in mode:
                read = True
                if "+" in mode:
                    write = True
            elif "a" in mode:
                write = True
                if "+" in mode:
                    read = True
            else:  # "w", "x"
                write = True
        else:
            flags = flags or 0
            if flags & _O_WRITE:
                write = True
                if flags & os.O_RDWR:
                    read = True
            else:
                read = True
            if not os.path.isabs(path if isinstance(path, str) else os.fsdecode(os.fspath(path))):
                # shutil.rmtree opens entries relative to a directory fd the event omits
                if _caller_is_rmtree():
                    return
        if read and not write and p.endswith((".py", ".pyc")):
            if _caller_kind() == "import":
                if p.endswith(".pyc"):
                    src = _source_from_cache(p)
                    if src is not None:
                        p = src
                rec.add(("import", p))
                return
        if read:
            rec.add(("read", p))
        if write:
            rec.add(("write", p))
    elif event == "os.listdir" or event == "os.scandir":
        path = args[0] if args else None
        if isinstance(path, int):
            return
        if event == "os.listdir" and _caller_kind() == "import":
            return  # the import system's directory cache
        p = _abs("." if path is None else path)
        if p is not None:
            rec.add(("list", p))
    elif event == "os.remove" or event == "os.rmdir":
        p = _abs(args[0], args[1] if len(args) > 1 else None)
        if p is not None:
            rec.add(("remove", p))
    elif event == "os.mkdir":
        p = _abs(args[0], args[2] if len(args) > 2 else None)
        if p is not None:
            rec.add(("mkdir", p))
    elif event == "os.rename":
        a = _abs(args[0], args[2] if len(args) > 2 else None)
        b = _abs(args[1], args[3] if len(args) > 3 else None)
        if a is not None and b is not None:
            rec.add(("rename", (a, b)))
    elif event == "shutil.rmtree":
        p = _abs(args[0], args[1] if len(args) > 1 else None)
        if p is not None:
            rec.add(("remove", p))
    elif event in ("shutil.copyfile", "shutil.copymode", "shutil.copystat", "os.link"):
        a = _abs(args[0], args[2] if event == "os.link" and len(args) > 2 else None)
        b = _abs(args[1], args[3] if event == "os.link" and len(args) > 3 else None)
        if a is not None:
            rec.add(("read", a))
        if b is not None:
            rec.add(("write", b))
    elif event == "os.symlink":
        p = _abs(args[1], args[2] if len(args) > 2 else None)
        if p is not None:
            rec.add(("write", p))
    elif event in ("os.truncate", "os.utime", "os.chmod", "os.chown"):
        dir_fd = None
        if event != "os.truncate" and len(args) > 1:
            dir_fd = args[-1] if isinstance(args[-1], int) else None
        p = _abs(args[0], dir_fd)
        if p is not None:
            rec.add(("write", p))
    elif event == "sqlite3.connect":
        p = _sqlite_path(args[0]) if args else None
        if p is not None:
            rec.add(("sqlite", p))
    elif event == "import":
        filename = args[1] if len(args) > 1 else None
        if filename:
            p = _abs(filename)
            if p is not None:
                rec.add(("import", p))
        elif args and isinstance(args[0], str):
            rec.add(("modname", args[0]))
    else:
        name = _UNKNOWN_EVENTS.get(event)
        if name is None:
            return
        if event == "ctypes.dlopen" and (not args or args[0] is None):
            return  # the interpreter itself
        if event == "mmap.__new__":
            fileno = args[0] if args else -1
            if not isinstance(fileno, int) or fileno < 0:
                return  # anonymous memory
            target = _fd_dir(fileno)
            if target is not None and target.startswith("/"):
                _MMAPPED.add(target)
        rec.add(("unknown", name))


def _audit_hook(event, args, _events=_EVENTS):
    global _HOOK_ERROR_COUNT
    if event not in _events:
        return
    rec = _TRACE
    if rec is None:
        return
    tls = _TLS
    if getattr(tls, "busy", False):
        return
    tls.busy = True
    try:
        _handle(event, args, rec)
    except Exception:
        try:
            _HOOK_ERROR_COUNT += 1
            if _HOOK_ERROR_COUNT <= 20:
                _HOOK_ERRORS.append(
                    "audit hook failed on %r: %s" % (event, traceback.format_exc(limit=4))
                )
        except Exception:
            pass
    finally:
        tls.busy = False


def _source_from_cache(p):
    """The source file of a bytecode file in __pycache__ (including pytest's rewritten
    'name.cpython-311-pytest-8.4.2.pyc'); None when p is not one."""
    head, name = os.path.split(p)
    if os.path.basename(head) != "__pycache__" or not name.endswith(".pyc"):
        return None
    try:
        import importlib.util

        return importlib.util.source_from_cache(p)
    except Exception:
        pass
    base = name.split(".", 1)[0]
    if not base:
        return None
    return os.path.join(os.path.dirname(head), base + ".py")


class _Quiet(object):
    """Suspends tracing on this thread (the plugin's own file access is not the test's)."""

    def __enter__(self):
        self.prev = getattr(_TLS, "busy", False)
        _TLS.busy = True
        return self

    def __exit__(self, *exc):
        _TLS.busy = self.prev
        return False


# --------------------------------------------------------------------------------------------
# path classification
# --------------------------------------------------------------------------------------------

_READ_OPS = ("read", "list", "import")


class _Prefixes(object):
    """Directories, and whether a path is one of them or under one (_Classifier._under for
    all of them in two lookups: the classifier asks this of every path a trace holds)."""

    def __init__(self, dirs):
        self.exact = frozenset(dirs)
        self.starts = tuple(d if d.endswith(os.sep) else d + os.sep for d in dirs)

    def holds(self, path):
        return path in self.exact or path.startswith(self.starts)


class _Classifier(object):
    def __init__(self, root, ignored_files):
        self.roots = []
        for r in (root, os.path.realpath(root)):
            r = os.path.normpath(r)
            if r not in self.roots:
                self.roots.append(r)
        self.ignored_files = set()
        for f in ignored_files:
            if f:
                self.ignored_files.add(os.path.abspath(f))
                self.ignored_files.add(os.path.realpath(f))
        # The interpreter's own trees: reads, listings and imports there are not recorded.
        prefixes = set()
        cands = [sys.prefix, sys.base_prefix, sys.exec_prefix, getattr(sys, "base_exec_prefix", None)]
        # the standard library (lib-dynload is inside it); site-packages come from site and
        # sys.path below. sysconfig would say the same, for 3 ms of import in every process.
        cands.append(os.path.dirname(getattr(os, "__file__", None) or ""))
        sysconfig = sys.modules.get("sysconfig")
        if sysconfig is not None:
            try:
                paths = sysconfig.get_paths()
                for k in ("stdlib", "platstdlib", "purelib", "platlib"):
                    cands.append(paths.get(k))
            except Exception:
                pass
        try:
            import site

            cands.extend(site.getsitepackages())
            cands.append(site.getusersitepackages())
        except Exception:
            pass
        cands.extend(p for p in sys.path if p and ("site-packages" in p or "dist-packages" in p))
        cands.append(os.path.dirname(_THIS_FILE))
        for c in cands:
            if not c:
                continue
            for v in (os.path.abspath(c), os.path.realpath(c)):
                v = os.path.normpath(v)
                # a prefix that holds the root (python installed in /usr, root in /usr/src/x)
                # would hide the repository: keep only prefixes that do not contain the root
                if any(self._under(r, v) for r in self.roots):
                    continue
                prefixes.add(v)
        self.interp = _Prefixes(sorted(prefixes))
        self.system = _Prefixes(("/dev", "/proc", "/sys"))
        self.in_roots = _Prefixes(self.roots)
        self.cache = {}

    @staticmethod
    def _under(path, prefix):
        if path == prefix:
            return True
        if prefix.endswith(os.sep):
            return path.startswith(prefix)
        return path.startswith(prefix + os.sep)

    def classify(self, p):
        """(kind, text, interp): kind 'rel' (text repo-relative), 'out' (text absolute) or None."""
        hit = self.cache.get(p)
        if hit is not None:
            return hit
        in_root = self.in_roots.holds(p)
        if p in self.ignored_files:
            res = (None, None, False)
        elif not in_root and self.system.holds(p):
            # The root itself may live under /dev (a sandbox on /dev/shm): only what is
            # outside it is the system's.
            res = (None, None, False)
        else:
            interp = self.interp.holds(p)
            res = None
            for r in self.roots:
                if self._under(p, r):
                    rel = p[len(r) :].lstrip(os.sep)
                    if os.sep != "/":
                        rel = rel.replace(os.sep, "/")
                    res = ("rel", _path_text(rel), interp)
                    break
            if res is None:
                res = ("out", _path_text(p), interp)
        if len(self.cache) < 200000:
            self.cache[p] = res
        return res

    def render(self, rec):
        """The trace object of the protocol from a recorded set."""
        if not rec:
            return {}
        out = {
            "read": set(),
            "write": set(),
            "list": set(),
            "remove": set(),
            "rename": set(),
            "mkdir": set(),
            "sqlite": set(),
            "import": set(),
        }
        outside = set()
        unknown = set()
        items = list(rec)
        # module names: resolve to their files now that the imports are done
        for op, val in items:
            if op == "modname":
                f = _module_file(val)
                if f is not None:
                    items.append(("import", f))
        for op, val in items:
            if op == "unknown":
                unknown.add(val)
                continue
            if op == "modname":
                continue
            if op == "rename":
                # a pair with a side in the repo is kept; its other side, when outside, is
                # written as an absolute path (repo-relative paths never start with "/")
                pair = []
                inside = False
                for side in val:
                    kind, text, _interp = self.classify(side)
                    if kind == "out":
                        outside.add((text, "rename"))
                    elif kind == "rel":
                        inside = True
                    pair.append(text if kind is not None else _path_text(side))
                if inside:
                    out["rename"].add((pair[0], pair[1]))
                continue
            kind, text, interp = self.classify(val)
            if kind is None:
                continue
            if interp and op in _READ_OPS:
                continue
            if kind == "rel":
                out[op].add(text)
            else:
                outside.add((text, op))
        # only the lists that have something (a reader takes a missing one as empty)
        res = {}
        for k in ("read", "write", "list", "remove", "mkdir", "sqlite", "import"):
            if out[k]:
                res[k] = sorted(out[k])
        if out["rename"]:
            res["rename"] = [list(p) for p in sorted(out["rename"])]
        if outside:
            res["outside"] = [{"path": p, "op": o} for p, o in sorted(outside)]
        if unknown:
            res["unknown"] = sorted(unknown)
        return res


def _module_file(name):
    try:
        mod = sys.modules.get(name)
        if mod is None:
            return None
        d = getattr(mod, "__dict__", None)
        if not isinstance(d, dict):
            return None
        f = d.get("__file__")
        if not isinstance(f, str) or not f:
            return None
        if f.endswith(".pyc") and "__pycache__" in f:
            src = _source_from_cache(f)
            if src is not None:
                f = src
        return os.path.abspath(f)
    except Exception:
        return None


# --------------------------------------------------------------------------------------------
# the lease check
# --------------------------------------------------------------------------------------------

_SKIP_DIRS = frozenset(
    [".git", ".hg", ".svn", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"]
)
_HASH_FILE_LIMIT = 64 << 20  # larger files are never hashed: any stat move counts as modified
_HASH_INITIAL_BUDGET = 256 << 20  # bytes hashed up front to know every file's content
# A file whose mtime/ctime is this close to a snapshot may be written again within the same
# timestamp tick (1-10 ms on Linux) without its stat moving: it is hashed at the next pass.
_RACY_NS = 250 * 10**6


_HASH_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)


def _file_hash(path, st):
    """Content hash of one watched entry; None when it cannot or should not be hashed."""
    fmt = stat.S_IFMT(st[4])
    if fmt == stat.S_IFLNK:
        try:
            return b"L" + os.fsencode(os.readlink(path))
        except OSError:
            return None
    if fmt != stat.S_IFREG:
        return b"special:%d" % fmt
    if st[0] > _HASH_FILE_LIMIT:
        return None
    h = hashlib.blake2b(digest_size=20)
    try:
        fd = os.open(path, _HASH_OPEN_FLAGS)
    except OSError:
        return None
    # Reads sized to the file: a 1 MiB request for a 1 KiB file costs a fresh mapping per read
    # (the buffer is allocated before the read), and the read that finds the end is as small.
    want = min(st[0] + 1, 1 << 20)
    try:
        while True:
            chunk = os.read(fd, want)
            if not chunk:
                break
            h.update(chunk)
            want = (1 << 20) if len(chunk) == want else 4096
    except OSError:
        return None
    finally:
        os.close(fd)
    return h.digest()


def _stat_tuple(st):
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, stat.S_IFMT(st.st_mode))


class _Inotify(object):
    IN_MODIFY = 0x2
    IN_ATTRIB = 0x4
    IN_CLOSE_WRITE = 0x8
    IN_MOVED_FROM = 0x40
    IN_MOVED_TO = 0x80
    IN_CREATE = 0x100
    IN_DELETE = 0x200
    IN_DELETE_SELF = 0x400
    IN_MOVE_SELF = 0x800
    IN_UNMOUNT = 0x2000
    IN_Q_OVERFLOW = 0x4000
    IN_IGNORED = 0x8000
    IN_ONLYDIR = 0x01000000
    IN_DONT_FOLLOW = 0x02000000
    IN_ISDIR = 0x40000000
    MASK = (
        IN_MODIFY
        | IN_ATTRIB
        | IN_CLOSE_WRITE
        | IN_MOVED_FROM
        | IN_MOVED_TO
        | IN_CREATE
        | IN_DELETE
        | IN_DELETE_SELF
        | IN_MOVE_SELF
        | IN_ONLYDIR
        | IN_DONT_FOLLOW
    )

    def __init__(self):
        if not sys.platform.startswith("linux"):
            raise OSError("inotify needs Linux")
        import ctypes

        self._ctypes = ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        self._init1 = libc.inotify_init1
        self._init1.argtypes = [ctypes.c_int]
        self._init1.restype = ctypes.c_int
        self._add = libc.inotify_add_watch
        self._add.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        self._add.restype = ctypes.c_int
        self.fd = -1
        self.open()

    def open(self):
        self.close()
        fd = self._init1(os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0o2000000))
        if fd < 0:
            e = self._ctypes.get_errno()
            raise OSError(e, "inotify_init1: %s" % os.strerror(e))
        self.fd = fd
        self._poller = None

    def add(self, path):
        wd = self._add(self.fd, os.fsencode(path), self.MASK)
        if wd < 0:
            e = self._ctypes.get_errno()
            raise OSError(e, "inotify_add_watch %s: %s" % (path, os.strerror(e)))
        return wd

    def pending(self):
        """Whether events are queued (one poll, no exception on the common empty case)."""
        if self._poller is None:
            import select

            self._poller = select.poll()
            self._poller.register(self.fd, select.POLLIN)
        return bool(self._poller.poll(0))

    def read(self):
        """All queued events as (wd, mask, name str); [] when none."""
        import struct

        events = []
        while True:
            try:
                data = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                break
            except InterruptedError:
                continue
            if not data:
                break
            off = 0
            n = len(data)
            while off + 16 <= n:
                wd, mask, _cookie, ln = struct.unpack_from("iIII", data, off)
                name = data[off + 16 : off + 16 + ln].split(b"\0", 1)[0]
                events.append((wd, mask, os.fsdecode(name)))
                off += 16 + ln
        return events

    def close(self):
        if self.fd >= 0:
            try:
                os.close(self.fd)
            except OSError:
                pass
        self.fd = -1
        self._poller = None


class _Lease(object):
    """Per-test detection of added, removed and modified files under the watch roots."""

    def __init__(self, root, rel_roots, exclude_files, exclude_dirs, mode="auto"):
        self.root = root
        self.exclude_files = set(exclude_files)
        self.exclude_names = set(os.path.basename(p) for p in self.exclude_files)
        self.exclude_dirs = set(exclude_dirs)
        self.roots = []  # (abs, rel)
        norm = []
        for r in rel_roots:
            r = r.replace("\\", "/").strip("/")
            parts = [x for x in r.split("/") if x not in ("", ".")]
            if any(x == ".." for x in parts):
                raise ValueError("watch root %r leaves the root" % r)
            norm.append("/".join(parts))
        norm = sorted(set(norm), key=lambda x: (x.count("/"), x))
        for r in norm:
            if any(o == "" or r == o or r.startswith(o + "/") for _a, o in self.roots):
                continue  # nested in a root already watched
            self.roots.append((os.path.join(root, *r.split("/")) if r else root, r))
        self.state = {}
        self.hashes = {}
        self.racy = set()
        self.mode = mode
        self.inotify = None
        self.wds = {}  # wd -> (abs dir, rel dir, kind, names) kind "tree" or "anchor"
        self.started = False
        self.force_full = False
        self.initial_seconds = 0.0
        self.scan_count = 0

    # ---- scanning -------------------------------------------------------------------------

    def _rel(self, parent_rel, name):
        return parent_rel + "/" + name if parent_rel else name

    def _scan_tree(self, top_abs, top_rel, out, on_dir=None):
        # The hot loop of scan mode: keep it lean (one lstat per file, no helper calls).
        skip = _SKIP_DIRS
        exclude_dirs = self.exclude_dirs
        exclude_files = self.exclude_files
        exclude_names = self.exclude_names
        scandir = os.scandir
        stack = [(top_abs, top_rel)]
        while stack:
            d, r = stack.pop()
            if on_dir is not None:
                on_dir(d, r)  # the inotify watch goes on before the listing: no gap
            prefix = r + "/" if r else ""
            try:
                it = scandir(d)
            except OSError:
                continue
            with it:
                for e in it:
                    name = e.name
                    try:
                        if e.is_dir(follow_symlinks=False):
                            if name in skip or e.path in exclude_dirs:
                                continue
                            stack.append((e.path, prefix + name))
                            continue
                        if name in exclude_names and e.path in exclude_files:
                            continue
                        st = e.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    out[prefix + name] = (
                        st.st_size,
                        st.st_mtime_ns,
                        st.st_ctime_ns,
                        st.st_ino,
                        st.st_mode & 0o170000,
                    )

    def _scan_all(self, on_dir=None):
        out = {}
        for top_abs, top_rel in self.roots:
            try:
                st = os.lstat(top_abs)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                self._scan_tree(top_abs, top_rel, out, on_dir)
            elif top_abs not in self.exclude_files:
                out[top_rel] = _stat_tuple(st)
        self.scan_count += 1
        return out

    def _abs(self, rel):
        return os.path.join(self.root, *rel.split("/")) if rel else self.root

    # ---- inotify ----------------------------------------------------------------------------

    def _watch_all(self):
        """(Re)creates every watch; returns the scanned state."""
        ino = self.inotify
        ino.open()
        self.wds = {}
        anchors = []
        for top_abs, top_rel in self.roots:
            try:
                st = os.lstat(top_abs)
                is_dir = stat.S_ISDIR(st.st_mode)
            except OSError:
                is_dir = None
            if is_dir:
                continue
            # a missing root, or a single file: watch the nearest existing parent for the name
            child_abs = top_abs
            parent_abs = os.path.dirname(child_abs)
            while True:
                try:
                    if stat.S_ISDIR(os.lstat(parent_abs).st_mode):
                        break
                except OSError:
                    pass
                nxt = os.path.dirname(parent_abs)
                if nxt == parent_abs:
                    break
                child_abs, parent_abs = parent_abs, nxt
            action = "file" if (is_dir is False and child_abs == top_abs) else "rescan"
            anchors.append((parent_abs, os.path.basename(child_abs), action, top_rel))
        for parent_abs, name, action, top_rel in anchors:
            wd = ino.add(parent_abs)
            info = self.wds.get(wd)
            if info is None:
                info = (parent_abs, None, "anchor", {})
                self.wds[wd] = info
            if info[3] is not None:
                info[3][name] = (action, top_rel)
        wds = self.wds

        def on_dir(d, r):
            wds[ino.add(d)] = (d, r, "tree", None)

        state = self._scan_all(on_dir)
        return state

    def _inotify_dirty(self):
        """(dirty rel paths, need full rescan)."""
        dirty = set()
        full = False
        I = _Inotify
        for wd, mask, name in self.inotify.read():
            if mask & I.IN_Q_OVERFLOW:
                full = True
                continue
            info = self.wds.get(wd)
            if info is None:
                continue
            if mask & (I.IN_IGNORED | I.IN_DELETE_SELF | I.IN_MOVE_SELF | I.IN_UNMOUNT):
                full = True
                continue
            d, r, kind, names = info
            if not name:
                continue
            if kind == "anchor":
                hit = names.get(name)
                if hit is not None:
                    if hit[0] == "file":
                        dirty.add(hit[1])
                    else:
                        full = True
                continue
            path = os.path.join(d, name)
            if mask & I.IN_ISDIR:
                if name in _SKIP_DIRS or path in self.exclude_dirs:
                    continue
                full = True
                continue
            if path in self.exclude_files:
                continue
            dirty.add(self._rel(r, name))
        dirty.update(_mmapped_rels(self))
        return dirty, full

    # ---- the public interface ------------------------------------------------------------------

    def start(self):
        """Takes the first snapshot (and hashes what the budget allows)."""
        t0 = time.perf_counter()
        with _Quiet():
            if self.mode in ("auto", "inotify"):
                try:
                    self.inotify = _Inotify()
                    self.state = self._watch_all()
                    self.mode = "inotify"
                except Exception:
                    if self.inotify is not None:
                        self.inotify.close()
                    self.inotify = None
                    if self.mode == "inotify":
                        raise
                    self.mode = "scan"
            if self.mode == "scan":
                t_scan = time.time_ns()
                self.state = self._scan_all()
                self.racy = self._racy_of(self.state, t_scan)
            budget = _HASH_INITIAL_BUDGET
            for rel in sorted(self.state):
                st = self.state[rel]
                if st[0] > budget:
                    continue
                h = _file_hash(self._abs(rel), st)
                if h is not None:
                    self.hashes[rel] = h
                    budget -= st[0]
        self.started = True
        self.initial_seconds = time.perf_counter() - t0

    def _racy_of(self, state, t_scan):
        limit = t_scan - _RACY_NS
        return set(rel for rel, st in state.items() if st[1] >= limit or st[2] >= limit)

    def _compare(self, rel, old, new, changed, force_hash):
        """Updates state/hashes for one path; appends to changed."""
        if new is None:
            if old is not None:
                changed.append({"path": rel, "change": "removed"})
                self.state.pop(rel, None)
                self.hashes.pop(rel, None)
            return
        if old == new and not force_hash:
            return
        path = self._abs(rel)
        if old is None:
            changed.append({"path": rel, "change": "added"})
            self.state[rel] = new
            h = _file_hash(path, new)
            if h is None:
                self.hashes.pop(rel, None)
            else:
                self.hashes[rel] = h
            return
        h = _file_hash(path, new)
        known = self.hashes.get(rel)
        if old[0] != new[0] or old[4] != new[4]:
            modified = True
        elif known is not None and h is not None:
            modified = h != known
        else:
            modified = old != new
        if modified:
            changed.append({"path": rel, "change": "modified"})
        self.state[rel] = new
        if h is None:
            self.hashes.pop(rel, None)
        else:
            self.hashes[rel] = h

    def after_test(self):
        """The changes since the previous call (or start), as [{"path", "change"}] sorted."""
        if self.mode == "inotify" and self.inotify is None:
            return []  # closed: the session is over
        if (
            self.mode == "inotify"
            and not self.force_full
            and not _MMAPPED
            and not self.inotify.pending()
        ):
            return []  # nothing moved: the common case, on the path of every test
        changed = []
        with _Quiet():
            if self.mode == "inotify":
                dirty, full = self._inotify_dirty()
                if self.force_full:
                    full = True
                    self.force_full = False
                if full:
                    t_scan = time.time_ns()
                    try:
                        new_state = self._watch_all()
                    except OSError:
                        # out of watches or instances: go on without inotify
                        self.inotify.close()
                        self.inotify = None
                        self.mode = "scan"
                        new_state = self._scan_all()
                    # files written within one mtime tick of the rescan cannot be told by stat
                    force = self._racy_of(new_state, t_scan)
                    force.update(dirty)
                    force.update(_mmapped_rels(self))
                    self._diff_full(new_state, changed, force)
                else:
                    for rel in dirty:
                        try:
                            st = os.lstat(self._abs(rel))
                            if stat.S_ISDIR(st.st_mode):
                                new = None
                            else:
                                new = _stat_tuple(st)
                        except OSError:
                            new = None
                        if new is None and rel not in self.state:
                            continue
                        if not self._in_roots(rel):
                            continue
                        self._compare(rel, self.state.get(rel), new, changed, True)
            else:
                t_scan = time.time_ns()
                new_state = self._scan_all()
                force = set(self.racy)
                force.update(_mmapped_rels(self))
                self._diff_full(new_state, changed, force)
                self.racy = self._racy_of(new_state, t_scan)
                # a racy file must have a known hash to be compared next time
                for rel in self.racy:
                    if rel not in self.hashes:
                        h = _file_hash(self._abs(rel), new_state[rel])
                        if h is not None:
                            self.hashes[rel] = h
        for c in changed:
            c["path"] = _path_text(c["path"])
        changed.sort(key=lambda c: c["path"])
        return changed

    def _in_roots(self, rel):
        for _a, r in self.roots:
            if r == "" or rel == r or rel.startswith(r + "/"):
                return True
        return False

    def _diff_full(self, new_state, changed, force):
        old_state = self.state
        if len(old_state) != len(new_state) or not old_state.keys() <= new_state.keys():
            for rel in [r for r in old_state if r not in new_state]:
                self._compare(rel, old_state[rel], None, changed, False)
        get = old_state.get
        for rel, new in new_state.items():
            old = get(rel)
            if old == new and rel not in force:
                continue
            self._compare(rel, old, new, changed, rel in force)
        self.state = new_state

    def close(self, wait=True):
        ino, self.inotify = self.inotify, None
        if ino is None:
            return
        if not wait:
            # Closing an inotify descriptor waits for the kernel to let go of its watches (an
            # RCU grace period: 1 to 15 ms here), time the end of the session can run beside.
            try:
                threading.Thread(target=ino.close, name="fixgate-inotify", daemon=True).start()
                return
            except Exception:
                pass
        ino.close()


def _mmapped_rels(lease):
    out = []
    for p in list(_MMAPPED):
        for top_abs, top_rel in lease.roots:
            if p == top_abs or p.startswith(top_abs.rstrip(os.sep) + os.sep):
                rel = p[len(top_abs) :].lstrip(os.sep).replace(os.sep, "/")
                out.append((top_rel + "/" + rel if top_rel and rel else top_rel or rel))
                break
    return out


# --------------------------------------------------------------------------------------------
# the plugin
# --------------------------------------------------------------------------------------------


class _FixgatePlugin(object):
    def __init__(self, config):
        self.config = config
        self.pid = os.getpid()
        self.fd = None
        self.lock = threading.Lock()
        self.order = None
        self.executed = []
        self.index = 0
        self.current = None  # per-test state while a test's protocol runs
        self.session_trace = set()
        self.lease = None
        self.classifier = None
        self.collect_event = bool(config.getoption("fixgate_collect", False))
        self.internal_errors = 0
        self.finished = False
        self.order_state = None  # None: not applied yet, "ok", "failed"
        # The order the reader knows (the order file, or the collected event), and the last
        # test reported: test_start is written only when the reader cannot tell which test
        # runs next (the first test, or one out of the announced order).
        self.announced = None
        self.announced_pos = None
        self.last_reported = None
        self.interrupted_in = None  # the test a clean session end interrupted, if any

        try:
            invocation = str(config.invocation_params.dir)
        except AttributeError:
            invocation = os.getcwd()

        def absolute(p):
            return os.path.normpath(os.path.join(invocation, os.path.expanduser(p)))

        root = config.getoption("fixgate_root", None)
        if root is None:
            root = str(config.rootpath)
        self.root = absolute(root)

        events = config.getoption("fixgate_events", None)
        order = config.getoption("fixgate_order", None)
        watch = config.getoption("fixgate_watch", None)
        self.events_path = absolute(events) if events is not None else None
        self.order_path = absolute(order) if order is not None else None
        self.watch_path = absolute(watch) if watch is not None else None

        if self.events_path is not None:
            try:
                self.fd = os.open(
                    self.events_path,
                    os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0),
                    0o644,
                )
            except OSError as e:
                raise pytest.UsageError(
                    "fixgate: cannot open the events file %s for writing: %s"
                    % (self.events_path, e.strerror or e)
                )
            self.emit(
                {
                    "event": "start",
                    "pid": self.pid,
                    "python": sys.version,
                    "pytest": pytest.__version__,
                    "root": _path_text(self.root),
                    "protocol": PROTOCOL_VERSION,
                    "rootdir": _path_text(str(config.rootpath)),
                    "executable": _path_text(sys.executable or ""),
                }
            )

        watch_roots = None
        try:
            if self.order_path is not None:
                self.order = self._read_order(self.order_path)
                self._announce(self.order)
            if self.watch_path is not None:
                watch_roots = self._read_watch(self.watch_path)
        except pytest.UsageError:
            # pytest stops before the session starts: end the stream here
            self.emit({"event": "finish", "exitstatus": int(pytest.ExitCode.USAGE_ERROR)})
            self._close()
            raise

        if self.fd is None:
            return  # ordering only: no trace, no lease

        ignored = [self.events_path, self.order_path, self.watch_path]
        self.classifier = _Classifier(self.root, [p for p in ignored if p])

        if watch_roots is not None:
            root_real = os.path.realpath(self.root)

            def spellings(p):
                # the lease compares paths spelled from the root: add that spelling too
                out = set([p, os.path.realpath(p)])
                real = os.path.realpath(p)
                if real.startswith(root_real + os.sep):
                    out.add(os.path.join(self.root, real[len(root_real) + 1 :]))
                return out

            excl_dirs = set()
            tmp = os.environ.get("TMPDIR")
            if tmp:
                excl_dirs.update(spellings(absolute(tmp)))
            excl_files = set()
            for p in ignored:
                if p:
                    excl_files.update(spellings(p))
            mode = os.environ.get("FIXGATE_LEASE_MODE", "auto")
            if mode not in ("auto", "scan", "inotify"):
                mode = "auto"
            try:
                self.lease = _Lease(self.root, watch_roots, excl_files, excl_dirs, mode)
            except ValueError as e:
                self.emit({"event": "finish", "exitstatus": int(pytest.ExitCode.USAGE_ERROR)})
                self._close()
                raise pytest.UsageError("fixgate: --fixgate-watch %s: %s" % (self.watch_path, e))
            # roots that hold temporary files of the run are excluded unless named directly
            self.lease.exclude_dirs = set(
                d for d in excl_dirs if not any(d == a for a, _ in self.lease.roots)
            )

        global _TRACE, _HOOK_INSTALLED
        # What was loaded before the hook could see it (conftest.py files, plugins, the
        # configuration file) belongs to the session too.
        for name in list(sys.modules):
            self.session_trace.add(("modname", name))
        inipath = getattr(config, "inipath", None)
        if inipath is not None:
            self.session_trace.add(("read", os.path.abspath(str(inipath))))
        _TRACE = self.session_trace
        if not _HOOK_INSTALLED:
            sys.addaudithook(_audit_hook)
            _HOOK_INSTALLED = True

    # ---- configuration files ----------------------------------------------------------------

    def _read_order(self, path):
        try:
            with open(path, "r", encoding="utf-8-sig", newline=None) as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise pytest.UsageError("fixgate: cannot read the order file %s: %s" % (path, e))
        ids = []
        seen = set()
        dups = []
        for line in text.split("\n"):
            line = line.rstrip("\r")
            if not line.strip():
                continue
            if line in seen:
                dups.append(line)
                continue
            seen.add(line)
            ids.append(line)
        if dups:
            msg = "fixgate: the order file %s lists node id(s) more than once: %s" % (
                path,
                ", ".join(dups[:20]) + (" ..." if len(dups) > 20 else ""),
            )
            self.emit(
                {"event": "error", "kind": "duplicate-nodeid", "message": msg, "nodeids": dups}
            )
            raise pytest.UsageError(msg)
        return ids

    def _read_watch(self, path):
        try:
            with open(path, "r", encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError) as e:
            raise pytest.UsageError("fixgate: cannot read the watch file %s: %s" % (path, e))
        roots = data.get("roots") if isinstance(data, dict) else None
        if not isinstance(roots, list) or not all(isinstance(r, str) for r in roots):
            raise pytest.UsageError(
                'fixgate: the watch file %s must hold {"roots": [str, ...]}' % path
            )
        for r in roots:
            if os.path.isabs(r):
                raise pytest.UsageError(
                    "fixgate: watch root %r in %s must be relative to the root" % (r, path)
                )
        return roots

    # ---- events -------------------------------------------------------------------------------

    def emit(self, obj):
        if self.fd is None or os.getpid() != self.pid:
            return
        try:
            line = _ENCODE(obj)
        except (TypeError, ValueError):
            line = json.dumps(_jsonable(obj), ensure_ascii=False, separators=(",", ":"))
        self.write_line(line)

    def write_line(self, line):
        """Writes one event, a JSON text without its newline, in one write."""
        if self.fd is None or os.getpid() != self.pid:
            return
        data = (line + "\n").encode("utf-8", "replace")
        with self.lock:
            fd = self.fd
            if fd is None:
                return
            view = memoryview(data)
            try:
                while view:
                    n = os.write(fd, view)
                    view = view[n:]
            except OSError:
                self.fd = None  # the reader is gone; keep the run going

    def internal(self, where):
        self.internal_errors += 1
        if self.internal_errors > 50:
            return
        try:
            detail = traceback.format_exc(limit=6)
        except Exception:
            detail = ""
        self.emit(
            {
                "event": "error",
                "kind": "internal",
                "message": "fixgate plugin: %s failed: %s" % (where, detail.strip()),
            }
        )

    def _drain_hook_errors(self):
        while _HOOK_ERRORS:
            msg = _HOOK_ERRORS.pop(0)
            self.emit({"event": "error", "kind": "internal", "message": "fixgate plugin: " + msg})

    # ---- collection -----------------------------------------------------------------------------

    def _apply_order(self, config, items):
        by_id = {}
        for it in items:
            by_id.setdefault(it.nodeid, it)
        missing = [n for n in self.order if n not in by_id]
        if missing:
            msg = "fixgate: --fixgate-order lists %d node id(s) that were not collected: %s" % (
                len(missing),
                ", ".join(missing[:20]) + (" ..." if len(missing) > 20 else ""),
            )
            self.emit(
                {"event": "error", "kind": "unknown-nodeid", "message": msg, "nodeids": missing}
            )
            raise pytest.UsageError(msg)
        new = [by_id[n] for n in self.order]
        keep = set(id(it) for it in new)
        deselected = [it for it in items if id(it) not in keep]
        items[:] = new
        if deselected:
            config.hook.pytest_deselected(items=deselected)

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_collection_modifyitems(self, session, config, items):
        outcome = yield
        if self.order is None or outcome.excinfo is not None:
            self.order_state = "failed"
            return
        self.order_state = "failed"
        self._apply_order(config, items)
        self.order_state = "ok"

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_finish(self, session):
        # A wrapper registered after ours sits outside it and could still have reordered the
        # items: check, and apply the order once more.
        if self.order is not None and self.order_state == "ok":
            if [it.nodeid for it in session.items] != self.order:
                self.order_state = "failed"
                self._apply_order(self.config, session.items)
                self.order_state = "ok"
        if self.order is not None and self.order_state != "ok":
            return
        if self.collect_event and self.fd is not None:
            try:
                nodeids = [it.nodeid for it in session.items]
                if self.config.getoption("collectonly", False):
                    items = [self._item_info(it) for it in session.items]
                    self.emit({"event": "collected", "items": items})
                else:
                    # A run that collects for itself needs only the order: files, lines and
                    # markers cost a tenth of a millisecond per test.
                    self.write_line(
                        '{"event":"collected","items":[%s]}'
                        % ",".join('{"nodeid":%s}' % _JSON_STRING(n) for n in nodeids)
                    )
                if self.announced is None and self.fd is not None:
                    self._announce(nodeids)
            except Exception:
                self.internal("collected event")

    def _announce(self, nodeids):
        self.announced = nodeids
        self.announced_pos = dict((n, i) for i, n in enumerate(nodeids))

    def _announced_next(self, nodeid):
        """Whether the reader, having seen the result of the last reported test, expects
        `nodeid` to run now."""
        if self.last_reported is None or self.announced is None:
            return False
        i = self.announced_pos.get(self.last_reported)
        return i is not None and i + 1 < len(self.announced) and self.announced[i + 1] == nodeid

    def _item_info(self, item):
        path = getattr(item, "path", None)
        if path is None:
            path = getattr(item, "fspath", None)
        file = None
        if path is not None:
            kind, text, _ = self.classifier.classify(os.path.abspath(str(path)))
            file = text if kind is not None else _path_text(os.path.abspath(str(path)))
        line = None
        try:
            loc = item.location
            if isinstance(loc[1], int):
                line = loc[1] + 1
        except Exception:
            pass
        markers = []
        for m in item.iter_markers():
            if m.name == "parametrize":
                continue
            markers.append(
                {
                    "name": m.name,
                    "args": [_jsonable(a) for a in m.args],
                    "kwargs": {str(k): _jsonable(v) for k, v in m.kwargs.items()},
                }
            )
        # unittest's @skip / @skipIf / @skipUnless are not pytest markers, but they are skips
        # all the same: report them as one, so a new one counts against the budget.
        for target in (getattr(item, "obj", None), getattr(item, "cls", None)):
            try:
                if target is not None and getattr(target, "__unittest_skip__", False):
                    why = getattr(target, "__unittest_skip_why__", "") or ""
                    markers.append({"name": "skip", "args": [], "kwargs": {"reason": str(why)}})
                    break
            except Exception:
                pass
        return {"nodeid": item.nodeid, "file": file, "line": line, "markers": markers}

    def pytest_collectreport(self, report):
        if report.skipped:
            # a module skipped at collection (pytest.skip(allow_module_level=True) or a
            # skip marker on a collector): its tests never appear as items
            try:
                self.emit(
                    {
                        "event": "collect_skip",
                        "nodeid": report.nodeid,
                        "reason": _skip_reason(report),
                    }
                )
            except Exception:
                self.internal("collect_skip event")
            return
        if not report.failed:
            return
        try:
            text = _longrepr_text(report.longrepr)
            self.emit(
                {
                    "event": "collect_error",
                    "nodeid": report.nodeid,
                    "message": _error_line(text) or "collection failed",
                    "longrepr": text[:16000],
                }
            )
        except Exception:
            self.internal("collect_error event")

    # ---- running ----------------------------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session):
        if self.lease is None or self.lease.started:
            return None
        if session.config.option.collectonly:
            return None
        if session.testsfailed and not session.config.option.continue_on_collection_errors:
            return None  # pytest stops on collection errors: nothing will run
        try:
            self.lease.start()
            self.emit(
                {
                    "event": "lease",
                    "mode": self.lease.mode,
                    "files": len(self.lease.state),
                    "hashed": len(self.lease.hashes),
                    "roots": [r for _a, r in self.lease.roots],
                    "seconds": round(self.lease.initial_seconds, 6),
                }
            )
        except Exception:
            self.lease = None
            self.internal("lease start")
        return None

    # pluggy 1.2+ runs new-style wrappers without the Result object and the extra frames of an
    # old-style one: on the path of every test, so the plugin takes it when pluggy has it.
    if _NEW_STYLE_WRAPPERS:

        @pytest.hookimpl(wrapper=True, tryfirst=True)
        def pytest_runtest_protocol(self, item, nextitem):
            cur = self._test_start(item)
            try:
                result = yield
            except BaseException:
                self._test_end(item, cur, True)
                raise
            self._test_end(item, cur, False)
            return result

    else:

        @pytest.hookimpl(hookwrapper=True, tryfirst=True)
        def pytest_runtest_protocol(self, item, nextitem):
            cur = self._test_start(item)
            outcome = yield
            self._test_end(item, cur, outcome.excinfo is not None)

    def _test_start(self, item):
        """Before the test's protocol: its record, started (None only when even that failed)."""
        global _TRACE
        cur = None
        try:
            self.executed.append(item.nodeid)
            cur = {
                "nodeid": item.nodeid,
                "index": self.index,
                "reports": {},
                "reruns": 0,
                "rerun_messages": [],
                "start": time.time(),
                "trace": set(),
            }
            self.index += 1
            self.current = cur
            if not self._announced_next(item.nodeid):
                self.emit({"event": "test_start", "nodeid": item.nodeid, "index": cur["index"]})
            if self.lease is not None and not self.lease.started:
                self.lease.start()
            if self.fd is not None:
                _TRACE = cur["trace"]
            return cur
        except Exception:
            self.internal("test start")
            return cur  # the reports still come, and the test still gets its event

    def _test_end(self, item, cur, interrupted):
        global _TRACE
        _TRACE = self.session_trace if self.fd is not None else None
        self.current = None
        if cur is None:
            return
        try:
            cur["end"] = time.time()
            if interrupted:
                # interrupted (KeyboardInterrupt, pytest.exit): no result for this test, which
                # the finish event names; the lease pass still runs so the next process starts
                # from the right state
                self.interrupted_in = cur["nodeid"]
                if self.lease is not None:
                    self.lease.after_test()
                return
            self._finish_test(item, cur)
        except Exception:
            self.internal("test result")

    def pytest_runtest_logreport(self, report):
        cur = self.current
        if cur is None or report.nodeid != cur["nodeid"]:
            return
        try:
            if report.outcome == "rerun":
                cur["reruns"] += 1
                cur["rerun_messages"].append(
                    "%s: %s" % (report.when, _report_message(report) or "failed")
                )
                cur["reports"] = {}
                return
            if _is_subtest_report(report):
                # Subtest reports (unittest's subTest under pytest 9, pytest-subtests) come
                # with when="call" before the test's own report: a failed subtest must not be
                # overwritten by the test's passing call report.
                if report.failed and cur.get("subtest_failure") is None:
                    cur["subtest_failure"] = report
                return
            cur["reports"][report.when] = report
        except Exception:
            self.internal("logreport")

    def _finish_test(self, item, cur):
        changed = []
        if self.lease is not None:
            try:
                changed = self.lease.after_test()
            except Exception:
                self.lease.force_full = True  # resynchronise on the next test
                self.internal("lease check")
        if self.fd is None:
            return
        reports = cur["reports"]
        phases = []
        for when in ("setup", "call", "teardown"):
            rep = reports.get(when)
            if rep is not None:
                duration = getattr(rep, "duration", 0.0) or 0.0
                phases.append(_phase_json(when, rep.outcome, duration, _report_message(rep)))
        setup = reports.get("setup")
        call = reports.get("call")
        teardown = reports.get("teardown")
        outcome = "error"
        skip_reason = None
        xfail_reason = None
        failing = None
        if setup is not None and setup.failed:
            outcome = "error"
            failing = setup
        elif setup is not None and setup.skipped:
            if hasattr(setup, "wasxfail"):
                outcome = "xfailed"
                xfail_reason = setup.wasxfail
            else:
                outcome = "skipped"
                skip_reason = _skip_reason(setup)
        elif call is not None:
            if call.failed:
                outcome = "failed"
                failing = call
            elif call.skipped:
                if hasattr(call, "wasxfail"):
                    outcome = "xfailed"
                    xfail_reason = call.wasxfail
                else:
                    outcome = "skipped"
                    skip_reason = _skip_reason(call)
            elif hasattr(call, "wasxfail"):
                outcome = "xpassed"
                xfail_reason = call.wasxfail
            else:
                outcome = "passed"
        elif setup is not None and setup.passed:
            outcome = "passed"  # no call report: a plugin ran only setup/teardown
        subfailed = cur.get("subtest_failure")
        if subfailed is not None and outcome in ("passed", "skipped", "xpassed"):
            outcome = "failed"
            failing = subfailed
            skip_reason = None
        if teardown is not None and teardown.failed:
            outcome = "error"
            if failing is None:
                failing = teardown
        message = None
        if outcome in ("failed", "error"):
            message = _report_message(failing) if failing is not None else None
            if message is None and not reports:
                message = "no test reports were produced"
        writes = []
        try:
            for m in item.iter_markers("writes"):
                for a in m.args:
                    a = a if isinstance(a, str) else str(a)
                    if a not in writes:
                        writes.append(a)
        except Exception:
            self.internal("writes marker")
        try:
            trace = self.classifier.render(cur["trace"])
        except Exception:
            trace = {}
            self.internal("trace rendering")
        self._drain_hook_errors()
        # Optional fields are written only when they say something: most tests pass, read
        # nothing, change nothing, and the event is on the path of every test.
        event = {}
        if skip_reason is not None:
            event["skip_reason"] = skip_reason
        if xfail_reason is not None:
            event["xfail_reason"] = str(xfail_reason)
        if message is not None:
            event["message"] = message
        if cur["reruns"]:
            event["reruns"] = cur["reruns"]
            event["rerun_messages"] = cur["rerun_messages"]
        if writes:
            event["writes_marker"] = writes
        if trace:
            event["trace"] = trace
        if changed:
            event["changed"] = changed
        try:
            line = _test_line(
                cur["nodeid"], cur["index"], outcome, phases, cur["start"], cur["end"], event
            )
        except (TypeError, ValueError):  # an optional field the encoder refuses
            line = _test_line(
                cur["nodeid"], cur["index"], outcome, phases, cur["start"], cur["end"], {}
            )
            line = line[:-1] + "," + _ENCODE(_jsonable(event))[1:]
        self.write_line(line)
        if self.fd is not None:
            self.last_reported = cur["nodeid"]

    # ---- the end ----------------------------------------------------------------------------------

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_sessionfinish(self, session, exitstatus):
        global _TRACE
        try:
            if self.order is not None:
                requested = self.order[: len(self.executed)]
                if self.executed != requested:
                    diverge = 0
                    while diverge < len(requested) and self.executed[diverge] == requested[diverge]:
                        diverge += 1
                    msg = (
                        "fixgate: the executed order differs from the requested order at position "
                        "%d: ran %r, expected %r"
                        % (
                            diverge,
                            self.executed[diverge] if diverge < len(self.executed) else None,
                            requested[diverge] if diverge < len(requested) else None,
                        )
                    )
                    self.emit(
                        {
                            "event": "error",
                            "kind": "order-mismatch",
                            "message": msg,
                            "executed": self.executed,
                        }
                    )
                    if self.fd is None:
                        sys.stderr.write(msg + "\n")
                    if int(session.exitstatus) in (0, 1, 5):
                        session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
        except Exception:
            self.internal("order check")
        if self.lease is not None:
            self.lease.close(wait=False)  # no test runs after this
        yield
        try:
            if self.fd is not None and not self.finished:
                self.finished = True
                _TRACE = None
                try:
                    trace = self.classifier.render(self.session_trace)
                except Exception:
                    trace = {}
                    self.internal("session trace")
                self._drain_hook_errors()
                self.emit({"event": "session_trace", "trace": trace})
                self.emit(
                    {
                        "event": "finish",
                        "exitstatus": int(session.exitstatus),
                        "running": self.interrupted_in,
                    }
                )
        except Exception:
            self.internal("finish")

    def pytest_unconfigure(self, config):
        global _TRACE
        _TRACE = None
        if self.lease is not None:
            self.lease.close()
        self._close()

    def _close(self):
        with self.lock:
            if self.fd is not None:
                try:
                    os.close(self.fd)
                except OSError:
                    pass
                self.fd = None


# --------------------------------------------------------------------------------------------
# rewritten test modules, cached by content
# --------------------------------------------------------------------------------------------
#
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
