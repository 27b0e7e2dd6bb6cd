"""Stock HTTP clients at their defaults complete a lock cycle with an API token: curl (plain, --http2, --http1.0),
Python's urllib, httpx and requests. (The JDK HttpClient, Go net/http and Node fetch do it in
tests/system/polyglot/test_examples.py.)

The cycle: acquire -> 409 lock_held -> extend -> release -> GET -> list."""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import httpx
import pytest
import requests

from tests.support.polyglot import bearer, require
from tests.support.servers import LiveServer

#: (method, url, JSON body or None) -> (status, JSON answer, HTTP version the answer came in)
Send = Callable[[str, str, dict[str, Any] | None], tuple[int, dict[str, Any], str]]


def curl(flag: str | None) -> Send:
    def send(method: str, url: str, body: dict[str, Any] | None) -> tuple[int, dict[str, Any], str]:
        command = [
            require("curl", "curl"),
            "-sS",
            "-X",
            method,
            url,
            "-H",
            f"Authorization: {bearer()['Authorization']}",
        ]
        if flag:
            command.append(flag)
        if body is not None:
            command += ["-H", "content-type: application/json", "--data-binary", json.dumps(body)]
        command += ["--write-out", "\n%{http_code} %{http_version}"]
        done = subprocess.run(command, capture_output=True, text=True, timeout=30, check=True)
        answer, _, trailer = done.stdout.rpartition("\n")
        status, version = trailer.split()
        return int(status), json.loads(answer), version

    return send


def urllib_send(method: str, url: str, body: dict[str, Any] | None) -> tuple[int, dict[str, Any], str]:
    data = None if body is None else json.dumps(body).encode()
    headers = bearer() | ({} if body is None else {"content-type": "application/json"})
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read()), "1.1"
    except urllib.error.HTTPError as error:
        with error:
            return error.code, json.loads(error.read()), "1.1"


def httpx_send(method: str, url: str, body: dict[str, Any] | None) -> tuple[int, dict[str, Any], str]:
    response = httpx.request(method, url, json=body, headers=bearer())
    return response.status_code, response.json(), response.http_version.removeprefix("HTTP/")


def requests_send(method: str, url: str, body: dict[str, Any] | None) -> tuple[int, dict[str, Any], str]:
    response = requests.request(method, url, json=body, headers=bearer(), timeout=10)
    return response.status_code, response.json(), {10: "1.0", 11: "1.1"}[response.raw.version]


CLIENTS: dict[str, tuple[Send, str]] = {
    "curl": (curl(None), "1.1"),
    "curl --http2": (curl("--http2"), "1.1"),  # the h2c offer is ignored: the answer comes on HTTP/1.1
    # An HTTP/1.0 request is answered in an "HTTP/1.1" status line (RFC 9110 section 2.5), then the connection closes.
    "curl --http1.0": (curl("--http1.0"), "1.1"),
    "urllib": (urllib_send, "1.1"),
    "httpx": (httpx_send, "1.1"),
    "requests": (requests_send, "1.1"),
}


@pytest.mark.parametrize("client", list(CLIENTS))
def test_a_stock_client_completes_the_lock_cycle(client: str, poly_server: LiveServer, poly_name: str) -> None:
    send, version = CLIENTS[client]
    lock = f"{poly_server.url}/v1/locks/{poly_name}"
    acquire = {"lock_at_most_for": "10m", "lock_at_least_for": "0s", "holder": client}

    status, lease, answered_in = send("POST", f"{lock}/acquire", acquire)
    assert (status, answered_in) == (200, version), lease
    assert lease["acquired"] is True and lease["locked_by"].startswith(f"{client} [schedlock via polyglot lease ")

    status, held, _ = send("POST", f"{lock}/acquire", acquire)
    assert status == 409 and held["error"]["code"] == "lock_held"
    assert held["error"]["locked_by"] == lease["locked_by"]

    status, extended, _ = send("POST", f"{lock}/extend", {"token": lease["token"], "lock_at_most_for": "20m"})
    assert status == 200 and extended["lock_until"] > lease["lock_until"]

    status, released, _ = send("POST", f"{lock}/release", {"token": lease["token"]})
    assert status == 200 and released["released"] is True

    status, seen, _ = send("GET", lock, None)
    assert status == 200 and seen["held"] is False and seen["fencing_token"] == lease["fencing_token"]

    status, page, _ = send("GET", f"{poly_server.url}/v1/locks?prefix={poly_name}", None)
    assert status == 200 and [item["name"] for item in page["items"]] == [poly_name]
