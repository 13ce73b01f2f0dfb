"""fixgate plugin: fixgate's own options of pytest (`--fixgate-*`), which only fixgate passes."""


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
        "--fixgate-order-lenient",
        dest="fixgate_order_lenient",
        action="store_true",
        default=False,
        help="fixgate: a node id of --fixgate-order that is not collected is left out and named "
        "in one 'uncollected' event, instead of a usage error.",
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
        "--fixgate-forkserver",
        dest="fixgate_forkserver",
        default=None,
        type=int,
        metavar="FD",
        help="fixgate: after collection, serve forked runs (replies on file descriptor FD, "
        "commands on FD + 1) instead of running the tests.",
    )
    group.addoption(
        "--fixgate-root",
        dest="fixgate_root",
        default=None,
        metavar="PATH",
        help="fixgate: the sandbox root; recorded paths are relative to it (default: rootdir).",
    )
    group.addoption(
        "--fixgate-record",
        dest="fixgate_record",
        default=None,
        metavar="WHAT",
        help="fixgate: record per test the repository's code that ran (code) and the shared "
        "state left changed (state), a comma-separated list; empty: only outside tests.",
    )
    group.addoption(
        "--fixgate-collect",
        dest="fixgate_collect",
        action="store_true",
        default=False,
        help="fixgate: emit one 'collected' event listing every collected item.",
    )
    group.addoption(
        "--fixgate-collect-items",
        dest="fixgate_collect_items",
        action="store_true",
        default=False,
        help="fixgate: with --fixgate-collect in a fork server, describe each item (file, line, "
        "markers) and what was deselected, as --collect-only does, and always send the "
        "collection's trace: the warm interpreter's collection is the audit's.",
    )
    group.addoption(
        "--fixgate-carry-modules",
        dest="fixgate_carry_modules",
        default=None,
        metavar="PATH",
        help="fixgate: a JSON list of test module node ids to import without making their "
        "items (fixgate takes them from another collection); one 'unitemized' event says "
        "where each would have been.",
    )
