"""fixgate plugin: whether a test left shared state changed behind it. After every test the
process's shared state is compared with what it was after the test before: the environment, the
working directory, sys.path, the modules in sys.modules (removed or replaced, not added: a first
import is no leak), threads left running, and the module-level values of the repository's own
modules (test modules included).

The module values are compared in one pass at C speed: the list of every global of every
repository module (compared by identity first, then ==, so a value rebound to an equal one is no
change), and for the globals that can change in place (containers, instances, classes, an
lru_cache) their shallow contents (a dict's keys and values, a list's items, a class's or an
instance's attributes, a set's size and the sum of its items' identities), the sizes of the
containers those hold, and an lru_cache's fill. Only when that pass differs is each module looked
at by name, to say which global changed (an lru_cache filled with values nothing changes in place
is named `cache:`, with its function's file and name: fixgate decides from the function's source
whether that is state). A change deeper down, or inside an object whose state
lives in C, is not seen (docs/impact.md says so). The pass costs a few microseconds per hundred
globals; the per-global fingerprints before it cost a Python call per global and module after
every test (docs/performance.md).

The other modules' globals (the standard library's, installed packages') are compared the same
way, by identity only: a library function replaced for good (`json.dumps = fake`), a
configuration value rebound, a name deleted. A global added is no change (a submodule's first
import adds its name to its package), and neither is one set where it was None: that is how a
library fills its caches lazily (tempfile.tempdir, pkgutil's name pattern), so a test that
installs a value for good where a library keeps None is not seen (docs/impact.md says so).
Their contents are not compared: a library's caches fill as any test runs. pytest's, pluggy's
and this plugin's own modules are left out (they rebind their globals around every test), and
so are the globals Python sets after a failure (sys.last_value and its kin) and a few that a
plugin's hooks keep (_OUTSIDE_BOOKKEEPING: Hypothesis's).

The process settings a test can change in place (the loggers, decimal's context, the signal
handlers and their kin) are read and compared by fixgate_plugin_settings, and named `setting:`.
"""

import gc
import os
import sys
import threading
from itertools import chain, compress
from operator import is_, methodcaller

import fixgate_plugin_settings as _settings

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
# The test runner's own modules, which rebind their globals around every test (the assertion
# rewriter's hooks, the capture's streams): never a test's state.
_RUNNER = ("_pytest", "pytest", "pluggy", "fixgate_plugin", "py", "__main__", "iniconfig")
# Globals of sys that Python sets on its own: the last uncaught exception (sys.last_value and
# its kin).
_OUTSIDE_SKIP = frozenset(["last_type", "last_value", "last_traceback", "last_exc"])
# Other modules' globals that a pytest plugin's hooks or a garbage collection rebind around
# tests, which no test's outcome reads: Hypothesis's time spent collecting garbage (a gc
# callback, installed at its first test, after any test), its cache of the constants in the
# modules imported so far (rebuilt when sys.modules grows), the flags its plugin sets before
# every test, and its count of initialisations (the first `import hypothesis` lowers it; it
# only gates a warning). And `builtins._`, the last value the interactive display hook showed,
# which every doctest example that shows a value sets (as sys.last_value is the excepthook's).
_OUTSIDE_BOOKKEEPING = frozenset(
    [
        ("builtins", "_"),
        ("hypothesis.internal.conjecture.junkdrawer", "_gc_initialized"),
        ("hypothesis.internal.conjecture.junkdrawer", "_gc_start"),
        ("hypothesis.internal.conjecture.junkdrawer", "_gc_cumulative_time"),
        ("hypothesis.internal.conjecture.providers", "_sys_modules_len"),
        ("hypothesis.internal.conjecture.providers", "_local_constants"),
        ("hypothesis.core", "running_under_pytest"),
        ("hypothesis.core", "pytest_shows_exceptiongroups"),
        ("_hypothesis_globals", "in_initialization"),
    ]
)
# The names each look at another module leaves out, by module: what Python and the plugins
# above rebind around tests. Left out of the one comparison of all values, not only of the look
# at each module, so that a run of failing tests (each one sets sys.last_value) costs a test no
# more than a passing one.
_MASKED = _OUTSIDE_BOOKKEEPING | frozenset(("sys", n) for n in _OUTSIDE_SKIP)
_OUTSIDE_MASKS = dict(
    (module, tuple(sorted(n for m, n in _MASKED if m == module)))
    for module in set(m for m, _ in _MASKED)
)
_CONTAINERS = (dict, list, set, frozenset, tuple, bytearray)
_IS_CONTAINER = frozenset([dict, list, set, frozenset, tuple, bytearray]).__contains__
# Above this many items a container is compared by its size only.
_MAX_ITEMS = 4096
_VALUES = methodcaller("values")
# CPython's gc lists a module dict's values (its keys are all str) in one C call, about twice as
# fast as iterating the dicts; elsewhere the dicts are iterated.
_REFERENTS = gc.get_referents if sys.implementation.name == "cpython" else None
_KEYS = methodcaller("keys")
_MODULE = type(sys)


def _kind(v):
    """How a global that can change in place is compared: "dict", "seq", "set", "bytes",
    "attrs" (a class's or an instance's __dict__), "lru"; None for one that cannot (an int, a
    str, a function, another module) or that is too large to copy."""
    t = type(v)
    if t is int or t is str or t is float or t is bool or v is None:
        return None
    if isinstance(v, dict):
        return "dict" if len(v) <= _MAX_ITEMS else "size"
    if isinstance(v, (list, tuple)):
        return "seq" if len(v) <= _MAX_ITEMS else "size"
    if isinstance(v, (set, frozenset)):
        return "set" if len(v) <= _MAX_ITEMS else "size"
    if isinstance(v, bytearray):
        return "bytes" if len(v) <= _MAX_ITEMS else "size"
    if isinstance(v, _MODULE):
        return None  # another module: compared as itself when it is the repository's
    if t.__name__ == "_lru_cache_wrapper" and getattr(v, "cache_info", None) is not None:
        return "lru"
    if callable(v) and not isinstance(v, type):
        return None
    d = getattr(v, "__dict__", None)
    if d is None:
        return None
    try:
        n = len(d)
    except Exception:
        return None
    return "attrs" if n <= _MAX_ITEMS else None


def _lru_fill(v):
    try:
        return v.cache_info().currsize
    except Exception:
        return -1


# Values no code can change in place: what an lru_cache holding only these hands out is what a
# call would compute again, when the function reads nothing but its arguments (fixgate tells
# that from its source). A bare object() is the cache's own keyword marker.
_FROZEN = frozenset([int, float, complex, str, bytes, bool, type(None), object])


def _frozen(v, depth=0):
    t = type(v)
    if t in _FROZEN:
        return True
    if (t is tuple or t is frozenset) and depth < 8 and len(v) <= _MAX_ITEMS:
        return all(_frozen(x, depth + 1) for x in v)
    return False


# What a cache's keys may hold: a later call with an equal argument hits the entry, so an
# argument that equals one of another type or sign (1.0 and True for 1, -0.0 for 0.0, equal
# frozensets that iterate apart) would get what the other computed. A bare object() is the
# keyword marker; builtin types are what `typed=True` adds.
_KEY_FROZEN = frozenset([int, str, bytes, type(None), object])
_KEY_TYPES = frozenset([int, str, bytes, type(None), tuple, float, bool])


def _key_frozen(v, depth=0):
    t = type(v)
    if t in _KEY_FROZEN or v in _KEY_TYPES:
        return True
    if t is tuple and depth < 8 and len(v) <= _MAX_ITEMS:
        return all(_key_frozen(x, depth + 1) for x in v)
    return False


def _lru_types():
    """The types an lru_cache wrapper lists among what it holds: its links' and its
    cache_info's (a class as a key or a result is no frozen value)."""
    import functools

    @functools.lru_cache
    def probe(x):
        return x

    probe(0)
    kinds = [r for r in (_REFERENTS(probe) if _REFERENTS else ()) if isinstance(r, type)]
    link = next((t for t in kinds if t.__name__ == "_lru_list_elem"), None)
    info = next((t for t in kinds if t.__name__ == "CacheInfo"), None)
    return type(probe), link, info


try:
    _LRU_TYPE, _LRU_LINK, _CACHE_INFO = _lru_types()
except Exception:
    _LRU_TYPE = _LRU_LINK = _CACHE_INFO = None


def _lru_frozen(v):
    """Whether every key and result an lru_cache holds is a value nothing can change in place,
    read through gc (CPython's wrapper lists its links' keys and results, its cache dict, its
    function, its keyword marker and its types); False where that cannot be told."""
    if _REFERENTS is None or _LRU_LINK is None or _CACHE_INFO is None:
        return False
    if type(v) is not _LRU_TYPE:
        return False  # a class of the same name, whose state lives where this does not look
    try:
        own = getattr(v, "__dict__", None)
        func = getattr(v, "__wrapped__", None)
        held = []
        caches = []
        for r in _REFERENTS(v):
            if r is own or r is func or r is type(v) or r is _LRU_LINK or r is _CACHE_INFO:
                continue
            if type(r) is dict:
                caches.append(r)
            else:
                held.append(r)
        # The cache: keys to results (unbounded) or to the links whose keys and results are
        # listed above. Another dict is a result, which is no frozen value.
        if len(caches) != 1 or len(caches[0]) != v.cache_info().currsize:
            return False
        if not all(map(_key_frozen, caches[0])):
            return False
        held.extend(x for x in _REFERENTS(caches[0]) if type(x) is not _LRU_LINK)
        return len(held) <= 4 * _MAX_ITEMS and all(map(_frozen, held))
    except Exception:
        return False


class _Deep(object):
    """The globals that can change in place, grouped by how they are compared, and their
    names (module name, global) in the same order."""

    __slots__ = ("groups", "names")

    def __init__(self, prints):
        self.groups = {}
        self.names = {}
        for module, d in prints:
            for name, value in list(d.items()):
                if name in _SKIP:
                    continue
                kind = _kind(value)
                if kind is None:
                    continue
                self.groups.setdefault(kind, []).append(value)
                self.names.setdefault(kind, []).append((module, name))

    def take(self):
        """The contents of every in-place value, as flat lists compared with ==."""
        g = self.groups
        out = []
        dicts = g.get("dict", ())
        if dicts:
            keys = list(chain.from_iterable(map(_KEYS, dicts)))
            values = list(chain.from_iterable(map(_VALUES, dicts)))
            out.append(list(map(len, dicts)))
            out.append(keys)
            out.append(values)
            out.append(list(map(len, compress(values, map(_IS_CONTAINER, map(type, values))))))
        seqs = g.get("seq", ())
        if seqs:
            items = list(chain.from_iterable(seqs))
            out.append(list(map(len, seqs)))
            out.append(items)
            out.append(list(map(len, compress(items, map(_IS_CONTAINER, map(type, items))))))
        sets = g.get("set", ())
        if sets:
            out.append(list(map(len, sets)))
            out.append([sum(map(id, s)) for s in sets])
        blobs = g.get("bytes", ())
        if blobs:
            out.append(list(map(bytes, blobs)))
        sizes = g.get("size", ())
        if sizes:
            out.append(list(map(len, sizes)))
        attrs = g.get("attrs", ())
        if attrs:
            ds = list(map(_attrs, attrs))
            out.append(list(map(len, ds)))
            out.append(list(chain.from_iterable(map(_KEYS, ds))))
            out.append(list(chain.from_iterable(map(_VALUES, ds))))
        lrus = g.get("lru", ())
        if lrus:
            out.append(list(map(_lru_fill, lrus)))
        return out

    def per_global(self):
        """The same contents, global by global: {(module, name): what take() holds of it}."""
        out = {}
        for kind, values in self.groups.items():
            for key, v in zip(self.names[kind], values):
                one = _Deep.__new__(_Deep)
                one.groups = {kind: [v]}
                one.names = {kind: [key]}
                try:
                    out[key] = one.take()
                except Exception:
                    out[key] = None
        return out


# Attributes unittest (and pytest's unittest support) sets on a TestCase class as its tests
# run: the class set-up's flag and clean-ups at its first test, the tear-down errors after its
# last. The runner's bookkeeping, never a test's state.
_CLASS_SKIP = ("_classSetupFailed", "_class_cleanups", "tearDown_exceptions")


def _attrs(v):
    d = getattr(v, "__dict__", None)
    if d is None or not hasattr(d, "keys"):
        return {}
    if isinstance(v, type) and any(k in d for k in _CLASS_SKIP):
        return dict((k, x) for k, x in d.items() if k not in _CLASS_SKIP)
    return d


def _module_dict(m):
    d = getattr(m, "__dict__", None)
    return d if isinstance(d, dict) else {}


_GONE = object()


def _all_values(dicts):
    """What the dicts hold, in order, as one list, for comparing one look with the next. On
    CPython the values of each dict whose keys are all str, and keys and values of one that has
    another key; an audit hook that refuses gc's event (the repository's own) costs the fast
    way, not the look."""
    if _REFERENTS is not None:
        try:
            return _REFERENTS(*dicts)
        except Exception:
            pass
    return list(chain.from_iterable(map(_VALUES, dicts)))


def _is_runner(name):
    root = name.split(".", 1)[0]
    return root in _RUNNER or root.startswith("fixgate_plugin")


def _identical(a, b):
    """Whether two lists hold the same objects, in order."""
    return len(a) == len(b) and all(map(is_, a, b))


def _same(a, b):
    """Whether two snapshots are equal (identity first, then ==); an __eq__ that raises is a
    difference."""
    if a is b:
        return True
    try:
        return bool(a == b)
    except Exception:
        return False


class State(object):
    """The shared state after the last test, and what each test changed of it."""

    def __init__(self, classifier):
        self.classifier = classifier
        self.repo_modules = {}  # module name -> (repo-relative file, module)
        self.outside_modules = {}  # module name -> module, for every other module
        self.classified = set()  # names in sys.modules already sorted into one of the two
        self.known = 0  # len(sys.modules) when repo_modules was last brought up to date
        self.extensions = set()  # repo-relative files of C extension modules
        self.env = None
        self.cwd = None
        self.path = None
        self.modules = None
        self.threads = 0
        # The module values: the modules' dicts in a fixed order, every global's value and
        # name in that order, the in-place values and their contents.
        self.dicts = []
        self.names = []
        self.values = []  # every global's value, in the order of `names`
        self.quick = []  # the same dicts as _all_values lists them, for the look after a test
        self.deep = None
        self.contents = None
        self.per_global = {}  # (module, global) -> its contents, as of the last snapshot
        # The other modules' globals: their dicts in a fixed order, and each one's values.
        self.outside_dicts = []
        self.outside_masked = []  # (index in outside_dicts, names left out) per _OUTSIDE_MASKS
        self.outside_order = []
        self.outside_values = []  # every value of outside_dicts, as _all_values lists them
        self.outside_keys = []  # each module's keys, in order
        self.outside_aligned = True  # outside_values is each module's values in turn
        self.outside_each = None  # a copy of each dict, when outside_values is not aligned
        self.outside_new = False  # other modules were added since their last snapshot
        self.settings = {}  # the process settings (fixgate_plugin_settings.take)

    def _environ(self):
        data = getattr(os.environ, "_data", None)
        return dict(data) if isinstance(data, dict) else dict(os.environ)

    def _cwd(self):
        try:
            return os.getcwd()
        except OSError:
            return None

    def _refresh_modules(self):
        """Adds the modules imported since the last look; True when there are new ones of the
        repository (new other modules are snapshotted at the end of the test, outside_new)."""
        mods = sys.modules
        if len(mods) == self.known:
            return False
        self.known = len(mods)
        added = False
        for name, m in list(mods.items()):
            if name in self.classified or m is None:
                continue
            self.classified.add(name)
            if self._is_repo(name, m):
                added = True
            elif not _is_runner(name) and isinstance(getattr(m, "__dict__", None), dict):
                self.outside_modules[name] = m
                self.outside_new = True
        return added

    def _is_repo(self, name, m):
        """Whether the module is one of the repository's (a C extension of the repository is
        noted, not compared)."""
        f = getattr(m, "__file__", None)
        if not isinstance(f, str) or not f:
            return False
        try:
            kind, text, interp = self.classifier.classify(os.path.abspath(f))
        except Exception:
            return False
        if kind != "rel" or interp:
            return False
        if f.endswith((".so", ".pyd")):
            self.extensions.add(text)
            return True
        self.repo_modules[name] = (text, m)
        return True

    def _take_modules(self):
        """Snapshots the repository modules' values (after a new import or a change)."""
        order = sorted(self.repo_modules)
        self.dicts = [_module_dict(self.repo_modules[n][1]) for n in order]
        self.names = [(n, list(d)) for n, d in zip(order, self.dicts)]
        self.values = list(chain.from_iterable(map(_VALUES, self.dicts)))
        self.quick = _all_values(self.dicts)
        self.deep = _Deep(zip(order, self.dicts))
        self.contents = self.deep.take()
        self.per_global = self.deep.per_global()

    def _take_outside(self):
        """Snapshots the other modules' globals (at the start, and after a test that imported
        new ones: a first import is no change)."""
        self.outside_new = False
        order = sorted(self.outside_modules)
        self.outside_order = order
        self.outside_dicts = [_module_dict(self.outside_modules[n]) for n in order]
        self.outside_masked = [
            (i, _OUTSIDE_MASKS[n]) for i, n in enumerate(order) if n in _OUTSIDE_MASKS
        ]
        dicts = self._outside_look()
        self._outside_snapshot(_all_values(dicts), dicts)

    def _outside_look(self):
        """The other modules' dicts to compare: each module's own, and for one that
        _OUTSIDE_MASKS names, a copy without the names it leaves out."""
        dicts = self.outside_dicts
        if not self.outside_masked:
            return dicts
        dicts = list(dicts)
        for i, names in self.outside_masked:
            # A copy and a few pops, in C: about 2 us a test for sys and builtins, where a
            # comprehension over their keys cost ten times that.
            view = dict.copy(dicts[i])
            for name in names:
                view.pop(name, None)
            dicts[i] = view
        return dicts

    def _outside_snapshot(self, values, dicts):
        """The other modules' globals as they are now (`dicts`, as _outside_look gave them):
        each module's keys, and all the values as one list (`values`, just taken). When that
        list holds each dict's values in order (all their keys are str, as gc lists them), a
        module's values are a slice of it; else (a key of another type, listed beside its
        value) a copy of each dict is kept."""
        self.outside_values = values
        self.outside_keys = [list(d) for d in dicts]
        self.outside_aligned = len(values) == sum(map(len, self.outside_keys))
        self.outside_each = None if self.outside_aligned else [dict(d) for d in dicts]

    def baseline(self):
        """Before the first test: the state collection left."""
        self._refresh_modules()
        self.env = self._environ()
        self.cwd = self._cwd()
        self.path = list(sys.path)
        self.modules = dict(sys.modules)
        self.threads = threading.active_count()
        self._take_modules()
        self._take_outside()
        self.settings = _settings.take()

    def after_test(self):
        """What the test changed, as sorted strings `kind:detail` (docs/plugin-protocol.md)."""
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
        outside = self._outside()
        changed.extend(self._globals())
        changed.extend(outside)
        if self.outside_new:  # _globals looked at sys.modules
            self._take_outside()
        settings = _settings.take(self.settings)
        try:
            changed.extend("setting:" + n for n in _settings.changed(self.settings, settings))
        except Exception:
            pass  # plain values compare without raising; this is the last guard
        self.settings = settings
        for e in sorted(self.extensions):
            changed.append("extension:" + e)
        self.extensions.clear()
        changed.sort()
        return changed

    def _globals(self):
        """The repository's module globals the test changed: one comparison of everything, and
        a look at each module only when it differs. A module the test imported first is new,
        not changed."""
        same = _same(_all_values(self.dicts), self.quick)
        if same:
            try:
                contents = self.deep.take()
            except Exception:
                contents = None
            same = contents is not None and _same(contents, self.contents)
        if same:
            if self._refresh_modules():
                self._take_modules()
            return []
        return self._which()

    def _outside(self):
        """The other modules' globals the test rebound or removed: one comparison of all their
        values, and a look at each module only when it differs."""
        dicts = self._outside_look()
        values = _all_values(dicts)
        prev = self.outside_values
        if self.outside_aligned:
            # One list comparison in C, identity first (a call per value with operator.is_ cost
            # about 0.2 ms for 14,000, twenty times this): no library object's __eq__ runs unless
            # a global was rebound. A global rebound to an equal copy is no change, and the list
            # kept is the one just taken, so that the copy is what the next test is compared with
            # (else a later test filling it in place would be named for it).
            if _same(values, prev):
                self.outside_values = values
                return []
        elif _identical(values, prev):
            return []
        out = []
        offset = 0
        for i, (name, d) in enumerate(zip(self.outside_order, dicts)):
            keys = self.outside_keys[i]
            if self.outside_aligned:
                olds = prev[offset : offset + len(keys)]
                offset += len(keys)
            else:
                olds = list(self.outside_each[i].values())
            if len(d) == len(keys) and _identical(list(d.values()), olds):
                continue
            for key, was in zip(keys, olds):
                if key in _SKIP:  # the masked names are not in the look at all
                    continue
                now = d.get(key, _GONE)
                if was is None and now is not _GONE:
                    continue  # a lazy fill: tempfile.tempdir, pkgutil's name pattern
                if now is not was and (now is _GONE or not _same(now, was)):
                    out.append("outside:%s:%s" % (name, key))
        self._outside_snapshot(values, dicts)
        return out

    def _cached_function(self, wrapper):
        """The repository's file and the name of the plain module-level function an lru_cache
        wraps, by its code (its file and name), or None: a function wrapped again, a closure,
        one defined elsewhere than its module says."""
        try:
            f = wrapper.__wrapped__
            code = f.__code__
            if getattr(f, "__wrapped__", None) is not None or f.__closure__ is not None:
                return None
            home = self.repo_modules.get(f.__module__)
            name = code.co_name
            if home is None or f.__qualname__ != name or not name.isidentifier():
                return None
            if os.path.abspath(code.co_filename) != os.path.abspath(home[1].__file__):
                return None
            if ":" in home[0]:
                return None
            return home[0], name
        except Exception:
            return None

    def _which(self):
        """Names what changed, global by global, and takes the new snapshot."""
        before_names = self.names
        before_values = self.values
        before_deep = self.per_global
        out = []
        i = 0
        for (module, names), d in zip(before_names, self.dicts):
            old = dict(zip(names, before_values[i : i + len(names)]))
            i += len(names)
            path = self.repo_modules[module][0]
            now = dict(d)
            for name in set(old) | set(now):
                if name in _SKIP:
                    continue
                if name not in old or name not in now or not _same(old[name], now[name]):
                    out.append("global:%s:%s" % (path, name))
        self._refresh_modules()
        self._take_modules()
        after_deep = self.per_global
        lrus = dict(zip(self.deep.names.get("lru", ()), self.deep.groups.get("lru", ())))
        for key, contents in after_deep.items():
            if key in before_deep and not _same(before_deep[key], contents):
                path = self.repo_modules[key[0]][0]
                line = "global:%s:%s" % (path, key[1])
                if line in out:
                    continue
                # An lru_cache filled (or emptied) in place that holds only frozen values: the
                # global it was seen through, then where its function is defined (a plain
                # module-level function of the repository's).
                if key in lrus and _lru_frozen(lrus[key]):
                    home = self._cached_function(lrus[key])
                    if home is not None and ":" not in path and str(key[1]).isidentifier():
                        line = "cache:%s:%s:%s:%s" % (path, key[1], home[0], home[1])
                out.append(line)
        return out
