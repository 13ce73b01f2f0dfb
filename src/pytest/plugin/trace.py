"""fixgate plugin: the trace, an audit hook that records the file accesses, listings, imports
and SQLite connections of the running test into the active trace set."""

import os
import sys
import threading
import traceback

# The plugin's own source files (every module of it sits in one directory): their frames are
# skipped when the hook looks for who made a call.
_PLUGIN_DIR = os.path.dirname(os.path.abspath(__file__))
try:
    _PLUGIN_FILES = frozenset(
        os.path.join(_PLUGIN_DIR, n)
        for n in os.listdir(_PLUGIN_DIR)
        if n.startswith("fixgate_plugin") and n.endswith(".py")
    )
except OSError:  # pragma: no cover - the directory went away under us
    _PLUGIN_FILES = frozenset([os.path.abspath(__file__)])


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
        # The network, whatever the address (loopback included: a server another test
        # started is shared state the fingerprint cannot see).
        "socket.connect",
        "socket.sendto",
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
        if fn not in _PLUGIN_FILES:
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


# Where pytest walks the tree while collecting (its directories, a package's files).
_WALK_FILES = ("_pytest/pathlib.py", "_pytest/main.py", "_pytest/python.py")


def _caller_is_walk():
    """Whether the audited listing is pytest's own walk of the tree: the first caller outside
    this plugin is pytest's collection code."""
    try:
        f = sys._getframe(1)
    except Exception:
        return False
    while f is not None:
        fn = f.f_code.co_filename
        if fn not in _PLUGIN_FILES:
            return fn.replace(os.sep, "/").endswith(_WALK_FILES)
        f = f.f_back
    return False


def _caller_is_rmtree():
    try:
        f = sys._getframe(1)
    except Exception:
        return False
    n = 0
    while f is not None and n < 4:
        if f.f_code.co_filename not in _PLUGIN_FILES:
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
            # Beside pytest's own walk of the tree (which makes items of Python files only),
            # what the suite's code listed: a folder it parametrizes over.
            if not _caller_is_walk():
                rec.add(("list_code", p))
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
    elif event == "socket.connect" or event == "socket.sendto":
        address = args[1] if len(args) > 1 else None
        if isinstance(address, tuple):
            address = ":".join(str(a) for a in address[:2])
        rec.add(("network", str(address)))
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


def install():
    """Installs the audit hook, once per interpreter (an audit hook cannot be removed: it stays
    and returns at once while no trace is active)."""
    global _HOOK_INSTALLED
    if not _HOOK_INSTALLED:
        sys.addaudithook(_audit_hook)
        _HOOK_INSTALLED = True


def record_into(target):
    """Makes `target` (a set) the trace the hook adds to, or stops recording with None; returns
    the trace that was active, so a caller can put it back."""
    global _TRACE
    previous = _TRACE
    _TRACE = target
    return previous


def drain_errors():
    """The hook's own failures since the last call, as messages (the hook cannot report them
    itself: it runs inside whatever call it audits)."""
    out = []
    while _HOOK_ERRORS:
        out.append(_HOOK_ERRORS.pop(0))
    return out


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

