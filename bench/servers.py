"""``python -m bench.servers``: the same app on several HTTP servers (or server settings), side by side.

Every variant serves schedlock's app with the same settings on one table (the same pool size, an API token sent on
every request, as ``python -m bench`` does) and takes turns with the others under the same load: wrk's
uncontended acquire → release cycles (``bench/wrk_script.lua``), one variant at a time, the order rotating every
round, each run on a server started for it (after a warm-up). For each run: cycles/s, the server's CPU per request
(its whole process tree: a supervisor, its workers, a Rust server's threads), the CPU of the Postgres backends
serving it, per cycle, and the load average. Each figure's median and spread over the rounds, and each variant's
per-round ratio to the first variant's run of the same round (paired, so a drift in the machine's load cancels out).
docs/performance.md, "The HTTP server".

A variant is ``LABEL=COMMAND``; ``{python}`` and ``{port}`` in the command are filled in, and ``SCHEDLOCK_*``
variables point it at the table. ``app.cli.servers:worker_app`` is the app as ``serve`` builds it, for another
server's factory option, e.g. ``granian=granian --interface asgi --factory --port {port} app.cli.servers:worker_app``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import shlex
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from app.db import migrate
from app.db.schema import qualified_name
from app.settings import Settings
from bench import about, target
from bench.database import HELP, database, default_url
from bench.loadgen import Load, run_wrk
from bench.measure import measure
from bench.run import _py_spy
from bench.stats import spread
from bench.summary import aggregate

RESULTS = Path(__file__).parent / "results"
DEFAULT_VARIANTS = [
    "uvicorn={python} -m app serve --port {port}",
    "uvicorn-2-workers={python} -m app serve --port {port} --workers 2",
]
#: Figures whose per-round ratio to the first variant is reported.
PAIRED = ("cycles_per_s", "server_cpu_us_per_request", "cpu_us_per_cycle")


def parse_variant(text: str) -> tuple[str, list[str]]:
    label, sep, command = text.partition("=")
    if not sep or not label or not command.strip():
        raise argparse.ArgumentTypeError(f"expected LABEL=COMMAND, got {text!r}")
    return label, shlex.split(command)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.servers", description=__doc__.split("\n\n")[0])
    p.add_argument("--variant", action="append", type=parse_variant, help="LABEL=COMMAND (repeatable)")
    p.add_argument("--database-url", default=default_url(), help=HELP)
    p.add_argument("--server-env", action="append", default=[], metavar="KEY=VALUE", help="for every variant")
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--seconds", type=int, default=10)
    p.add_argument("--warmup-seconds", type=int, default=2)
    p.add_argument("--clients", type=int, default=32)
    p.add_argument("--names", type=int, default=1024)
    p.add_argument(
        "--mode",
        choices=("own", "random"),
        default="own",
        help="own: each client its own names (uncontended); random: names drawn at random (contended when few)",
    )
    p.add_argument("--profile", action="store_true", help="then a py-spy flame graph of each variant")
    p.add_argument("--output", type=Path, help="JSON file to write (default: bench/results/servers-<time>.json)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    variants = dict(args.variant or [parse_variant(v) for v in DEFAULT_VARIANTS])
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    output: Path = args.output or RESULTS / f"servers-{stamp}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    extra_env = dict(item.split("=", 1) for item in args.server_env)
    with database(args.database_url) as url:
        args.database_url = url
        results = run(args, variants, extra_env, output)
    output.write_text(json.dumps(results, indent=2) + "\n")
    print(render(results))
    print(f"\nresults: {output}")
    return 0


def run(args: argparse.Namespace, variants: dict[str, list[str]], env: dict[str, str], output: Path) -> dict[str, Any]:
    run_id = uuid.uuid4().hex[:8]
    prefix = f"bench-{run_id}-"
    results: dict[str, Any] = {
        "started_at": about.now(),
        "machine": about.machine(args.database_url),
        "code": about.code(),
        "config": {k: str(v) for k, v in vars(args).items() if k not in ("variant", "database_url", "output")},
        "variants": {label: shlex.join(command) for label, command in variants.items()},
    }
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label in variants}
    load = Load(args.mode, args.clients, args.seconds, args.names, prefix, token="")
    with _table(args.database_url, run_id, prefix, env, output) as (start, token, table):
        load = replace(load, token=token)
        warmup = replace(load, seconds=args.warmup_seconds)
        labels = list(variants)
        for i in range(args.rounds):
            for label in labels[i % len(labels) :] + labels[: i % len(labels)]:
                print(f"# round {i + 1}/{args.rounds}: {label}", file=sys.stderr, flush=True)
                # A server of its own each round: a process's luck (measured: identical servers started side by side
                # kept 1.2-1.35 x apart for a whole run) is drawn again every round instead of staying with a variant.
                with start(label, variants[label]) as server:
                    run_wrk(server.url, warmup)
                    target.expire_bench_leases(args.database_url, table, prefix)
                    runs[label].append({**_measure(args.database_url, server, load, table, prefix), "pid": server.pid})
        if args.profile:
            profiles = {}
            for label, command in variants.items():
                with start(label, command) as server:
                    run_wrk(server.url, warmup)
                    svg = output.with_suffix(f".{label}.svg")
                    profiles[label] = _profile(args.database_url, server, load, table, prefix, svg)
            results["profiles"] = profiles
    results["runs"] = runs
    results["summary"] = summarise(runs)
    results["finished_at"] = about.now()
    results["machine"]["loadavg_end"] = list(os.getloadavg())
    return results


def _measure(database_url: str, server: target.Server, load: Load, table: str, prefix: str) -> dict[str, Any]:
    loadavg = os.getloadavg()[0]
    phase = measure(database_url, [(server, load)])
    target.expire_bench_leases(database_url, table, prefix)
    return {**phase.summary(), "loadavg_1m": round(loadavg, 2)}


def summarise(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Each variant's medians and spreads, and its per-round ratios to the first variant."""
    first = next(iter(runs.values()))
    out = {}
    for label, own in runs.items():
        figures = aggregate(own)
        figures["server_rss_mb"] = spread([r["server_rss_mb"] for r in own if r["server_rss_mb"] is not None])
        figures["vs_first"] = {
            key: spread([mine[key] / base[key] for mine, base in zip(own, first, strict=True) if base.get(key)])
            for key in PAIRED
        }
        out[label] = figures
    return out


def render(results: dict[str, Any]) -> str:
    def cell(figure: dict[str, Any] | None, fmt: str = ",.0f") -> str:
        if not figure or figure.get("median") is None:
            return "-"
        return f"{figure['median']:{fmt}} [{figure['min']:{fmt}}-{figure['max']:{fmt}}]"

    lines = [f"{'median [min-max] over ' + str(len(next(iter(results['runs'].values())))) + ' rounds':<30}"]
    rows: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
        ("cycles/s", lambda s: cell(s["cycles_per_s"])),
        ("server CPU us/request", lambda s: cell(s["server_cpu_us_per_request"])),
        ("Postgres CPU us/cycle", lambda s: cell(s["db_cpu_us_per_cycle"])),
        ("server+Postgres us/cycle", lambda s: cell(s["cpu_us_per_cycle"])),
        ("server cores busy", lambda s: cell(s["server_cores_busy"], ".2f")),
        ("acquire p99 ms", lambda s: cell(s["acquire"]["p99_ms"], ".1f")),
        ("server RSS MB", lambda s: cell(s["server_rss_mb"])),
        ("cycles/s vs first", lambda s: cell(s["vs_first"]["cycles_per_s"], ".2f")),
        ("CPU/request vs first", lambda s: cell(s["vs_first"]["server_cpu_us_per_request"], ".2f")),
    ]
    for label, summary in results["summary"].items():
        lines.append(f"{label}: {results['variants'][label]}")
        lines.extend(f"  {name:<28}{get(summary)}" for name, get in rows)
    return "\n".join(lines)


def _profile(
    database_url: str, server: target.Server, load: Load, table: str, prefix: str, svg: Path
) -> dict[str, Any]:
    """py-spy on the server's process tree (``--subprocesses``) during one extra run, not counted above."""
    spy = subprocess.Popen(
        [_py_spy(), "record", "--pid", str(server.pid), "--subprocesses", "--rate", "200", "--output", str(svg)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    time.sleep(1)
    measured = _measure(database_url, server, load, table, prefix)
    spy.send_signal(2)  # SIGINT: py-spy writes the flame graph and exits
    spy.wait(timeout=60)
    return {"flamegraph": str(svg), "cycles_per_s_while_profiling": measured["cycles_per_s"]}


@contextlib.contextmanager
def _table(
    database_url: str, run_id: str, prefix: str, env: dict[str, str], output: Path
) -> Iterator[tuple[Callable[[str, list[str]], contextlib.AbstractContextManager[target.Server]], str, str]]:
    """One migrated table in a schema of its own, and a way to start a variant on it (stopped when its block ends);
    the schema dropped at the end."""
    schema = f"bench_{run_id}"
    token, tokens = target.bench_token(prefixes=[prefix])
    env = {**env, "SCHEDLOCK_TOKENS": tokens}
    with contextlib.ExitStack() as stack:
        stack.callback(target.drop_schema, database_url, schema)
        # Migrated here, once: the variants are started without --migrate (other servers would not know how).
        migrate.upgrade(Settings(database_url=SecretStr(database_url), table=f"{schema}.shedlock"))

        @contextlib.contextmanager
        def start(label: str, command: list[str]) -> Iterator[target.Server]:
            with output.with_suffix(f".{label}.log").open("ab") as log:
                server = target.start_server(database_url, f"{schema}.shedlock", env, log, command)
                try:
                    yield server
                finally:
                    target.stop_server(server)

        yield start, token, qualified_name("shedlock", schema)


if __name__ == "__main__":
    raise SystemExit(main())
