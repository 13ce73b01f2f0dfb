"""fixgate plugin: the lease check, a stat (and, where it moved, hash) snapshot of the watched
fixture roots around every test, with inotify where the platform has it."""

import hashlib
import os
import stat
import sys
import threading
import time

from fixgate_plugin_events import _path_text
from fixgate_plugin_trace import _MMAPPED, _Quiet

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

