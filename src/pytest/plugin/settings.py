"""fixgate plugin: the process settings a test can change in place, which no module global's
identity shows: the loggers' levels and handlers, logging.disable, the socket module's default
timeout, decimal's context, the recursion limit and the int-to-str digit limit, the garbage
collector's switch and thresholds, the signal handlers and a pending alarm, the locale. A test
that leaves one changed (`logging.basicConfig(level=DEBUG)`, `logging.getLogger("app")
.addHandler(h)`, `socket.setdefaulttimeout(1)`, `decimal.getcontext().prec = 3`) is a state
writer any later test may read.

Each setting is read by a call or two (about 45 microseconds after each test with the standard
library's loggers, growing with their number: about 3 ms with 2,000); a module not imported yet
has no settings to read, and one imported by the test is no change, as a first import is not. A
logger the test created is a change only when it is not as a new logger is (a level, a handler
other than a NullHandler, disabled, not propagating): `logging.getLogger(name)` alone, or a
library's first import that gives its logger a NullHandler, is no change. pytest's own handling
(the log capture's handlers, the warnings filters it restores around every test) happens
inside each test's protocol and is gone when this looks.

The values are the test's: every one read is kept as a plain value (an int, a float, a str, a
bool, None, or a tuple of them) or as its object's identity, so that comparing two looks runs
no code of the test's, and a reader that raises anything but KeyboardInterrupt leaves its
settings out of that look (and so out of the comparison).
"""

import sys

_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGCHLD", "SIGPIPE")
_SIGNAL_KEYS = tuple((name, "signal.getsignal(%s)" % name) for name in _SIGNALS)


def _plain(v):
    """`v` as a value whose comparison runs no code of the test's: itself when it is an int, a
    float, a str, a bool or None (not a subclass), a tuple of such, else its identity."""
    t = type(v)
    if v is None or t is int or t is str or t is bool:
        return v
    if t is float:
        return v if v == v else "nan"
    if t is tuple:
        return tuple(map(_plain, v))
    return ("id", id(v))


def _logger(lg, null):
    """A logger's settings, and whether its handlers are all NullHandlers (`null`, the class)."""
    handlers = getattr(lg, "handlers", None)
    handlers = list(handlers) if type(handlers) is list else []
    return (
        _plain(getattr(lg, "level", None)),
        _plain(getattr(lg, "disabled", False)),
        _plain(getattr(lg, "propagate", True)),
        tuple(map(id, handlers)),
        all(type(h) is null for h in handlers),
    )


def _as_new(settings):
    """Whether a logger's settings are those of a new logger (a library's NullHandler aside)."""
    level, disabled, propagate, _handlers, only_null = settings
    return level == 0 and disabled is False and propagate is True and only_null


def _logging(out):
    logging = sys.modules.get("logging")
    if logging is None:
        return
    null = getattr(logging, "NullHandler", None)
    root = getattr(logging, "root", None)
    if root is not None:
        out["logging.root"] = _one_logger(root, null)
        manager = getattr(root, "manager", None)
        out["logging.disable"] = _plain(getattr(manager, "disable", None))
        loggers = getattr(manager, "loggerDict", None)
        if type(loggers) is dict:
            for name, lg in list(loggers.items()):
                # type() and issubclass run none of the object's code (isinstance may).
                if type(name) is str and issubclass(type(lg), logging.Logger):
                    out["logging.getLogger(%r)" % (name,)] = _one_logger(lg, null)


def _one_logger(lg, null):
    """A logger's settings, or "unreadable" (one whose attributes raise: the same next time, a
    change from a readable one)."""
    try:
        return _logger(lg, null)
    except KeyboardInterrupt:
        raise
    except BaseException:
        return "unreadable"


def _socket(out):
    socket = sys.modules.get("socket")
    if socket is not None:
        out["socket.getdefaulttimeout()"] = _plain(socket.getdefaulttimeout())


def _decimal(out):
    decimal = sys.modules.get("decimal")
    if decimal is not None:
        c = decimal.getcontext()
        traps = tuple(sorted(_plain(k.__name__) for k, on in c.traps.items() if on is True))
        limits = (c.prec, c.rounding, c.Emin, c.Emax, c.capitals, c.clamp)
        out["decimal.getcontext()"] = _plain(limits) + (traps,)


def _interpreter(out):
    out["sys.getrecursionlimit()"] = _plain(sys.getrecursionlimit())
    digits = getattr(sys, "get_int_max_str_digits", None)
    if digits is not None:
        out["sys.get_int_max_str_digits()"] = _plain(digits())
    gc = sys.modules.get("gc")
    if gc is not None:
        out["gc"] = _plain((gc.isenabled(), gc.get_threshold()))


def _signals(out):
    signal = sys.modules.get("signal")
    if signal is None:
        return
    # The C function: signal.getsignal turns SIG_DFL and SIG_IGN into enum members, by trying
    # every handler, a function too, as one (a raised and caught ValueError per signal).
    getsignal = getattr(getattr(signal, "_signal", None), "getsignal", None) or signal.getsignal
    for name, key in _SIGNAL_KEYS:
        num = getattr(signal, name, None)
        if num is not None:
            out[key] = ("id", id(getsignal(num)))
    getitimer = getattr(signal, "getitimer", None)
    if getitimer is not None:
        out["a pending signal.setitimer alarm"] = _plain(getitimer(signal.ITIMER_REAL)[0] > 0)


def _locale(out):
    locale = sys.modules.get("locale")
    if locale is not None:
        out["locale"] = _plain(locale.setlocale(locale.LC_ALL, None))


_READERS = (_logging, _socket, _decimal, _interpreter, _signals, _locale)


def take(previous=None):
    """Every setting, by reader and by the name a finding gives it. A reader that raises keeps
    what `previous` (the look before) read: this look tells nothing of its settings."""
    out = {}
    for read in _READERS:
        part = {}
        try:
            read(part)
        except KeyboardInterrupt:
            raise
        except BaseException:
            part = (previous or {}).get(read.__name__, {})
        out[read.__name__] = part
    return out


def changed(before, after):
    """The settings `after` holds otherwise than `before`: changed, gone (a logger), or new and
    not as a new logger is (when `before` read the loggers: a first import of logging is no
    change)."""
    out = []
    for reader, now_part in after.items():
        was_part = before.get(reader, {})
        for name, now in now_part.items():
            was = was_part.get(name, _MISSING)
            if was is _MISSING:
                if name.startswith("logging.getLogger(") and "logging.root" in was_part:
                    if now == "unreadable" or not _as_new(now):
                        out.append(name)
            elif now != was:
                out.append(name)
        for name in was_part:
            if name not in now_part:
                out.append(name)
    return out


_MISSING = object()
