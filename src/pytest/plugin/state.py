"""fixgate plugin: whether a test left shared state changed behind it. After every test the
process's shared state is fingerprinted and compared with the fingerprint after the test
before: the environment, the working directory, sys.path, the modules in sys.modules (removed or
replaced, not added: a first import is no leak), threads left running, and the module-level
values of the repository's own modules (test modules included).

A module's fingerprint is cheap on purpose: for every global, the value's identity, and for a
container, an instance or a class also its size and the identities of what it holds, one level
down the sizes of containers it holds, and the fill of an lru_cache. An assignment, an insert,
a removal, a replaced item or a grown inner list show; a change deeper down, or inside an
object whose state lives in C, does not (docs/impact.md says so)."""

import os
import sys
import threading

# Globals every module has, or that Python and pytest write on their own (warnings'
# __warningregistry__, the assertion rewriter's @py_builtins): never a test's state.
_SKIP = frozenset(
    [
        "__builtins__",
        "__loader__",
        "__spec__",
        "__cached__",
        "__warningregistry__",
        "__file__",
        "__name__",
        "__package__",
        "__doc__",
        "__path__",
        "__annotations__",
        "@py_builtins",
        "@pytest_ar",
    ]
)
_CONTAINERS = (dict, list, set, frozenset, tuple, bytearray)
# Above this many items, only the size and the first items' identities are compared.
_MAX_ITEMS = 4096
_FIRST = 64


def _items(v):
    """The identities a container holds (keys and values of a dict), bounded."""
    if isinstance(v, dict):
        if len(v) > _MAX_ITEMS:
            return tuple(map(id, list(v.values())[:_FIRST]))
        return tuple(map(id, v)) + tuple(map(id, v.values()))
    if isinstance(v, (set, frozenset)):
        if len(v) > _MAX_ITEMS:
            return ()
        return tuple(sorted(map(id, v)))
    if len(v) > _MAX_ITEMS:
        return tuple(map(id, v[:_FIRST]))
    return tuple(map(id, v))


def _inner(v):
    """One level down: the sizes of the containers a container holds."""
    values = v.values() if isinstance(v, dict) else v
    if len(v) > _MAX_ITEMS:
        return ()
    return tuple(len(x) if isinstance(x, _CONTAINERS) else -1 for x in values)


def _fingerprint(v, _containers=_CONTAINERS, _type=type):
    t = _type(v)
    if t is int or t is str or t is float or t is bool or v is None:
        return id(v)
    if isinstance(v, _containers):
        if isinstance(v, bytearray):
            return (id(v), len(v), hash(bytes(v[:_MAX_ITEMS])))
        return (id(v), len(v), hash(_items(v)), hash(_inner(v)))
    info = getattr(v, "cache_info", None)
    if info is not None and t.__name__ == "_lru_cache_wrapper":
        try:
            return (id(v), info().currsize)
        except Exception:
            return id(v)
    if isinstance(v, type(sys)):
        return id(v)  # another module: fingerprinted as itself when it is the repository's
    if callable(v) and not isinstance(v, type):
        return id(v)
    d = getattr(v, "__dict__", None)
    if d is not None:
        try:
            d = dict(d)
        except Exception:
            return id(v)
        return (id(v), len(d), hash(_items(d)), hash(_inner(d)))
    return id(v)


def _deep(v, _containers=_CONTAINERS):
    """Whether a value can change without being replaced (its identity says nothing then)."""
    t = type(v)
    if t is int or t is str or t is float or t is bool or v is None:
        return False
    if isinstance(v, _containers) or isinstance(v, type):
        return True
    if isinstance(v, type(sys)):
        return False
    if callable(v):
        return t.__name__ == "_lru_cache_wrapper"
    return getattr(v, "__dict__", None) is not None


class _ModulePrint(object):
    """One module's fingerprint: the identities of its globals (compared first, at C speed),
    and the fingerprints of the values that can change in place."""

    __slots__ = ("names", "ids", "deep")

    def __init__(self, d):
        self.names = tuple(d)
        self.ids = tuple(map(id, d.values()))
        self.deep = {}
        for name, value in d.items():
            if name not in _SKIP and _deep(value):
                try:
                    self.deep[name] = _fingerprint(value)
                except Exception:
                    self.deep[name] = id(value)

    def changed(self, d, old):
        """The globals that differ between `old` (this print's module before) and `d` now."""
        out = []
        if self.names != old.names or self.ids != old.ids:
            before = dict(zip(old.names, old.ids))
            now = dict(zip(self.names, self.ids))
            for name in set(before) | set(now):
                if name not in _SKIP and before.get(name) != now.get(name):
                    out.append(name)
        for name, fp in self.deep.items():
            if old.deep.get(name, fp) != fp and name not in out:
                out.append(name)
        return out


def _module_dict(m):
    d = getattr(m, "__dict__", None)
    return d if isinstance(d, dict) else {}


class State(object):
    """The fingerprint after the last test, and what each test changed of it."""

    def __init__(self, classifier):
        self.classifier = classifier
        self.repo_modules = {}  # module name -> (repo-relative file, module)
        self.known = 0  # len(sys.modules) when repo_modules was last brought up to date
        self.prints = {}  # module name -> {global: fingerprint}
        self.extensions = set()  # repo-relative files of C extension modules
        self.env = None
        self.cwd = None
        self.path = None
        self.modules = None
        self.threads = 0

    def _environ(self):
        data = getattr(os.environ, "_data", None)
        return dict(data) if isinstance(data, dict) else dict(os.environ)

    def _cwd(self):
        try:
            return os.getcwd()
        except OSError:
            return None

    def _refresh_modules(self):
        """Adds the repository's modules imported since the last look."""
        mods = sys.modules
        if len(mods) == self.known:
            return
        self.known = len(mods)
        for name, m in list(mods.items()):
            if name in self.repo_modules or m is None:
                continue
            f = getattr(m, "__file__", None)
            if not isinstance(f, str) or not f:
                continue
            try:
                kind, text, interp = self.classifier.classify(os.path.abspath(f))
            except Exception:
                continue
            if kind != "rel" or interp:
                continue
            if f.endswith((".so", ".pyd")):
                self.extensions.add(text)
                continue
            self.repo_modules[name] = (text, m)
            self.prints[name] = _ModulePrint(_module_dict(m))

    def baseline(self):
        """Before the first test: the state collection left."""
        self._refresh_modules()
        self.env = self._environ()
        self.cwd = self._cwd()
        self.path = list(sys.path)
        self.modules = dict(sys.modules)
        self.threads = threading.active_count()

    def after_test(self):
        """What the test changed, as sorted strings `kind:detail` (docs/plugin-protocol.md),
        and the new fingerprint."""
        if self.env is None:
            self.baseline()
            return []
        changed = []
        env = self._environ()
        if env != self.env:
            for k in set(env) | set(self.env):
                if env.get(k) != self.env.get(k):
                    key = k.decode("utf-8", "replace") if isinstance(k, bytes) else str(k)
                    changed.append("env:" + key)
            self.env = env
        cwd = self._cwd()
        if cwd != self.cwd:
            changed.append("cwd:")
            self.cwd = cwd
        if sys.path != self.path:
            changed.append("sys.path:")
            self.path = list(sys.path)
        mods = sys.modules
        if not (self.modules.items() <= mods.items()):
            for k, m in self.modules.items():
                if mods.get(k) is not m:
                    changed.append("sys.modules:" + str(k))
        if len(mods) != len(self.modules) or changed:
            self.modules = dict(mods)
        threads = threading.active_count()
        if threads > self.threads:
            changed.append("threads:%d" % (threads - self.threads))
        self.threads = threads
        before = set(self.repo_modules)
        self._refresh_modules()
        for name, (path, m) in self.repo_modules.items():
            if name not in before:
                continue  # imported by this test: its globals are new, not changed
            d = _module_dict(m)
            old = self.prints[name]
            if len(d) == len(old.names) and tuple(map(id, d.values())) == old.ids:
                # The fast path: no global was rebound; only values that change in place
                # are looked into.
                moved = []
                for g, fp in old.deep.items():
                    v = d.get(g)
                    try:
                        now = _fingerprint(v)
                    except Exception:
                        now = id(v)
                    if now != fp:
                        moved.append(g)
                        old.deep[g] = now
            else:
                now = _ModulePrint(d)
                moved = now.changed(d, old)
                self.prints[name] = now
            for g in moved:
                changed.append("global:%s:%s" % (path, g))
        for e in sorted(self.extensions):
            changed.append("extension:" + e)
        self.extensions.clear()
        changed.sort()
        return changed
