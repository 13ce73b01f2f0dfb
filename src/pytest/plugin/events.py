"""fixgate plugin: events, the JSON lines the plugin writes, and the helpers that turn pytest's
reports into their fields (messages, skip reasons, hand-written test lines)."""

import json
import math
import os
import re

import pytest

PROTOCOL_VERSION = 1
_TestReport = getattr(pytest, "TestReport", None)


def _path_text(s):
    """A str path as JSON-safe text.

    UTF-8 paths stay as they are.  A path holding bytes that are not UTF-8 (surrogate-escaped by
    os.fsdecode) is written the way fixgate's RepoPath::display_lossless writes it: every invalid
    byte becomes ``\\xNN`` and, only in such a path, a literal backslash becomes ``\\\\``.
    """
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        pass
    try:
        b = s.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return s.encode("utf-8", "replace").decode("utf-8")
    out = []
    while b:
        try:
            out.append(b.decode("utf-8").replace("\\", "\\\\"))
            break
        except UnicodeDecodeError as e:
            out.append(b[: e.start].decode("utf-8").replace("\\", "\\\\"))
            for x in bytearray(b[e.start : e.end]):
                out.append("\\x%02X" % x)
            b = b[e.end :]
    return "".join(out)


_ESCAPED_BYTE = re.compile(r"\\x[89A-F][0-9A-Fa-f]")


def _text_path(s):
    """Reverses _path_text (as RepoPath::parse_lossless does): a text with no `\\xNN` escape of
    a byte at or above 0x80 is taken as it is; else each escape is its byte, `\\\\` a backslash,
    and the bytes are decoded as os.fsdecode does (surrogate-escaped). Node ids of files whose
    names are not UTF-8 travel this way, in the order file and in events."""
    if "\\x" not in s or _ESCAPED_BYTE.search(s) is None:
        return s
    b = s.encode("utf-8")
    out = bytearray()
    i = 0
    while i < len(b):
        if b[i : i + 2] == b"\\\\":
            out.append(0x5C)
            i += 2
            continue
        if b[i : i + 2] == b"\\x":
            try:
                out.append(int(b[i + 2 : i + 4], 16))
                i += 4
                continue
            except ValueError:
                pass
        out.append(b[i])
        i += 1
    return os.fsdecode(bytes(out))


def _jsonable(value, depth=0):
    """Marker arguments as JSON values: scalars and lists stay, anything else is repr()'d."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if depth > 20:
        return repr(value)
    if isinstance(value, (list, tuple)):
        return [_jsonable(v, depth + 1) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: _jsonable(v, depth + 1) for k, v in value.items()}
    try:
        return repr(value)
    except Exception:  # a broken __repr__ must not break the run
        return "<unrepresentable %s>" % type(value).__name__


def _first_line(text, limit=1000):
    if text is None:
        return None
    text = str(text)
    for line in text.splitlines():
        if line.strip():
            line = line.rstrip()
            return line if len(line) <= limit else line[:limit] + "..."
    return None


def _longrepr_text(longrepr):
    if longrepr is None:
        return ""
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    try:
        return str(longrepr)
    except Exception:
        return repr(longrepr)


def _error_line(text):
    """The most telling line of a pytest failure text: the last 'E ' line, else the last line."""
    last_e = None
    last = None
    for line in text.splitlines():
        if not line.strip():
            continue
        last = line
        if line.startswith("E "):
            last_e = line
    if last_e is not None:
        return _first_line(last_e[1:].strip())
    return _first_line(last)


def _is_subtest_report(report):
    """A report of one subtest rather than of the test itself (pytest 9's SubtestReport,
    pytest-subtests' SubTestReport): both carry a `context`."""
    if type(report) is _TestReport:
        return False  # the common case; subtest reports are subclasses
    if getattr(report, "context", None) is not None:
        return True
    return "subtest" in type(report).__name__.lower()


def _report_message(report):
    """A short message for one phase report: the skip reason, or the first failure line."""
    longrepr = getattr(report, "longrepr", None)
    if report.passed and not hasattr(report, "wasxfail"):
        return None
    if longrepr is None:
        return None
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # a skip: (path, lineno, reason)
        reason = str(longrepr[2])
        if reason.startswith("Skipped: "):
            reason = reason[len("Skipped: ") :]
        return reason
    crash = getattr(longrepr, "reprcrash", None)
    message = getattr(crash, "message", None)
    if message:
        return _first_line(message)
    return _error_line(_longrepr_text(longrepr))


def _skip_reason(report):
    longrepr = getattr(report, "longrepr", None)
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        reason = str(longrepr[2])
        if reason.startswith("Skipped: "):
            reason = reason[len("Skipped: ") :]
        return reason
    return _report_message(report)



# One encoder for every event (json.dumps with options builds a new one per call).
_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode
# A JSON string literal, as _ENCODE writes it (the C version when there is one).
_JSON_STRING = json.encoder.encode_basestring


def _json_number(x):
    """A duration or a clock reading in seconds, to the microsecond (the shortest repr of a
    float costs ten times more, and says nothing more of a test); not finite (never): 0."""
    try:
        x = float(x)
    except (TypeError, ValueError):
        return "0.0"
    return "%.6f" % x if x - x == 0 else "0.0"


_OUTCOMES_JSON = {"passed": '"passed"', "failed": '"failed"', "skipped": '"skipped"'}


def _phase_json(when, outcome, duration, message):
    text = '"%s":{"outcome":%s,"duration":%s' % (
        when,
        _OUTCOMES_JSON.get(outcome) or _JSON_STRING(str(outcome)),
        _json_number(duration),
    )
    if message is not None:
        return text + ',"message":' + _JSON_STRING(str(message)) + "}"
    return text + "}"


def _test_line(nodeid, index, outcome, phases, start, end, extra):
    """The test event as one JSON line, written by hand: it is on the path of every test, where
    the encoder's 30 us were a fifth of the plugin's cost. `phases` are _phase_json texts;
    `extra` holds the optional fields, rare, and goes through the encoder."""
    line = '{"event":"test","nodeid":%s,"index":%d,"outcome":%s,"phases":{%s},"start":%s,"end":%s' % (
        _JSON_STRING(_path_text(str(nodeid))),
        index,
        _JSON_STRING(outcome),
        ",".join(phases),
        _json_number(start),
        _json_number(end),
    )
    if extra:
        return line + "," + _ENCODE(extra)[1:]
    return line + "}"
