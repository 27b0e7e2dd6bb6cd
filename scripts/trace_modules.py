"""Which source files one granted acquire passes through, served by uvicorn as ``serve`` serves it (its protocol,
the app, an API token), traced in the server's thread with ``sys.setprofile``; printed, not asserted.

    .venv/bin/python scripts/trace_modules.py      # from the checkout to measure (an embedded Postgres of its own)

docs/performance.md ("One way in") quotes its counts."""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import uuid
from collections import Counter

sys.path.insert(0, os.getcwd())

from bench.database import database


def main() -> None:
    with database(None) as url:
        from pydantic import SecretStr

        from app.auth.tokens import hash_secret
        from app.cli.servers import uvicorn_options
        from app.db import migrate
        from app.main import create_app
        from app.settings import Settings

        secret = "trace-secret-" + "s" * 40
        tokens = json.dumps(
            {"tokens": [{"name": "t", "sha256": hash_secret(secret), "prefixes": ["*"], "access": "read-write"}]}
        )
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        schema = f"trace_{uuid.uuid4().hex[:8]}"
        settings = Settings(database_url=SecretStr(url), table=f"{schema}.shedlock", tokens=tokens, port=port)
        migrate.upgrade(settings)
        import uvicorn

        options = uvicorn_options(settings)
        options.pop("loop")
        config = uvicorn.Config(create_app(settings), **options, lifespan="on")
        server = uvicorn.Server(config)
        seen: Counter[str] = Counter()

        def profile(frame, event, arg):  # type: ignore[no-untyped-def]
            if event == "call":
                seen[frame.f_code.co_filename] += 1

        loop_holder = {}

        def serve() -> None:
            import uvloop

            loop = uvloop.new_event_loop()
            loop_holder["loop"] = loop
            loop.run_until_complete(server.serve())

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        while not server.started:
            threading.Event().wait(0.05)
        loop = loop_holder["loop"]
        conn = socket.create_connection(("127.0.0.1", port))

        def acquire(name: str) -> bytes:
            body = b'{"lock_at_most_for": "1m"}'
            conn.sendall(
                b"POST /v1/locks/%s/acquire HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                % (name.encode(), secret.encode(), len(body), body)
            )
            got = b""
            while b"\r\n\r\n" not in got or not got.rstrip().endswith(b"}"):
                got += conn.recv(65536)
            return got

        for i in range(20):  # warm: imports, prepared statements
            assert b" 200 " in acquire(f"warm-{i}")[:20]
        done = threading.Event()
        loop.call_soon_threadsafe(lambda: (sys.setprofile(profile), done.set()))
        done.wait()
        answer = acquire("traced")
        done.clear()
        loop.call_soon_threadsafe(lambda: (sys.setprofile(None), done.set()))
        done.wait()
        assert b" 200 " in answer[:20], answer
        conn.close()
        server.should_exit = True
        thread.join(10)
        files = sorted(f for f in seen if not f.startswith("<"))
        site = [f for f in files if "site-packages" in f]
        own = [f for f in files if f.startswith(os.getcwd()) and f not in site]
        rest = [f for f in files if f not in site and f not in own]
        print(
            f"{len(files)} source files in all: {len(own)} of the project, {len(site)} of dependencies, "
            f"{len(rest)} of the standard library (and this script)"
        )
        for f in own:
            print("  own ", os.path.relpath(f))
        for f in site:
            print("  dep ", f.split("site-packages/")[1])
        for f in rest:
            print("  std ", f)


main()
