"""fixgate plugin: the process settings a test can change in place, which no module global's
identity shows: the loggers' levels and handlers, logging.disable, the socket module's default
timeout, decimal's context, the recursion limit and the int-to-str digit limit, the garbage
collector's switch and thresholds, the signal handlers and a pending alarm, the locale. A test
that leaves one changed (`logging.basicConfig(level=DEBUG)`, `logging.getLogger("app")
.addHandler(h)`, `socket.setdefaulttimeout(1)`, `decimal.getcontext().prec = 3`) is a state
writer any later test may read.

Each setting is read by a call or two (a few microseconds with a hundred loggers); a module not
imported yet has no settings to read, and one imported by the test is no change, as a first
import is not. A logger the test created is a change only when it is not as a new logger is
(a level, a handler, disabled, not propagating): `logging.getLogger(name)` alone is no change.
pytest's own handling (the log capture's handlers, the warnings filters it restores around
every test) happens inside each test's protocol and is gone when this looks.
"""

import sys

_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGCHLD", "SIGPIPE")


def _logger(lg):
    return (
        getattr(lg, "level", None),
        bool(getattr(lg, "disabled", False)),
        bool(getattr(lg, "propagate", True)),
        tuple(map(id, getattr(lg, "handlers", ()) or ())),
    )


_NEW_LOGGER = (0, False, True, ())


def _logging(out):
    logging = sys.modules.get("logging")
    if logging is None:
        return
    root = getattr(logging, "root", None)
    if root is not None:
        out["logging.root"] = _logger(root)
        manager = getattr(root, "manager", None)
        out["logging.disable"] = getattr(manager, "disable", None)
        loggers = getattr(manager, "loggerDict", None)
        if isinstance(loggers, dict):
            for name, lg in list(loggers.items()):
                if isinstance(lg, logging.Logger):
                    out["logging.getLogger(%r)" % (name,)] = _logger(lg)


def _socket(out):
    socket = sys.modules.get("socket")
    if socket is not None:
        out["socket.getdefaulttimeout()"] = socket.getdefaulttimeout()


def _decimal(out):
    decimal = sys.modules.get("decimal")
    if decimal is not None:
        c = decimal.getcontext()
        traps = tuple(sorted(k.__name__ for k, on in c.traps.items() if on))
        limits = (c.prec, c.rounding, c.Emin, c.Emax, c.capitals, c.clamp)
        out["decimal.getcontext()"] = limits + (traps,)


def _interpreter(out):
    out["sys.getrecursionlimit()"] = sys.getrecursionlimit()
    digits = getattr(sys, "get_int_max_str_digits", None)
    if digits is not None:
        out["sys.get_int_max_str_digits()"] = digits()
    gc = sys.modules.get("gc")
    if gc is not None:
        out["gc"] = (gc.isenabled(), gc.get_threshold())


def _signals(out):
    signal = sys.modules.get("signal")
    if signal is None:
        return
    for name in _SIGNALS:
        num = getattr(signal, name, None)
        if num is not None:
            out["signal.getsignal(%s)" % name] = id(signal.getsignal(num))
    getitimer = getattr(signal, "getitimer", None)
    if getitimer is not None:
        out["a pending signal.setitimer alarm"] = getitimer(signal.ITIMER_REAL)[0] > 0


def _locale(out):
    locale = sys.modules.get("locale")
    if locale is not None:
        out["locale"] = locale.setlocale(locale.LC_ALL, None)


_READERS = (_logging, _socket, _decimal, _interpreter, _signals, _locale)


def take():
    """Every setting, by the name a finding gives it. A reader that raises leaves its setting
    out of this look (and so out of the comparison)."""
    out = {}
    for read in _READERS:
        try:
            read(out)
        except Exception:
            pass
    return out


def changed(before, after):
    """The settings `after` holds otherwise than `before`: changed, gone, or new and not as a
    new logger is."""
    out = []
    for name, now in after.items():
        was = before.get(name, _MISSING)
        if was is _MISSING:
            if name.startswith("logging.getLogger(") and now != _NEW_LOGGER:
                out.append(name)
        elif now != was:
            out.append(name)
    for name in before:
        if name not in after and name.startswith("logging"):
            out.append(name)
    return out


_MISSING = object()
