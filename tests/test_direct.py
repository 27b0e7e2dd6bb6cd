"""The direct lane (app.api.direct) against the way through the ASGI layers.

Two uvicorn servers in this process, each on a table of its own, both with app.api.protocol.HttpProtocol: one app
with its direct lane, one without (``create_app(direct=False)``: the lean path behind the ASGI layers). The same
requests go to both on the wire, in the same order; the answers (status, headers in order, body, with times,
tokens, lease ids and generated request ids masked), the access lines and the metrics must be the same. The lane
must have served exactly the requests it admits (a witness counts them): the rest, a browser's, an oversized or
chunked body, a forwarded request from a trusted proxy, HTTP/1.0, a query, went the ASGI way, which answers them.
"""

from __future__ import annotations

import json
import logging
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
import uvicorn
from fastapi import FastAPI

from app.api.direct import DirectLane
from app.api.protocol import HttpProtocol
from app.main import create_app
from app.ops.logs import request_id
from app.settings import Settings
from tests.support.apps import migrated_table
from tests.support.patience import SETTLE
from tests.support.tokens import Token, with_tokens

WRITER = Token("direct-writer", prefixes=("dl-",))
READER = Token("direct-reader", prefixes=("dl-",), access="read")
Response = tuple[int, list[tuple[str, str]], bytes]


@dataclass
class Served:
    app: FastAPI
    port: int
    lane_served: list[str] = field(default_factory=list)
    tokens: dict[str, str] = field(default_factory=dict)  # a step's lease token, by the step's label


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def served(settings: Settings, *, direct: bool) -> Iterator[Served]:
    """``create_app(settings, direct=direct)`` served by uvicorn with HttpProtocol in a thread, until the end."""
    app = create_app(with_tokens(settings, WRITER, READER), direct=direct)
    port = free_port()
    result = Served(app, port)
    lane = getattr(app.state, "direct_lane", None)
    assert isinstance(lane, DirectLane) == direct
    if lane is not None:
        serve = lane.serve

        async def witnessed(scope: dict[str, Any], *args: Any) -> None:
            result.lane_served.append(scope["path"])
            await serve(scope, *args)

        lane.serve = witnessed
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        http=HttpProtocol,
        loop="uvloop",
        log_config=None,
        access_log=False,
        timeout_keep_alive=60,  # an idle connection stays open for longer than a test waits for one to close
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + SETTLE
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.02)
    try:
        yield result
    finally:
        server.should_exit = True
        thread.join(30)


def _exchange(port: int, data: bytes, count: int = 1, closes: bool = False) -> list[Response]:
    """Send ``data`` on a new connection and read ``count`` responses (a closed connection ends the reading).
    ``closes``: the server must then close the connection, whether or not it said so."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(data)
        buffer, responses = b"", list[Response]()
        while len(responses) < count:
            while b"\r\n\r\n" not in buffer:
                chunk = conn.recv(65536)
                if not chunk:
                    return responses
                buffer += chunk
            head, buffer = buffer.split(b"\r\n\r\n", 1)
            status_line, *lines = head.decode("latin-1").split("\r\n")
            headers = [(k.lower(), v.strip()) for k, v in (line.split(":", 1) for line in lines)]
            length = int(dict(headers).get("content-length", "0"))
            while len(buffer) < length:
                chunk = conn.recv(65536)
                assert chunk, "connection closed mid-body"
                buffer += chunk
            responses.append((int(status_line.split()[1]), headers, buffer[:length]))
            buffer = buffer[length:]
        if closes or any(v == "close" for k, v in responses[-1][1] if k == "connection"):
            assert conn.recv(1) == b"", "the server kept the connection open"
        return responses


_TIME = re.compile(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
_LEASE = re.compile(rb"lease [0-9a-f]{12}")
_TOKEN = re.compile(rb'"token":"[A-Za-z0-9_-]{43}"')


def _masked(response: Response, caller_request_id: bool) -> Response:
    status, headers, body = response
    masked_headers = [
        (k, "<masked>" if k == "date" or (k == "x-request-id" and not caller_request_id) else v) for k, v in headers
    ]
    body = _TOKEN.sub(b'"token":"<token>"', _LEASE.sub(b"lease <id>", _TIME.sub(b"<time>", body)))
    return status, masked_headers, body


def _post(path: str, body: bytes, *extra: str, token: Token | None = WRITER, version: str = "1.1") -> bytes:
    lines = [f"POST {path} HTTP/{version}", "Host: schedlock", "Content-Type: application/json"]
    if token is not None:
        lines.append(f"Authorization: Bearer {token.secret}")
    lines += [*extra, f"Content-Length: {len(body)}"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


ACQUIRE = b'{"lock_at_most_for": "1m", "holder": "direct test"}'


@dataclass(frozen=True)
class Step:
    label: str
    request: Callable[[Served], bytes]
    direct: tuple[str, ...]  # the paths the lane serves, in order
    responses: int = 1
    caller_request_id: bool = False
    closes: bool = False


def _release(of: str, completed: bool = True) -> Callable[[Served], bytes]:
    def request(s: Served) -> bytes:
        body = json.dumps({"token": s.tokens[of], "completed": completed}).encode()
        return _post("/v1/locks/dl-a/release", body)

    return request


STEPS = [
    Step("acquire", lambda s: _post("/v1/locks/dl-a/acquire", ACQUIRE), ("/v1/locks/dl-a/acquire",)),
    Step("held", lambda s: _post("/v1/locks/dl-a/acquire", ACQUIRE), ("/v1/locks/dl-a/acquire",)),
    Step(
        "extend",
        lambda s: _post(
            "/v1/locks/dl-a/extend", json.dumps({"token": s.tokens["acquire"], "lock_at_most_for": "2m"}).encode()
        ),
        ("/v1/locks/dl-a/extend",),
    ),
    Step(
        "release, wrong token",
        lambda s: _post("/v1/locks/dl-a/release", b'{"token": "x"}'),
        ("/v1/locks/dl-a/release",),
    ),
    Step("release", _release("acquire"), ("/v1/locks/dl-a/release",)),
    Step("release twice", _release("acquire"), ("/v1/locks/dl-a/release",)),
    Step(
        "release of no lock",
        lambda s: _post("/v1/locks/dl-none/release", b'{"token": "x"}'),
        ("/v1/locks/dl-none/release",),
    ),
    Step("not json", lambda s: _post("/v1/locks/dl-b/acquire", b"{nope"), ("/v1/locks/dl-b/acquire",)),
    Step("no body", lambda s: _post("/v1/locks/dl-b/acquire", b""), ("/v1/locks/dl-b/acquire",)),
    Step(
        "bad duration",
        lambda s: _post("/v1/locks/dl-b/acquire", b'{"lock_at_most_for": "x"}'),
        ("/v1/locks/dl-b/acquire",),
    ),
    Step(
        "name too long",
        lambda s: _post(f"/v1/locks/dl-{'n' * 70}/acquire", ACQUIRE),
        (f"/v1/locks/dl-{'n' * 70}/acquire",),
    ),
    Step(
        "text body",
        lambda s: _post("/v1/locks/dl-b/acquire", ACQUIRE).replace(b"application/json", b"text/plain"),
        ("/v1/locks/dl-b/acquire",),
    ),
    Step("no token", lambda s: _post("/v1/locks/dl-b/acquire", ACQUIRE, token=None), ("/v1/locks/dl-b/acquire",)),
    Step(
        "read-only token", lambda s: _post("/v1/locks/dl-b/acquire", ACQUIRE, token=READER), ("/v1/locks/dl-b/acquire",)
    ),
    Step(
        "outside the token's names", lambda s: _post("/v1/locks/other/acquire", ACQUIRE), ("/v1/locks/other/acquire",)
    ),
    Step(
        "the caller's request id",
        lambda s: _post("/v1/locks/dl-c/acquire", ACQUIRE, "X-Request-ID: caller-id-1"),
        ("/v1/locks/dl-c/acquire",),
        caller_request_id=True,
    ),
    Step(
        "connection: close",
        lambda s: _post("/v1/locks/dl-d/acquire", ACQUIRE, "Connection: close"),
        ("/v1/locks/dl-d/acquire",),
    ),
    Step(
        "pipelined, behind a request the ASGI way",
        lambda s: (
            _post("/v1/locks/dl-e/acquire", ACQUIRE)
            + b"GET /v1/locks/dl-e HTTP/1.1\r\nHost: schedlock\r\nAuthorization: Bearer "
            + WRITER.secret.encode()
            + b"\r\n\r\n"
            + _post("/v1/locks/dl-e/acquire", ACQUIRE)
            + _post("/v1/locks/dl-f/acquire", ACQUIRE)
        ),
        # The three behind the first arrived while it was served: they wait in uvicorn's pipeline, the ASGI way.
        ("/v1/locks/dl-e/acquire",),
        responses=4,
    ),
    # The ASGI way: the lane admits none of these.
    Step("a browser's", lambda s: _post("/v1/locks/dl-g/acquire", ACQUIRE, "Origin: http://elsewhere.example"), ()),
    Step("own origin", lambda s: _post("/v1/locks/dl-g/acquire", ACQUIRE, "Origin: http://schedlock"), ()),
    Step("a query", lambda s: _post("/v1/locks/dl-g/acquire?x=1", ACQUIRE), ()),
    Step("a percent-escape", lambda s: _post("/v1/locks/dl-%67/acquire", ACQUIRE), ()),
    Step("HTTP/1.0", lambda s: _post("/v1/locks/dl-h/acquire", ACQUIRE, version="1.0"), ()),
    Step(
        "forwarded by a trusted proxy",
        lambda s: _post("/v1/locks/dl-i/acquire", ACQUIRE, "X-Forwarded-For: 203.0.113.9"),
        (),
    ),
    Step(
        "too large",
        lambda s: _post("/v1/locks/dl-j/acquire", b'{"holder": "' + b"x" * 20000 + b'"}'),
        (),
    ),
    Step(
        "chunked",
        lambda s: (
            b"POST /v1/locks/dl-k/acquire HTTP/1.1\r\nHost: schedlock\r\nContent-Type: application/json\r\n"
            b"Authorization: Bearer " + WRITER.secret.encode() + b"\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"%x\r\n" % len(ACQUIRE) + ACQUIRE + b"\r\n0\r\n\r\n"
        ),
        (),
    ),
    Step("a GET", lambda s: b"GET /v1/locks/dl-a HTTP/1.1\r\nHost: schedlock\r\n\r\n", ()),
]


def _run(server: Served, steps: list[Step]) -> list[list[Response]]:
    answers = []
    for step in steps:
        responses = _exchange(server.port, step.request(server), step.responses, step.closes)
        assert len(responses) == step.responses, step.label
        token = json.loads(responses[0][2]).get("token") if responses[0][0] == 200 else None
        if token:
            server.tokens[step.label] = token
        answers.append([_masked(r, step.caller_request_id) for r in responses])
    return answers


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        fields = dict(getattr(record, "fields", {}))
        fields.pop("duration_ms", None)
        if fields.get("request_id") != "caller-id-1":
            fields.pop("request_id", None)
        self.lines.append({"level": record.levelname, "message": record.getMessage(), **fields})


def _metrics(server: Served) -> list[str]:
    body = _exchange(server.port, b"GET /metrics HTTP/1.1\r\nHost: schedlock\r\n\r\n")[0][2].decode()
    wanted = (
        "schedlock_http_requests_total{",
        "schedlock_lock_operations_total{",
        "schedlock_http_request_duration_seconds_count{",
    )
    return sorted(line for line in body.splitlines() if line.startswith(wanted))


@pytest.fixture
def access_log() -> Iterator[_Lines]:
    logger = logging.getLogger("schedlock.access")
    handler, level = _Lines(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def _both(
    database_url: str, access_log: _Lines, steps: list[Step], plant: Callable[[FastAPI], None] | None = None
) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for direct in (True, False):
        with migrated_table(database_url, "direct") as settings, served(settings, direct=direct) as server:
            if plant is not None:
                plant(server.app)
            access_log.lines.clear()
            answers = _run(server, steps)
            # The last access lines are written at the end of their turn: wait for a line per answer (on a loaded
            # machine that turn may come late), then compare whatever there is.
            deadline = time.monotonic() + SETTLE
            while len(access_log.lines) < sum(map(len, answers)) and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.2)  # and any line beyond those
            seen[str(direct)] = (answers, list(access_log.lines), _metrics(server), server.lane_served)
    return seen


def test_the_lane_answers_logs_and_counts_as_the_asgi_way(database_url: str, access_log: _Lines) -> None:
    seen = _both(database_url, access_log, STEPS)
    (direct, direct_lines, direct_metrics, lane_served), (asgi, asgi_lines, asgi_metrics, none) = (
        seen["True"],
        seen["False"],
    )
    for step, theirs, ours in zip(STEPS, asgi, direct, strict=True):
        assert ours == theirs, step.label
    assert direct_lines == asgi_lines
    assert direct_metrics == asgi_metrics
    assert lane_served == [path for step in STEPS for path in step.direct]
    assert none == []
    # What the steps were meant to show, on the lane's side.
    by_label = dict(zip((s.label for s in STEPS), direct, strict=True))
    assert [r[0] for r in by_label["pipelined, behind a request the ASGI way"]] == [200, 200, 409, 200]
    assert ("connection", "close") in by_label["connection: close"][0][1]
    assert ("x-request-id", "caller-id-1") in by_label["the caller's request id"][0][1]
    assert [by_label[label][0][0] for label in ("acquire", "held", "extend", "release", "release twice")] == [
        200,
        409,
        200,
        200,
        200,
    ]
    assert {by_label[label][0][0] for label in ("no token", "read-only token", "outside the token's names")} <= {
        401,
        403,
    }
    assert by_label["too large"][0][0] == 413 and by_label["a browser's"][0][0] == 403
    client = [line.get("client") for line in direct_lines if line.get("lock") == "dl-i"]
    assert client == ["203.0.113.9"], "a trusted proxy's X-Forwarded-For names the client, as uvicorn does"


class _ErrorIds(logging.Handler):
    """The request id each error line is written with, read as the log formatter reads it (app.ops.logs)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.ids: list[str | None] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.ids.append(request_id.get())


def test_an_unexpected_error_is_answered_500_by_the_apps_handler(database_url: str, access_log: _Lines) -> None:
    def plant(app: FastAPI) -> None:
        store = app.state.store

        async def broken(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("planted")

        store.acquire = broken

    steps = [
        Step("broken", lambda s: _post("/v1/locks/dl-x/acquire", ACQUIRE), ("/v1/locks/dl-x/acquire",), closes=True),
        Step(
            "broken, the caller's request id",
            lambda s: _post("/v1/locks/dl-x/acquire", ACQUIRE, "X-Request-ID: caller-id-1"),
            ("/v1/locks/dl-x/acquire",),
            caller_request_id=True,
            closes=True,
        ),
    ]
    errors, logger = _ErrorIds(), logging.getLogger("schedlock.errors")
    logger.addHandler(errors)
    try:
        seen = _both(database_url, access_log, steps, plant)
    finally:
        logger.removeHandler(errors)
    (direct, direct_lines, direct_metrics, _), (asgi, asgi_lines, asgi_metrics, _) = seen["True"], seen["False"]
    assert direct == asgi
    for (status, headers, body), caller in zip((direct[0][0], direct[1][0]), ("<masked>", "caller-id-1"), strict=True):
        assert status == 500 and json.loads(body)["error"]["code"] == "internal_error"
        # The 500 names its request, as every other answer does: the body sends the caller to the log.
        assert [v for k, v in headers if k == "x-request-id"] == [caller]
    assert [line for line in direct_lines if line.get("route")] == [line for line in asgi_lines if line.get("route")]
    assert direct_metrics == asgi_metrics
    # Each way's error line (the traceback) carries the same id: the lane's first, then the ASGI way's.
    assert len(errors.ids) == 4 and errors.ids[1] == errors.ids[3] == "caller-id-1"
    assert all(isinstance(rid, str) and re.fullmatch(r"[0-9a-f]{16}", rid) for rid in (errors.ids[0], errors.ids[2]))


@pytest.mark.parametrize(
    ("method", "url", "headers", "trusted", "admitted"),
    [
        (b"POST", b"/v1/locks/a/acquire", [(b"content-length", b"2")], False, True),
        (b"POST", b"/v1/locks/a/release", [(b"content-length", b"0")], False, True),
        (b"POST", b"/v1/locks/a/extend", [(b"content-length", b"16384")], False, True),
        (b"POST", b"/v1/locks/a/extend", [(b"content-length", b"16385")], False, False),  # the limit's 413
        (b"POST", b"/v1/locks/a/acquire", [], False, False),  # no length: chunked, or none
        (b"POST", b"/v1/locks/a/acquire", [(b"content-length", b"2"), (b"content-length", b"2")], False, False),
        (b"POST", b"/v1/locks/a/acquire", [(b"content-length", b"+2")], False, False),
        (b"POST", b"/v1/locks/a/acquire", [(b"content-length", b"2"), (b"expect", b"100-continue")], False, False),
        (b"POST", b"/v1/locks/a/acquire", [(b"content-length", b"2"), (b"x-forwarded-for", b"1.2.3.4")], True, False),
        (b"POST", b"/v1/locks/a/acquire", [(b"content-length", b"2"), (b"x-forwarded-for", b"1.2.3.4")], False, True),
        (b"POST", b"/v1/locks/a/acquire", [(b"content-length", b"2"), (b"x-forwarded-proto", b"https")], True, False),
        (b"GET", b"/v1/locks/a/acquire", [(b"content-length", b"2")], False, False),
        (b"POST", b"/v1/locks/a", [(b"content-length", b"2")], False, False),
        (b"POST", b"/v1/locks//acquire", [(b"content-length", b"2")], False, True),  # an empty name: the rule's 422
        (b"POST", b"/v1/locks/acquire", [(b"content-length", b"2")], False, False),
        (b"POST", b"/v1/locks/a/acquire#x", [(b"content-length", b"2")], False, False),
        (b"POST", b"http://h/v1/locks/a/acquire", [(b"content-length", b"2")], False, False),
        (b"POST", b"/v1/jobs/a/acquire", [(b"content-length", b"2")], False, False),
    ],
)
def test_what_the_lane_admits(
    settings: Settings, method: bytes, url: bytes, headers: list[tuple[bytes, bytes]], trusted: bool, admitted: bool
) -> None:
    lane = create_app(settings).state.direct_lane
    found = lane.admits(method, url, headers, trusted)
    assert (found is not None) == admitted
    if found is not None:
        assert found[2] == url.decode().removeprefix("/v1/locks/").rsplit("/", 1)[0]
