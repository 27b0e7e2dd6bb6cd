"""A webhook receiver on loopback for the jobs' webhooks: records every POST (headers and body), and answers 500 to
the first ``fail_first`` of them (to see retries)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Receiver:
    url: str
    fail_first: int = 0
    received: list[tuple[dict[str, str], bytes, int]] = field(default_factory=list)  # headers, body, status sent
    lock: threading.Lock = field(default_factory=threading.Lock)


@contextmanager
def receiver(fail_first: int = 0) -> Iterator[Receiver]:
    got = Receiver("", fail_first)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with got.lock:
                status = 500 if len(got.received) < got.fail_first else 204
                got.received.append(({k.lower(): v for k, v in self.headers.items()}, body, status))
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:  # quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    got.url = f"http://127.0.0.1:{server.server_address[1]}/hooks/schedlock"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield got
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
