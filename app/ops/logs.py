"""Log output: one JSON object per line for machines, a compact line for people; never a secret.

Structured fields travel on a record as ``extra={"fields": {...}}``; both formats print them. Every record
emitted while a request is being served carries that request's id (``request_id``), set by
``app.api.edge.Edge``.
"""

from __future__ import annotations

import asyncio
import logging
import re
import sys
import time
from contextvars import ContextVar
from typing import IO, Any, Literal

import orjson

#: The id of the request being served, for every log line written while serving it.
request_id: ContextVar[str | None] = ContextVar("schedlock_request_id", default=None)
#: The same id in the request's ASGI scope, for what runs after the request's context has ended: Starlette's server
#: error handler, outside the observer, answers an unexpected error with it (app.api.errors).
REQUEST_ID_SCOPE_KEY = "schedlock.request_id"

LogFormat = Literal["auto", "json", "human"]

# Defence in depth: no code path logs a credential on purpose, but library messages and exception texts are
# not ours. Mask the password of any URL and any bearer token before a line leaves the process.
_URL_PASSWORD = re.compile(r"(\b[a-z][a-z0-9+.-]*://[^:/?#@\s]*:)[^@\s/]+@", re.IGNORECASE)
_BEARER = re.compile(r"(\bbearer\s+)[^\s\"',]+", re.IGNORECASE)
_QUIET = ("pgserver", "alembic")


def redact(text: str) -> str:
    """``text`` with URL passwords and bearer tokens replaced by ``***``."""
    if "@" in text:
        text = _URL_PASSWORD.sub(r"\1***@", text)
    if "earer" in text:
        text = _BEARER.sub(r"\1***", text)
    return text


_second: list[Any] = [-1, ""]  # the last second formatted, and its text: most lines share it


def _timestamp(record: logging.LogRecord) -> str:
    return _stamp(record.created, record.msecs)


def _stamp(created: float, msecs: float) -> str:
    seconds = int(created)
    if seconds != _second[0]:
        _second[:] = [seconds, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))]
    return f"{_second[1]}.{int(msecs):03d}Z"


_milli: list[Any] = [-1, ""]  # the last millisecond stamped by stamp_now, and its text: at load lines share it


def stamp_now() -> str:
    """The time now as _timestamp gives a record's, made once per millisecond."""
    milli = int(time.time() * 1000)
    if milli != _milli[0]:
        seconds, msecs = divmod(milli, 1000)
        _milli[:] = [milli, _stamp(seconds, msecs)]
    text: str = _milli[1]
    return text


def _message(formatter: logging.Formatter, record: logging.LogRecord) -> str:
    message = redact(record.getMessage())
    if record.exc_info:
        message = f"{message}\n{redact(formatter.formatException(record.exc_info))}"
    if record.stack_info:
        message = f"{message}\n{redact(formatter.formatStack(record.stack_info))}"
    return message


#: Line breaks JSON may leave raw inside strings (it escapes only U+0000-U+001F): NEL and the Unicode line and
#: paragraph separators. A lock name may hold the latter two, a request's path any of them.
_RAW_BREAKS = re.compile("[\u0085\u2028\u2029]")


def _one_line(text: str) -> str:
    """JSON text with every line break escaped, so a log reader that splits lines the Unicode way (Python's
    str.splitlines) sees one record per line. ASCII text has none of them (orjson escapes the C0 controls): the
    usual line is let through without a search (0.01 against 0.66 µs for a 270-character line)."""
    if not text.isascii() and _RAW_BREAKS.search(text):
        text = _RAW_BREAKS.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return text


class JsonFormatter(logging.Formatter):
    """``{"time", "level", "logger", "message", "request_id"?, <fields>...}`` on one line."""

    def format(self, record: logging.LogRecord) -> str:
        fields: dict[str, Any] | None = getattr(record, "fields", None)
        return _json_line(_timestamp(record), record.levelname, record.name, _message(self, record), fields)


def _json_line(stamp: str, level: str, logger: str, message: str, fields: dict[str, Any] | None) -> str:
    """One record's JSON line, for JsonFormatter and write_json_line alike."""
    line: dict[str, Any] = {"time": stamp, "level": level.lower(), "logger": logger, "message": message}
    if fields:
        line.update(fields)
    if "request_id" not in line and (rid := request_id.get()) is not None:
        line["request_id"] = rid
    return _one_line(orjson.dumps(line, default=str).decode())


class HumanFormatter(logging.Formatter):
    """``2026-11-29T03:00:00.123Z INFO  schedlock.access: message key=value ...`` for a terminal."""

    def format(self, record: logging.LogRecord) -> str:
        parts = [_timestamp(record), f"{record.levelname:<5}", f"{record.name}:", _message(self, record)]
        fields: dict[str, Any] | None = getattr(record, "fields", None)
        if fields:
            parts.extend(f"{key}={_human_value(value)}" for key, value in fields.items() if value is not None)
        elif (rid := request_id.get()) is not None:
            parts.append(f"request_id={rid}")
        return " ".join(parts)


def _human_value(value: Any) -> str:
    text = str(value)
    if not text or any(c.isspace() or c in "\"='" for c in text) or not text.isprintable():
        return _one_line(orjson.dumps(text).decode())
    return text


class TurnBufferedHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A StreamHandler that, on the event loop's thread, writes the lines of one turn of the loop together.

    At full load every request logs a line, and a write and flush per line showed in the profile.
    Lines emitted while the loop runs are held until the end of the current turn (``call_soon``), then written
    and flushed in one call: no line waits longer than the turn it was logged in, and the order is kept. Off
    the loop (start-up, shutdown, other threads), each line is written at once, after any held ones."""

    def __init__(self, stream: IO[str]) -> None:
        super().__init__(stream)
        self._held: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._add(self.format(record) + self.terminator)
        except RecursionError:
            raise
        except Exception:
            self.handleError(record)

    def emit_line(self, line: str) -> None:
        """Write a line already formatted (write_json_line), as ``emit`` writes a record's."""
        with self.lock:  # type: ignore[union-attr]
            self._add(line + self.terminator)

    def _add(self, line: str) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._held.append(line)
            self._write_held()
            return
        if not self._held:
            loop.call_soon(self.flush)
        self._held.append(line)

    def flush(self) -> None:
        with self.lock:  # type: ignore[union-attr]
            self._write_held()

    def _write_held(self) -> None:
        if self._held:
            text, self._held = "".join(self._held), []
            self.stream.write(text)
        super().flush()


def write_json_line(logger: logging.Logger, level: int, message: str, fields: dict[str, Any]) -> bool:
    """Write the line ``logger.log(level, message, extra={"fields": fields})`` would, straight to the handler, when
    the configuration is configure_logging's JSON one: the record's only handler a TurnBufferedHandler with a
    JsonFormatter, no filter on the way. Building the LogRecord and passing it down cost more than the line
    (docs/performance.md). False, and nothing written, otherwise (another handler, a filter, the human format):
    the caller then logs the record. The caller has checked ``logger.isEnabledFor(level)``."""
    handler = _only_json_handler(logger, level)
    if handler is None:
        return False
    handler.emit_line(_json_line(stamp_now(), logging.getLevelName(level), logger.name, redact(message), fields))
    return True


def _only_json_handler(logger: logging.Logger, level: int) -> TurnBufferedHandler | None:
    found: TurnBufferedHandler | None = None
    current: logging.Logger | None = logger
    while current is not None:
        if current.filters:
            return None
        for handler in current.handlers:
            if (
                found is not None
                or type(handler) is not TurnBufferedHandler
                or handler.filters
                or type(handler.formatter) is not JsonFormatter
                or level < handler.level
            ):
                return None
            found = handler
        if not current.propagate:
            break
        current = current.parent
    return found


def configure_logging(level: str = "INFO", fmt: LogFormat = "auto", stream: IO[str] | None = None) -> None:
    """Send every logger's records to ``stream`` (default stderr) in one format, at ``level``.

    ``auto`` is human on a terminal and JSON otherwise (containers, files, pipes)."""
    stream = stream or sys.stderr
    # No format prints them, and each costs microseconds per record (see "Optimization" in the logging docs):
    # thread, process and task names. (The caller's file and line, a stack walk, is only switched off by a private
    # member of logging; the access log, the one line per request, is written without a LogRecord: write_json_line.)
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    if sys.version_info >= (3, 12):
        logging.logAsyncioTasks = False
    if fmt == "auto":
        fmt = "human" if stream.isatty() else "json"
    handler = TurnBufferedHandler(stream)
    handler.setFormatter(JsonFormatter() if fmt == "json" else HumanFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    for name in _QUIET:
        logging.getLogger(name).setLevel(max(logging.WARNING, root.level))
    # The access log is schedlock.access (app.api.edge); uvicorn's would be a second, less useful one.
    logging.getLogger("uvicorn.access").disabled = True
