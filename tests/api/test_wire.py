"""What clients put on the wire, sent to a served uvicorn with app.api.h2c.HttpProtocol (a real `serve`
process): upgrade offers (h2c) ignored with the body kept, Expect: 100-continue, chunked bodies, Connection: close,
pipelining, and clients that disconnect mid-body (no 5xx, no connection left behind)."""

from __future__ import annotations

import json
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.settings import Settings
from tests.support.patience import SETTLE
from tests.support.servers import LiveServer, start_server, stop_server

H2C = b"Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n"


@pytest.fixture(scope="module")
def server(settings: Settings) -> Iterator[LiveServer]:
    """A server of this module's own, so that its log holds only what these tests caused."""
    started = start_server(settings)
    yield started
    stop_server(started)


@pytest.fixture
def lock() -> str:
    return f"wire-{uuid.uuid4().hex[:12]}"


def connect(server: LiveServer) -> socket.socket:
    host, port = server.url.removeprefix("http://").split(":")
    conn = socket.create_connection((host, int(port)), timeout=10)
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # each sendall leaves as its own segment(s)
    return conn


def read_responses(conn: socket.socket, count: int) -> list[tuple[int, dict[str, str], bytes]]:
    """Read `count` whole responses (each with content-length), in order: (status, headers, body)."""
    buffer = b""
    responses: list[tuple[int, dict[str, str], bytes]] = []
    while len(responses) < count:
        while b"\r\n\r\n" not in buffer:
            chunk = conn.recv(65536)
            assert chunk, f"connection closed after {len(responses)} responses: {buffer!r}"
            buffer += chunk
        head, buffer = buffer.split(b"\r\n\r\n", 1)
        status_line, *lines = head.decode("latin-1").split("\r\n")
        headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines)}
        length = int(headers.get("content-length", "0"))
        while len(buffer) < length:
            chunk = conn.recv(65536)
            assert chunk, "connection closed mid-body"
            buffer += chunk
        body, buffer = buffer[:length], buffer[length:]
        responses.append((int(status_line.split()[1]), headers, body))
    return responses


def acquire_head(name: str, extra: bytes = b"", length: int | None = None) -> bytes:
    framing = b"Transfer-Encoding: chunked\r\n" if length is None else b"Content-Length: %d\r\n" % length
    return b"POST /v1/locks/%s/acquire HTTP/1.1\r\nHost: schedlock\r\nContent-Type: application/json\r\n%s%s\r\n" % (
        name.encode(),
        extra,
        framing,
    )


BODY = b'{"lock_at_most_for": "1m", "holder": "wire test"}'


def chunked(body: bytes, size: int) -> bytes:
    parts = [body[i : i + size] for i in range(0, len(body), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


def server_log(server: LiveServer) -> str:
    time.sleep(0.2)  # the reader thread takes the last lines from the pipe
    return "".join(server.output)


# --- an upgrade offer is ignored, the body kept ----------------------------------------------------------------


@pytest.mark.parametrize(
    "split",
    ["one-write", "head-then-body", "head-in-two-writes", "chunked-in-pieces"],
)
def test_h2c_upgrade_offer_is_answered_on_http11_with_the_body_intact(
    server: LiveServer, lock: str, split: str
) -> None:
    with connect(server) as conn:
        if split == "one-write":
            conn.sendall(acquire_head(lock, H2C, len(BODY)) + BODY)
        elif split == "head-then-body":  # what the JDK's HttpClient does: the body in a second write
            conn.sendall(acquire_head(lock, H2C, len(BODY)))
            time.sleep(0.1)
            conn.sendall(BODY)
        elif split == "head-in-two-writes":  # the upgrade header arrives before the head is complete
            request = acquire_head(lock, H2C, len(BODY)) + BODY
            cut = request.index(b"Upgrade: h2c") + 5
            conn.sendall(request[:cut])
            time.sleep(0.1)
            conn.sendall(request[cut:])
        else:
            conn.sendall(acquire_head(lock, H2C))
            for piece in (chunked(BODY, 7)[:20], chunked(BODY, 7)[20:]):
                time.sleep(0.05)
                conn.sendall(piece)
        # The connection stays usable: a second request (also an upgrade offer) on it, then a plain one.
        conn.sendall(b"GET /v1/locks/%s HTTP/1.1\r\nHost: schedlock\r\n%s\r\n" % (lock.encode(), H2C))
        conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: schedlock\r\n\r\n")
        (status, headers, body), (get_status, _, got), (health, _, _) = read_responses(conn, 3)
    assert status == 200, body
    assert "upgrade" not in headers and headers.get("connection") != "close"
    lease = json.loads(body)
    assert lease["acquired"] is True and lease["locked_by"].startswith("wire test ")
    assert get_status == 200 and json.loads(got)["fencing_token"] == lease["fencing_token"]
    assert health == 200
    assert "Unsupported upgrade request" not in server_log(server)


def test_curl_http2_completes_a_lock_cycle(server: LiveServer, lock: str) -> None:
    """curl --http2 on cleartext offers h2c exactly as the JDK does."""

    def curl(*args: str) -> dict[str, object]:
        done = subprocess.run(["curl", "-sS", "--http2", *args], capture_output=True, text=True, timeout=30, check=True)
        answer: dict[str, object] = json.loads(done.stdout)
        return answer

    url = f"{server.url}/v1/locks/{lock}"
    lease = curl("-X", "POST", f"{url}/acquire", "-H", "content-type: application/json", "-d", BODY.decode())
    released = curl(
        "-X",
        "POST",
        f"{url}/release",
        "-H",
        "content-type: application/json",
        "-d",
        json.dumps({"token": lease["token"]}),
    )
    assert released["released"] is True


def test_a_websocket_upgrade_is_still_uvicorns(server: LiveServer) -> None:
    """Only non-WebSocket upgrades are ignored; a WebSocket handshake goes to uvicorn's WebSocket protocol (the app
    has no WebSocket route, so it is refused), not to an HTTP route."""
    with connect(server) as conn:
        conn.sendall(
            b"GET /healthz HTTP/1.1\r\nHost: schedlock\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
            b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
        )
        [(status, _, _)] = read_responses(conn, 1)
    assert status == 403


# --- Expect, chunked, Connection: close, pipelining ------------------------------------------------------------


def test_expect_100_continue_gets_100_before_the_body_is_sent(server: LiveServer, lock: str) -> None:
    with connect(server) as conn:
        conn.sendall(acquire_head(lock, b"Expect: 100-continue\r\n", len(BODY)))
        interim = conn.recv(65536)
        assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
        conn.sendall(BODY)
        [(status, _, body)] = read_responses(conn, 1)
    assert status == 200 and json.loads(body)["acquired"] is True


def test_curl_with_expect_100_continue_and_a_body_over_1kib(server: LiveServer, lock: str, tmp_path: Path) -> None:
    body = tmp_path / "body.json"
    body.write_bytes(BODY[:-1] + b" " * 2048 + b"}")  # older curl sends Expect by itself above 1 KiB
    done = subprocess.run(
        [
            "curl",
            "-sS",
            "-v",
            "-X",
            "POST",
            f"{server.url}/v1/locks/{lock}/acquire",
            "-H",
            "content-type: application/json",
            "-H",
            "Expect: 100-continue",
            "--data-binary",
            f"@{body}",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert "HTTP/1.1 100 Continue" in done.stderr
    assert json.loads(done.stdout)["acquired"] is True


def test_a_chunked_request_body_in_odd_sized_chunks(server: LiveServer, lock: str) -> None:
    with connect(server) as conn:
        conn.sendall(acquire_head(lock) + chunked(BODY, 3))
        [(status, _, body)] = read_responses(conn, 1)
    assert status == 200 and json.loads(body)["name"] == lock


def test_connection_close_is_honoured(server: LiveServer, lock: str) -> None:
    with connect(server) as conn:
        conn.sendall(acquire_head(lock, b"Connection: close\r\n", len(BODY)) + BODY)
        [(status, headers, _)] = read_responses(conn, 1)
        assert status == 200 and headers["connection"] == "close"
        assert conn.recv(65536) == b""  # and the server closed its side


def test_pipelined_requests_are_answered_in_order(server: LiveServer, lock: str) -> None:
    name = lock.encode()
    requests = [
        acquire_head(lock, length=len(BODY)) + BODY,
        acquire_head(lock, length=len(BODY)) + BODY,
        b"GET /v1/locks/%s HTTP/1.1\r\nHost: schedlock\r\n\r\n" % name,
        b"GET /v1/locks?prefix=%s HTTP/1.1\r\nHost: schedlock\r\n\r\n" % name,
    ]
    with connect(server) as conn:
        conn.sendall(b"".join(requests))  # one write: the server reads them all at once
        responses = read_responses(conn, 4)
    assert [status for status, _, _ in responses] == [200, 409, 200, 200]
    assert json.loads(responses[1][2])["error"]["code"] == "lock_held"
    assert [item["name"] for item in json.loads(responses[3][2])["items"]] == [lock]


# --- a client that goes away mid-request -----------------------------------------------------------------------


def server_side_states(server: LiveServer, client_port: int) -> list[str]:
    """TCP states (hex, as /proc/net/tcp shows them) of the server's end of the connection from client_port."""
    server_port = int(server.url.rsplit(":", 1)[1])
    states = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote, state = fields[1], fields[2], fields[3]
        if int(local.split(":")[1], 16) == server_port and int(remote.split(":")[1], 16) == client_port:
            states.append(state)
    return states


@pytest.mark.parametrize(
    "partial",
    [
        pytest.param(lambda name: acquire_head(name, length=len(BODY)) + BODY[:10], id="content-length"),
        pytest.param(lambda name: acquire_head(name) + chunked(BODY, 8)[:25], id="chunked"),
        pytest.param(lambda name: acquire_head(name, b"Expect: 100-continue\r\n", len(BODY)), id="expect"),
        pytest.param(lambda name: acquire_head(name, H2C, len(BODY)) + BODY[:10], id="h2c-offer"),
        pytest.param(lambda name: acquire_head(name, length=len(BODY))[:30], id="mid-head"),
    ],
)
def test_a_client_that_disconnects_mid_body_leaves_no_error_and_no_connection(
    server: LiveServer, lock: str, partial: object
) -> None:
    before = len(server.output)
    conn = connect(server)
    client_port = conn.getsockname()[1]
    conn.sendall(partial(lock))  # type: ignore[operator]
    time.sleep(0.1)  # the server has read it and is waiting for the rest
    conn.close()
    deadline = time.monotonic() + SETTLE
    # ESTABLISHED (01) or CLOSE_WAIT (08) on the server's side would be a connection it never closed.
    while any(state in ("01", "08") for state in server_side_states(server, client_port)):
        assert time.monotonic() < deadline, f"server kept the connection: {server_side_states(server, client_port)}"
        time.sleep(0.05)
    assert httpx.get(f"{server.url}/healthz").status_code == 200
    log = "".join(server.output[before:])
    assert '"status":5' not in log and "Traceback" not in log and "Exception" not in log, log
    assert httpx.get(f"{server.url}/v1/locks/{lock}").status_code == 404  # nothing half-acquired
