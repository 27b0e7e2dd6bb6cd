"""Property tests over the raw request surface: whatever the path bytes, query string, header values and body
bytes, the answer is never a 5xx and nothing is logged at ERROR or with a traceback.

Beside the schema-driven fuzzing (tests/api/test_fuzz.py), which only sends what the OpenAPI document describes, these
send what a hostile or broken client can: percent-encoded bytes of any value (NUL, lone surrogates' UTF-8, invalid
UTF-8), any media type, bodies that are almost JSON, tokens with odd bytes around them, Origin headers.
In process they call the ASGI app directly with a scope built as uvicorn builds it; against a real served
uvicorn (httptools and this project's protocol) they send the bytes on a socket.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import socket
import urllib.parse
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from fastapi import FastAPI
from hypothesis import HealthCheck, example, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from app.auth.tokens import hash_secret
from app.settings import Settings
from tests.support.apps import in_process
from tests.support.servers import LiveServer, start_server, stop_server

SECRET = "raw-secret-" + "r" * 40
EXAMPLES = int(os.environ.get("SCHEDLOCK_FUZZ_EXAMPLES", "100"))


def _tokens() -> str:
    # admin: force-release is part of the surface too
    entry = {"name": "raw", "sha256": hash_secret(SECRET), "prefixes": ["*"], "access": "read-write", "admin": True}
    return json.dumps({"tokens": [entry]})


# --- the requests ------------------------------------------------------------------------------------------------

_ANY_BYTE = st.binary(min_size=1, max_size=1).map(lambda b: f"%{b[0]:02X}")
_NASTY = st.sampled_from(
    ["%00", "%ED%A0%80", "%FF", "%C2%85", "%2F", "%25", "%0A", "..", "/", "%C3%A9", "%F0%9F%94%92"]
)
_VISIBLE = st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters="?#%")
#: Path and query text as it may appear on the request line: visible ASCII and percent escapes of anything.
_URL_TEXT = st.lists(st.one_of(st.text(alphabet=_VISIBLE, max_size=8), _ANY_BYTE, _NASTY), max_size=8).map("".join)
_NAME = st.one_of(st.from_regex(r"[a-z0-9._-]{1,20}", fullmatch=True), _URL_TEXT)
_ACTION = st.sampled_from(["acquire", "release", "extend", "force-release"])
_READ = st.sampled_from(["", "/runs", "/skips"])
_METHOD = st.sampled_from(["GET", "POST", "PUT", "DELETE", "OPTIONS", "HEAD", "PATCH", "BREW"])
_TARGET = st.one_of(
    st.builds(lambda n, a: ("POST", f"/v1/locks/{n}/{a}"), _NAME, _ACTION),
    st.builds(lambda n, a: ("POST", f"/v1/locks/{n}/{a}"), _NAME, _ACTION),
    st.builds(lambda n, r: ("GET", f"/v1/locks/{n}{r}"), _NAME, _READ),
    st.builds(lambda n: ("GET", f"/ui/locks/{n}"), _NAME),
    st.just(("GET", "/v1/locks")),
    st.just(("GET", "/v1/runs")),
    st.tuples(
        _METHOD,
        st.sampled_from(
            ["/healthz", "/readyz", "/metrics", "/docs", "/openapi.json", "/", "/v1/locks", "/v1/runs", "/ui"]
        ),
    ),
    st.tuples(_METHOD, _URL_TEXT.map(lambda t: "/" + t)),
)
#: A cursor is base64 of a name: base64 of any bytes tries what a cursor can decode to (NUL, controls, bad UTF-8).
_CURSOR_TEXT = st.one_of(st.text(alphabet="\x00\x01\x1f/\x7f\x85az.-", max_size=8), st.text(max_size=8))
_BASE64 = st.one_of(st.binary(max_size=12), _CURSOR_TEXT.map(lambda t: t.encode("utf-8", "surrogatepass"))).map(
    lambda b: base64.urlsafe_b64encode(b).decode().rstrip("=")
)
_QUERY = st.one_of(
    st.just(""),
    st.fixed_dictionaries(
        {},
        optional={
            "prefix": st.one_of(st.from_regex(r"[a-z.-]{1,5}", fullmatch=True), _URL_TEXT),
            "cursor": st.one_of(_BASE64, _BASE64, _URL_TEXT),
            "limit": st.one_of(st.sampled_from(["1", "100", "1000", "1001", "0", "-1"]), _URL_TEXT),
            "held": st.one_of(st.sampled_from(["true", "false", "1", "maybe"]), _URL_TEXT),
            "ended": st.one_of(st.sampled_from(["true", "false", "maybe"]), _URL_TEXT),
            "since": st.one_of(
                st.sampled_from(["2026-11-30T03:00:00Z", "2026-11-30", "0", "9999-99-99T99:99Z"]), _URL_TEXT
            ),
            "until": _URL_TEXT,
            "hours": st.one_of(st.sampled_from(["1", "744", "745", "0", "-1"]), _URL_TEXT),
            "x": _URL_TEXT,
        },
    ).map(lambda params: "&".join(f"{key}={value}" for key, value in params.items())),
)
_JSON_VALUE = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
_DURATION = st.one_of(st.sampled_from(["1m", "PT1S", "2s", "0", "10s\n", "\u0661s", "1500"]), _JSON_VALUE)
_BODY_FIELDS = st.fixed_dictionaries(
    {"lock_at_most_for": _DURATION},
    optional={
        "lock_at_least_for": _DURATION,
        "holder": st.one_of(st.text(max_size=10), _JSON_VALUE),
        "token": st.one_of(st.text(max_size=10), _JSON_VALUE),
        "reason": st.one_of(st.text(max_size=10), _JSON_VALUE),
        "slot": st.one_of(st.text(max_size=10), _JSON_VALUE),
        "schedule": st.one_of(st.sampled_from(["* * * * *", "@daily", "61 * * * *", "\x00"]), _JSON_VALUE),
        "timezone": st.one_of(st.sampled_from(["UTC", "Europe/Berlin", "Mars/Base", "../etc"]), _JSON_VALUE),
        "completed": _JSON_VALUE,
        "x": _JSON_VALUE,
    },
)
_BODY = st.one_of(
    _BODY_FIELDS.map(lambda d: json.dumps(d, allow_nan=True).encode()),
    _BODY_FIELDS.map(lambda d: json.dumps(d, allow_nan=True).encode()),
    st.just(b""),
    st.binary(max_size=64),
    st.sampled_from(
        [b'{"lock_at_most_for": "1m", "holder": "\\ud800"}', b'{"token": "\\u0000"}', b"[" * 2000, b"\xef\xbb\xbf{}"]
    ),
)
_BYTES = st.binary(max_size=40).map(lambda b: b.replace(b"\r", b"").replace(b"\n", b""))
_CONTENT_TYPE = st.one_of(
    st.sampled_from([b"application/json", b"application/json", b"text/plain", b"application/x-www-form-urlencoded"]),
    st.sampled_from([b"application/+json", b"multipart/form-data; boundary=x", b"Application/JSON;charset=utf-16"]),
    _BYTES,
)
_AUTHORIZATION = st.one_of(
    st.just(f"Bearer {SECRET}".encode()),
    st.just(f"Bearer {SECRET}".encode()),
    st.just(f"Bearer {SECRET}".encode()),
    st.sampled_from([f"Bearer {SECRET}\xa0".encode("latin-1"), b"Bearer ", b"bearer x=y", b"Basic eDp5"]),
    _BYTES,
)
_ORIGIN = st.one_of(
    st.sampled_from([b"null", b"http://127.0.0.1:8000", b"https://evil.example", b"http://[::1", b"http://x:99999"]),
    _BYTES,
)
_OTHER_HEADER = st.tuples(
    st.sampled_from([b"x-request-id", b"accept", b"x-anything", b"access-control-request-method"]), _BYTES
)


@dataclass
class RawRequest:
    method: str
    path: str  # as on the request line: visible ASCII, percent escapes
    query: str
    headers: list[tuple[bytes, bytes]]
    body: bytes

    def target(self) -> str:
        return self.path + (f"?{self.query}" if self.query else "")


@st.composite
def raw_requests(draw: st.DrawFn) -> RawRequest:
    """Mostly authenticated, declared JSON, no Origin: so most requests get past the first checks to the database;
    the rest try every check on the way."""
    method, path = draw(_TARGET)
    headers: list[tuple[bytes, bytes]] = []
    if draw(st.integers(0, 3)):
        headers.append((b"authorization", draw(_AUTHORIZATION)))
    if draw(st.integers(0, 3)):
        headers.append((b"content-type", draw(_CONTENT_TYPE)))
    if not draw(st.integers(0, 5)):
        headers.append((b"origin", draw(_ORIGIN)))
    headers += draw(st.lists(_OTHER_HEADER, max_size=2))
    body = draw(_BODY) if method in ("POST", "PUT", "PATCH") or not draw(st.integers(0, 5)) else b""
    return RawRequest(method, path, draw(_QUERY), draw(st.permutations(headers)), body)


_JSON_AUTH = [(b"authorization", f"Bearer {SECRET}".encode()), (b"content-type", b"application/json")]
#: Always sent (hypothesis' explicit examples), so each run provably reaches these outcomes: 200, 415, 422, 401.
SURE_OUTCOMES = [
    RawRequest("POST", "/v1/locks/raw-sure/acquire", "", _JSON_AUTH, b'{"lock_at_most_for": "1s"}'),
    RawRequest("POST", "/v1/locks/raw-sure/release", "", _JSON_AUTH[:1], b'{"token": "t"}'),
    RawRequest("GET", "/v1/locks", "cursor=AA", _JSON_AUTH, b""),
    RawRequest("GET", "/v1/locks", "", [], b""),
]


# --- what must never happen -----------------------------------------------------------------------------------------


@dataclass
class Alarm(logging.Handler):
    """Remembers every record at ERROR or above, and any record carrying a traceback."""

    records: list[logging.LogRecord] = field(default_factory=list)

    def __post_init__(self) -> None:
        logging.Handler.__init__(self, logging.DEBUG)

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.ERROR or record.exc_info:
            self.records.append(record)

    def __hash__(self) -> int:
        return id(self)


@pytest.fixture
def alarm() -> Iterator[Alarm]:
    handler = Alarm()
    root = logging.getLogger()
    root.addHandler(handler)
    yield handler
    root.removeHandler(handler)


# --- in process ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
async def raw_app(settings: Settings) -> AsyncIterator[FastAPI]:
    async with in_process(settings.model_copy(update={"tokens": _tokens()})) as (app, _):
        yield app


def scope_of(request: RawRequest) -> dict[str, Any]:
    """The scope uvicorn's httptools protocol builds for these bytes (see its on_headers_complete)."""
    path = urllib.parse.unquote(request.path) if "%" in request.path else request.path
    headers = [(b"host", b"127.0.0.1:8000"), *request.headers, (b"content-length", str(len(request.body)).encode())]
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "server": ("127.0.0.1", 8000),
        "client": ("127.0.0.1", 50000),
        "scheme": "http",
        "method": request.method,
        "root_path": "",
        "path": path,
        "raw_path": request.path.encode("ascii"),
        "query_string": request.query.encode("ascii"),
        "headers": headers,
        "state": {},
    }


async def call(app: FastAPI, request: RawRequest) -> int:
    sent: list[dict[str, Any]] = []
    body_sent = False

    async def receive() -> dict[str, Any]:
        nonlocal body_sent
        if not body_sent:
            body_sent = True
            return {"type": "http.request", "body": request.body, "more_body": False}
        await asyncio.Event().wait()  # the client stays; the app should not read again
        raise AssertionError("unreachable")

    async def send(message: Any) -> None:
        sent.append(message)

    await app(scope_of(request), receive, send)
    assert sent and sent[0]["type"] == "http.response.start", sent
    assert sent[-1]["type"] == "http.response.body" and not sent[-1].get("more_body"), "an unfinished response"
    return int(sent[0]["status"])


async def test_no_raw_request_gets_a_5xx_in_process(raw_app: FastAPI, alarm: Alarm) -> None:
    loop = asyncio.get_running_loop()
    statuses: Counter[int] = Counter()

    @given(raw=raw_requests())
    @example(raw=SURE_OUTCOMES[0])
    @example(raw=SURE_OUTCOMES[1])
    @example(raw=SURE_OUTCOMES[2])
    @example(raw=SURE_OUTCOMES[3])
    @hypothesis_settings(max_examples=EXAMPLES * 5, deadline=None, suppress_health_check=list(HealthCheck))
    def check(raw: RawRequest) -> None:
        # Hypothesis drives from a thread; each request runs on this loop, where the app's pool lives.
        status = asyncio.run_coroutine_threadsafe(call(raw_app, raw), loop).result(30)
        statuses[status] += 1
        assert status < 500, (status, raw)
        assert not alarm.records, [alarm.format(record) for record in alarm.records]

    await asyncio.to_thread(check)
    print(f"\nraw requests in process, by status: {dict(sorted(statuses.items()))}")
    assert {200, 401, 403, 404, 405, 415, 422} <= set(statuses), statuses  # 403, 404, 405: drawn often enough


# --- against a real served uvicorn ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def raw_server(settings: Settings) -> Iterator[LiveServer]:
    server = start_server(settings, extra_env={"SCHEDLOCK_TOKENS": _tokens(), "SCHEDLOCK_LOG_FORMAT": "json"})
    yield server
    stop_server(server)


def wire_bytes(raw: RawRequest, host: str, chunked: bool) -> bytes:
    """The request as bytes on the wire; the body either with Content-Length or chunked."""
    head = [f"{raw.method} {raw.target()} HTTP/1.1".encode(), f"Host: {host}".encode()]
    head += [name + b": " + value for name, value in raw.headers]
    if chunked:
        head.append(b"Transfer-Encoding: chunked")
        body = (f"{len(raw.body):x}\r\n".encode() + raw.body + b"\r\n" if raw.body else b"") + b"0\r\n\r\n"
    else:
        head.append(f"Content-Length: {len(raw.body)}".encode())
        body = raw.body
    head.append(b"Connection: close")
    return b"\r\n".join(head) + b"\r\n\r\n" + body


def exchange(server: LiveServer, data: bytes) -> int | None:
    """Send ``data`` on a new connection; the response's status, or None if the server closed without one."""
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(data)
        received = b""
        while b"\r\n" not in received:
            chunk = sock.recv(4096)
            if not chunk:
                return None
            received += chunk
    status_line = received.split(b"\r\n", 1)[0].split()
    assert status_line[0] == b"HTTP/1.1", received[:200]
    return int(status_line[1])


def test_no_raw_request_gets_a_5xx_from_a_served_uvicorn(raw_server: LiveServer) -> None:
    statuses: Counter[int | None] = Counter()
    host = raw_server.url.removeprefix("http://")

    @given(raw=raw_requests(), chunked=st.booleans())
    @example(raw=SURE_OUTCOMES[0], chunked=False)
    @example(raw=SURE_OUTCOMES[1], chunked=True)
    @example(raw=SURE_OUTCOMES[2], chunked=False)
    @example(raw=SURE_OUTCOMES[3], chunked=True)
    @hypothesis_settings(max_examples=EXAMPLES * 2, deadline=None, suppress_health_check=list(HealthCheck))
    def check(raw: RawRequest, chunked: bool) -> None:
        status = exchange(raw_server, wire_bytes(raw, host, chunked))
        statuses[status] += 1
        assert status is None or status < 500, (status, raw)

    check()
    print(f"\nraw requests to uvicorn, by status: {dict(sorted(statuses.items(), key=str))}")
    assert {200, 400, 401, 415, 422} <= set(statuses), statuses
    # What the server wrote: JSON lines only, none at error level, no traceback.
    # split on "\n" alone: a line may hold U+0085 or U+2028 (a lock name), which str.splitlines() would cut at
    lines = [json.loads(line) for line in "".join(raw_server.output).split("\n") if line.strip()]
    assert not [line for line in lines if line["level"] in ("error", "critical") or "Traceback" in line["message"]]
