"""fixgate plugin: one ordered run of a session: its events file (and the events written to it),
its order and watch files, its lease and classifier, and what it has done so far."""

import json
import os
import sys
import threading
import traceback

import pytest

import fixgate_plugin_options as _options
import fixgate_plugin_trace as _trace
from fixgate_plugin_classify import _Classifier
from fixgate_plugin_events import _ENCODE, PROTOCOL_VERSION, _jsonable, _path_text, _text_path
from fixgate_plugin_lease import _Lease


class _Run(object):
    """One ordered run: its events file, its order and watch files, its lease and classifier, and
    what it has done so far. A fresh process makes one at configure time; a child of the fork
    server (fixgate_plugin_forkserver) closes the zygote's and makes its own after the fork, so
    nothing of one run is reset by hand into the next."""

    def __init__(self, config, root, absolute, events, order, watch, lenient=False):
        self.config = config
        # Whether ids of the order that are not collected are left out (and said) or an error.
        self.lenient = bool(lenient)
        self.root = root
        self.pid = os.getpid()
        self.fd = None
        self.lock = threading.Lock()
        self.order = None
        self.executed = []  # node ids, as each test's protocol starts
        self.index = 0
        self.current = None  # the _Test whose protocol runs now
        self.lease = None
        self.classifier = None
        self.internal_errors = 0
        self.finished = False
        # The order the reader knows (the order file, or the collected event), and the last
        # test reported: test_start is written only when the reader cannot tell which test
        # runs next (the first test, or one out of the announced order).
        self.announced = None
        self.announced_pos = None
        self.last_reported = None
        self.interrupted_in = None  # the test a clean session end interrupted, if any
        self.events_path = absolute(events) if events is not None else None
        self.order_path = absolute(order) if order is not None else None
        self.watch_path = absolute(watch) if watch is not None else None
        self._open(absolute)

    @property
    def streaming(self):
        """Whether this run writes events (with `--fixgate-order` alone it only orders)."""
        return self.fd is not None

    def _open(self, absolute):
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
                    "rootdir": _path_text(str(self.config.rootpath)),
                    "executable": _path_text(sys.executable or ""),
                    "neutralised": _options.NEUTRALISED,
                }
            )

        watch_roots = None
        try:
            if self.order_path is not None:
                self.order = self._read_order(self.order_path)
                self.announce(self.order)
            if self.watch_path is not None:
                watch_roots = self._read_watch(self.watch_path)
        except pytest.UsageError:
            # pytest stops before the session starts: end the stream here
            self.emit({"event": "finish", "exitstatus": int(pytest.ExitCode.USAGE_ERROR)})
            self.close()
            raise

        if self.fd is None:
            return

        ignored = [self.events_path, self.order_path, self.watch_path]
        self.classifier = _Classifier(self.root, [p for p in ignored if p])
        if watch_roots is not None:
            self._open_lease(absolute, watch_roots, ignored)

    def _open_lease(self, absolute, watch_roots, ignored):
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
            self.close()
            raise pytest.UsageError("fixgate: --fixgate-watch %s: %s" % (self.watch_path, e))
        # roots that hold temporary files of the run are excluded unless named directly
        self.lease.exclude_dirs = set(
            d for d in excl_dirs if not any(d == a for a, _ in self.lease.roots)
        )

    # ---- configuration files ----------------------------------------------------------------

    def _read_order(self, path):
        try:
            with open(path, "r", encoding="utf-8-sig", newline=None) as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise pytest.UsageError("fixgate: cannot read the order file %s: %s" % (path, e))
        ids, dups = _order_ids(text)
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

    # ---- the announced order ------------------------------------------------------------------

    def announce(self, nodeids):
        self.announced = nodeids
        self.announced_pos = dict((n, i) for i, n in enumerate(nodeids))

    def announced_next(self, nodeid):
        """Whether the reader, having seen the result of the last reported test, expects
        `nodeid` to run now."""
        if self.last_reported is None or self.announced is None:
            return False
        i = self.announced_pos.get(self.last_reported)
        return i is not None and i + 1 < len(self.announced) and self.announced[i + 1] == nodeid

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

    def drain_hook_errors(self):
        for msg in _trace.drain_errors():
            self.emit({"event": "error", "kind": "internal", "message": "fixgate plugin: " + msg})

    def close(self):
        with self.lock:
            if self.fd is not None:
                try:
                    os.close(self.fd)
                except OSError:
                    pass
                self.fd = None


def _order_ids(text):
    """The node ids an order file's text lists, one a line (blank lines skipped, a line's `\\r`
    dropped), and those it lists more than once. A test may be listed twice in a row, not three
    times: the same test run again in the same process (fixgate's nio order); anywhere else a
    repeated id is a mistake in the order."""
    ids = []
    seen = set()
    dups = []
    for line in text.split("\n"):
        line = line.rstrip("\r")
        if not line.strip():
            continue
        line = _text_path(line)  # a node id of a file whose name is not UTF-8
        if ids and ids[-1] == line and (len(ids) < 2 or ids[-2] != line):
            ids.append(line)
            continue
        if line in seen:
            dups.append(line)
            continue
        seen.add(line)
        ids.append(line)
    return ids, dups
