"""Per-request cost of app.api.edge.Edge (metrics + access log, the origin rule and the body limit), printed, not
asserted.

    .venv/bin/python scripts/bench_observe.py [requests]

Drives a trivial ASGI app directly (no HTTP, no database) with and without the middleware, so the difference
is the middleware's own cost: label lookup, counter + histogram, request id, the header pass, and (when enabled)
one formatted JSON log line written to /dev/null.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from typing import Any

from app.api.edge import Edge
from app.ops.logs import configure_logging
from app.ops.metrics import Metrics


class _Route:
    path_format = "/v1/locks/{name}/acquire"
    operation_id = "acquireLock"


async def inner(scope: Any, receive: Any, send: Any) -> None:
    scope["route"] = _Route  # what the router does
    scope["path_params"] = {"name": "nightly-billing"}
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": b"{}"})


async def run(app: Any, n: int) -> float:
    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        pass

    headers = [(b"host", b"schedlock"), (b"content-type", b"application/json"), (b"content-length", b"2")]
    start = time.perf_counter()
    for _ in range(n):
        scope = {"type": "http", "method": "POST", "path": "/v1/locks/nightly-billing/acquire", "headers": headers,
                 "client": ("10.0.0.7", 51234)}  # fmt: skip
        await app(scope, receive, send)
    return (time.perf_counter() - start) / n * 1e6


async def main(n: int, devnull: Any) -> None:
    configure_logging("INFO", "json", stream=devnull)
    observed = Edge(inner, Metrics(), (), loopback_only=False, max_body_bytes=16384)
    await run(inner, 2000)
    await run(observed, 2000)
    base = min([await run(inner, n) for _ in range(3)])
    logged = min([await run(observed, n) for _ in range(3)])
    logging.getLogger("schedlock.access").setLevel(logging.WARNING)
    unlogged = min([await run(observed, n) for _ in range(3)])
    print(f"bare ASGI app:                          {base:6.2f} µs/request")
    print(f"+ Edge, metrics only:        {unlogged:6.2f} µs/request (+{unlogged - base:.2f})")
    print(f"+ Edge, metrics + JSON log:  {logged:6.2f} µs/request (+{logged - base:.2f})")


if __name__ == "__main__":
    with open(os.devnull, "w") as devnull:
        asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 50_000, devnull))
