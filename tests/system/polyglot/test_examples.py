"""examples/java, examples/go and examples/node, compiled and run as real programs against a live server with API
tokens, each with its language's stock HTTP client at its defaults (JDK HttpClient, Go net/http, Node fetch)."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import httpx
import pytest

from tests.support.api import seconds
from tests.support.polyglot import SECRET, Program, bearer, row
from tests.support.servers import LiveServer, free_port


def acquire(server: LiveServer, name: str, at_most: str = "1m") -> httpx.Response:
    body = {"lock_at_most_for": at_most, "holder": "the test"}
    return httpx.post(f"{server.url}/v1/locks/{name}/acquire", json=body, headers=bearer())


def test_acquire_held_extend_release_get_list(program: Program, poly_server: LiveServer, poly_name: str) -> None:
    result = program.run("cycle", poly_name, url=poly_server.url)
    assert result["second"] == "held"  # the second acquire got 409 lock_held and said so, without raising
    assert result["extended"] is True
    assert 590 <= seconds(result["first_lock_until"], result["extended_lock_until"]) <= 610  # 10m, then now + 20m
    assert result["get_held"] is False  # released
    assert result["listed"] == [poly_name]
    assert result["fencing_token"] == result["get_fencing_token"]
    seen = row(poly_server, poly_name)
    assert seen["held"] is False and seen["fencing_token"] == result["fencing_token"]
    assert str(seen["locked_by"]).startswith(f"{program.language} on ")  # the example's default holder


def test_a_held_lock_skips_the_task(program: Program, poly_server: LiveServer, poly_name: str) -> None:
    assert acquire(poly_server, poly_name).status_code == 200
    result = program.run("execute", poly_name, "60000", "0", "ok", url=poly_server.url)
    assert result == {"outcome": "skipped_held", "fencing_token": None, "assert_outside": "refused"}


def test_the_task_runs_locked_and_the_at_least_window_is_kept(
    program: Program, poly_server: LiveServer, poly_name: str
) -> None:
    result = program.run("execute", poly_name, "60000", "3000", "ok", url=poly_server.url)
    assert result["outcome"] == "executed"
    assert isinstance(result["fencing_token"], int)  # assertLocked() inside the task found the lease
    assert result["assert_outside"] == "refused"  # and outside it, none
    seen = row(poly_server, poly_name)
    assert seen["fencing_token"] == result["fencing_token"]
    assert seen["held"] is True  # released, but kept until locked_at + 3s
    assert 2.9 <= seconds(str(seen["locked_at"]), str(seen["lock_until"])) <= 3.1
    held = acquire(poly_server, poly_name)
    assert held.status_code == 409 and held.json()["error"]["code"] == "lock_held"


def test_the_lock_is_released_when_the_task_throws(program: Program, poly_server: LiveServer, poly_name: str) -> None:
    result = program.run("execute", poly_name, "60000", "0", "throw", url=poly_server.url)
    assert result["outcome"] == "threw" and isinstance(result["fencing_token"], int)
    assert row(poly_server, poly_name)["held"] is False
    assert acquire(poly_server, poly_name).status_code == 200


def test_go_releases_when_the_job_panics(go_program: Program, poly_server: LiveServer, poly_name: str) -> None:
    result = go_program.run("execute", poly_name, "60000", "0", "panic", url=poly_server.url)
    assert result["outcome"] == "threw" and isinstance(result["fencing_token"], int)
    assert row(poly_server, poly_name)["held"] is False


@pytest.mark.parametrize("token", [None, "not-the-secret"])
def test_the_token_comes_from_schedlock_token(
    program: Program, token: str | None, poly_server: LiveServer, poly_name: str
) -> None:
    """Without the right SCHEDLOCK_TOKEN the request is rejected loudly: neither run nor taken for "held"."""
    result = program.run("execute", poly_name, "60000", "0", "ok", url=poly_server.url, token=token)
    assert result == {"outcome": "rejected", "status": 401, "code": "unauthorized"}
    response = httpx.get(f"{poly_server.url}/v1/locks/{poly_name}", headers=bearer())
    assert response.status_code == 404  # nothing was taken
    assert program.run("execute", poly_name, "60000", "0", "ok", url=poly_server.url, token=SECRET)["outcome"] == (
        "executed"
    )


class _BadGateway(http.server.BaseHTTPRequestHandler):
    """What a proxy in front of a dead service answers: an HTML 502, not the service's JSON."""

    def _answer(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        self.rfile.read(length)
        body = b"<html><body>502 Bad Gateway</body></html>"
        self.send_response(502)
        self.send_header("content-type", "text/html")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def bad_gateway() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _BadGateway)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("down", ["refused", "bad-gateway"])
def test_service_down_fails_closed(program: Program, down: str, bad_gateway: str, poly_name: str) -> None:
    url = f"http://127.0.0.1:{free_port()}" if down == "refused" else bad_gateway
    result = program.run("execute", poly_name, "60000", "0", "ok", url=url)
    assert result == {"outcome": "skipped_unavailable", "fencing_token": None, "assert_outside": "refused"}
