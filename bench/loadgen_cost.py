"""``python -m bench.loadgen_cost``: what each candidate load generator costs the machine, per request.

The benchmark shares two cores between the load generator, the server and Postgres, so every CPU second the
generator burns is taken from what is being measured. This runs the same acquire->release cycle with wrk (+ Lua)
and with an async httpx client, first at a fixed rate (same work for both) and then flat out, and reports the
generator's CPU per request. It justifies ``bench/loadgen.py``'s choice of wrk; rerun it if that is in doubt.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import time
import uuid
from typing import Any

import httpx
import uvloop

from app.db.schema import qualified_name
from bench import target
from bench.database import HELP, database, default_url
from bench.loadgen import Load, run_wrk


async def _httpx_cycles(base_url: str, load: Load) -> tuple[int, float]:
    """Acquire->release cycles with httpx over ``load.clients`` keep-alive connections; returns (requests, s)."""
    limits = httpx.Limits(max_connections=load.clients, max_keepalive_connections=load.clients)
    interval = 1.0 / load.rate if load.rate else 0.0
    requests = 0

    async def client(i: int, http: httpx.AsyncClient, deadline: float) -> None:
        nonlocal requests
        index, due = i, time.perf_counter() + interval * i / load.clients
        while time.perf_counter() < deadline:
            if interval:
                await asyncio.sleep(max(0.0, due - time.perf_counter()))
                due += interval
            name = f"{load.prefix}{index:06d}"
            index = (index + load.clients) % load.names
            r = await http.post(f"/v1/locks/{name}/acquire", json={"lock_at_most_for": "30s", "holder": "bench"})
            requests += 1
            if r.status_code == 200:
                await http.post(f"/v1/locks/{name}/release", json={"token": r.json()["token"]})
                requests += 1

    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=10) as http:
        start = time.perf_counter()
        await asyncio.gather(*(client(i, http, start + load.seconds) for i in range(load.clients)))
        return requests, time.perf_counter() - start


def _httpx(base_url: str, load: Load) -> dict[str, Any]:
    before = resource.getrusage(resource.RUSAGE_SELF)
    requests, seconds = uvloop.run(_httpx_cycles(base_url, load))
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return _figures(requests, seconds, cpu)


def _wrk(base_url: str, load: Load) -> dict[str, Any]:
    phase = run_wrk(base_url, load)
    return _figures(len(phase.acquire_us) + len(phase.release_us), phase.seconds, phase.loadgen_cpu_s)


def _figures(requests: int, seconds: float, cpu: float) -> dict[str, Any]:
    return {
        "requests_per_s": round(requests / seconds, 1),
        "cpu_cores": round(cpu / seconds, 3),
        "cpu_us_per_request": round(cpu / requests * 1e6, 1) if requests else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.loadgen_cost", description=__doc__)
    parser.add_argument("--database-url", default=default_url(), help=HELP)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--rate", type=float, default=500.0, help="cycles/s of the fixed-rate comparison")
    parser.add_argument("--seconds", type=int, default=10)
    args = parser.parse_args()
    with database(args.database_url) as args.database_url:
        return _measure(args)


def _measure(args: argparse.Namespace) -> int:
    run_id = uuid.uuid4().hex[:8]
    schema, prefix = f"bench_{run_id}", f"bench-{run_id}-"
    sql_table = qualified_name("shedlock", schema)
    results: dict[str, Any] = {"clients": args.clients, "rate": args.rate, "seconds": args.seconds}
    with open(os.devnull, "wb") as log:
        server = target.start_server(args.database_url, f"{schema}.shedlock", {}, log)
        try:
            for label, rate in (("fixed_rate", args.rate / args.clients), ("flat_out", 0.0)):
                load = Load("own", args.clients, args.seconds, max(1024, args.clients), prefix, rate=rate)
                for name, run in (("wrk", _wrk), ("httpx", _httpx)):
                    results[f"{label}_{name}"] = run(server.url, load)
                    target.expire_bench_leases(args.database_url, sql_table, prefix)
                    print(f"{label:<10} {name:<6} {json.dumps(results[f'{label}_{name}'])}", flush=True)
        finally:
            target.stop_server(server)
            target.drop_schema(args.database_url, schema)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
