"""fixgate plugin: path classification, turning a raw trace into repo-relative, outside and
ignored paths, as the events carry them."""

import os
import sys

from fixgate_plugin_events import _path_text
from fixgate_plugin_trace import _source_from_cache

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
        # the plugin's own modules
        cands.append(os.path.dirname(os.path.abspath(__file__)))
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
            "list_code": set(),
        }
        outside = set()
        unknown = set()
        network = set()
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
            if op == "network":
                network.add(val)
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
            elif op != "list_code":  # its listing is in "list" too
                outside.add((text, op))
        # only the lists that have something (a reader takes a missing one as empty)
        res = {}
        for k in ("read", "write", "list", "list_code", "remove", "mkdir", "sqlite", "import"):
            if out[k]:
                res[k] = sorted(out[k])
        if out["rename"]:
            res["rename"] = [list(p) for p in sorted(out["rename"])]
        if outside:
            res["outside"] = [{"path": p, "op": o} for p, o in sorted(outside)]
        if unknown:
            res["unknown"] = sorted(unknown)
        if network:
            res["network"] = sorted(network)
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

