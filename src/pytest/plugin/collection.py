"""fixgate plugin: the hooks of collection (the order applied, the items described, the carried
modules imported without items, what did not collect or was skipped), a base of the session's
plugin (fixgate_plugin_hooks), whose state they use: `run`, `config`, `carried`,
`collect_event`, `collect_items`, `collected_ids`, `unitemized`, `itemized`, `order_state`."""

import json
import os

import pytest

from fixgate_plugin_events import (
    _JSON_STRING,
    _error_line,
    _jsonable,
    _longrepr_text,
    _path_text,
    _skip_reason,
)


def _read_carried(path):
    """The module node ids of --fixgate-carry-modules (a JSON list), or None."""
    if path is None:
        return None
    with open(path) as f:
        return frozenset(json.load(f))


class _TwiceInARow(object):
    """What running an item a second time in a row (the nio order) needs, so that the second run
    starts from what the first one started from, as it would in a fresh slot."""

    def __init__(self):
        # Doctest item -> its globals before its first run.
        self.doctest_globs = {}

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_call(self, item):
        # DocTestRunner.run clears a doctest's globals when it ends: keep them for the rerun.
        dtest = getattr(item, "dtest", None)
        if dtest is not None and id(item) not in self.doctest_globs:
            self.doctest_globs[id(item)] = dict(dtest.globs)

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_teardown(self, item, nextitem):
        if nextitem is not item or item.parent is None:
            return
        # The item is its own next item: pytest's teardown keeps what the next item shares,
        # which is all of it, so the second run would find the first run's function-scoped
        # fixtures and no request. Tear the item itself down, keeping its module, class and
        # session state.
        item.session._setupstate.teardown_exact(item.parent)
        saved = self.doctest_globs.get(id(item))
        if saved is not None:
            item.dtest.globs.clear()
            item.dtest.globs.update(saved)



class _CollectionHooks(object):
    """The collection hooks of `fixgate_plugin_hooks._FixgatePlugin`."""

    def _apply_order(self, config, items):
        order = self.run.order
        by_id = {}
        for it in items:
            by_id.setdefault(it.nodeid, it)
        missing = [n for n in order if n not in by_id]
        if missing and self.run.lenient:
            # Said before any test runs, and the order the reader follows is what is left.
            self.run.emit({"event": "uncollected", "nodeids": missing})
            gone = set(missing)
            order = [n for n in order if n not in gone]
            self.run.order = order
            self.run.announce(order)
            missing = []
        if missing:
            msg = "fixgate: --fixgate-order lists %d node id(s) that were not collected: %s" % (
                len(missing),
                ", ".join(missing[:20]) + (" ..." if len(missing) > 20 else ""),
            )
            self.run.emit(
                {"event": "error", "kind": "unknown-nodeid", "message": msg, "nodeids": missing}
            )
            raise pytest.UsageError(msg)
        new = [by_id[n] for n in order]
        keep = set(id(it) for it in new)
        deselected = [it for it in items if id(it) not in keep]
        items[:] = new
        if deselected:
            config.hook.pytest_deselected(items=deselected)
        if len(keep) < len(new) and not config.pluginmanager.has_plugin("fixgate-twice"):
            # Only the nio order lists a test twice; the hooks a second run needs stay off the
            # path of every other run.
            config.pluginmanager.register(_TwiceInARow(), "fixgate-twice")

    def pytest_itemcollected(self, item):
        if self.collected_ids is not None:
            self.collected_ids.append(item.nodeid)
        if self.carried is not None:
            self.itemized.append(item.nodeid)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_pycollect_makemodule(self, parent):
        """A module of --fixgate-carry-modules is imported when collection reaches it, as every
        module is, and makes no items: only a plain `pytest.Module` (a package, or a plugin's
        own module class, collects as it would)."""
        outcome = yield
        if self.carried is None or outcome.excinfo is not None:
            return
        module = outcome.get_result()
        nodeid = _path_text(module.nodeid)
        if type(module) is not pytest.Module or nodeid not in self.carried:
            return
        plugin = self

        def collect():
            module.obj  # the import Module.collect starts with, its errors included
            # Named once imported: a module that skips itself at import here, though its base
            # had items, goes unnamed, and fixgate collects whole.
            plugin.unitemized.append({"nodeid": nodeid, "at": len(plugin.itemized)})
            return []

        module.collect = collect

    @pytest.hookimpl(hookwrapper=True, tryfirst=True)
    def pytest_collection_modifyitems(self, session, config, items):
        outcome = yield
        if self.run.order is None or outcome.excinfo is not None:
            self.order_state = "failed"
            return
        self.order_state = "failed"
        self._apply_order(config, items)
        self.order_state = "ok"

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_finish(self, session):
        run = self.run
        # A wrapper registered after ours sits outside it and could still have reordered the
        # items: check, and apply the order once more.
        if run.order is not None and self.order_state == "ok":
            if [it.nodeid for it in session.items] != run.order:
                self.order_state = "failed"
                self._apply_order(self.config, session.items)
                self.order_state = "ok"
        if run.order is not None and self.order_state != "ok":
            return
        if self.collect_event and run.streaming:
            try:
                nodeids = [it.nodeid for it in session.items]
                if self.carried is not None and self.collect_items:
                    # Where each carried module's items go holds only while the session's
                    # items are in the order they were collected, none taken out.
                    run.emit(
                        {
                            "event": "unitemized",
                            "modules": self.unitemized,
                            "in_order": nodeids == self.itemized,
                        }
                    )
                if self.collect_items:
                    items = [self._item_info(it) for it in session.items]
                    event = {"event": "collected", "items": items}
                    # Items collected and then taken out of the session: by -k, -m, --deselect
                    # or a pytest_collection_modifyitems hook, whether or not it said so.
                    kept = set(nodeids)
                    dropped = [n for n in self.collected_ids or () if n not in kept]
                    if dropped:
                        event["deselected"] = dropped
                    run.emit(event)
                else:
                    # A run that collects for itself needs only the order: files, lines and
                    # markers cost a tenth of a millisecond per test.
                    run.write_line(
                        '{"event":"collected","items":[%s]}'
                        % ",".join('{"nodeid":%s}' % _JSON_STRING(_path_text(n)) for n in nodeids)
                    )
                if run.announced is None and run.streaming:
                    run.announce(nodeids)
            except Exception:
                run.internal("collected event")

    def _item_info(self, item):
        path = getattr(item, "path", None)
        if path is None:
            path = getattr(item, "fspath", None)
        file = None
        if path is not None:
            kind, text, _ = self.run.classifier.classify(os.path.abspath(str(path)))
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
        return {"nodeid": _path_text(item.nodeid), "file": file, "line": line, "markers": markers}

    def pytest_collectreport(self, report):
        run = self.run
        if report.skipped:
            # a module skipped at collection (pytest.skip(allow_module_level=True) or a
            # skip marker on a collector): its tests never appear as items
            try:
                run.emit(
                    {
                        "event": "collect_skip",
                        "nodeid": _path_text(report.nodeid),
                        "reason": _skip_reason(report),
                    }
                )
            except Exception:
                run.internal("collect_skip event")
            return
        if not report.failed:
            return
        try:
            text = _longrepr_text(report.longrepr)
            run.emit(
                {
                    "event": "collect_error",
                    "nodeid": _path_text(report.nodeid),
                    "message": _error_line(text) or "collection failed",
                    "longrepr": text[:16000],
                }
            )
        except Exception:
            run.internal("collect_error event")

