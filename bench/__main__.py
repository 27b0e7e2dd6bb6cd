"""``python -m bench``: measure schedlock against the database itself. See docs/performance.md."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

from bench.database import HELP, database, default_url
from bench.etcd import LEASE_MODES
from bench.report import render
from bench.run import Config, run

RESULTS = Path(__file__).parent / "results"

#: A run of a few seconds, for the smoke test and for checking the harness itself.
QUICK = {
    "clients": 4,
    "names": 16,
    "contended_names": 2,
    "seconds": 1,
    "repeat": 1,
    "warmup_seconds": 1,
    "rate": 100.0,
    "latency_clients": 2,
    "latency_seconds": 1,
    "low_seconds": 1,
    "low_turns": 2,
    "list_rows": 1000,
    "list_rate": 50.0,
    "list_clients": 1,
    "list_seconds": 1,
}


def _parser() -> argparse.ArgumentParser:
    d = Config()
    p = argparse.ArgumentParser(
        prog="python -m bench",
        description="Benchmark schedlock over HTTP against the same lock statements sent straight to Postgres, "
        "and against etcd doing the same try-lock. By default starts a server on its own schema of --database-url "
        "and an etcd of its own, and removes both afterwards. Prints a table and writes every figure as JSON. "
        "Asserts nothing about speed.",
    )
    p.add_argument("--database-url", default=default_url(), help=HELP)
    p.add_argument("--url", help="benchmark this running server instead of starting one (needs --table)")
    p.add_argument("--table", help="with --url: the server's SCHEDLOCK_TABLE (schema.table)")
    p.add_argument("--server-pid", type=int, help="with --url: the server's pid, to report its RSS and CPU")
    p.add_argument(
        "--server-env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra environment for the started server, e.g. SCHEDLOCK_POOL_MAX_SIZE=8 (repeatable)",
    )
    p.add_argument("--clients", type=int, default=d.clients, help="concurrent clients (default: %(default)s)")
    p.add_argument("--names", type=int, default=d.names, help="names, uncontended (default: %(default)s)")
    p.add_argument("--contended-names", type=int, default=d.contended_names, help="names, contended (%(default)s)")
    p.add_argument("--seconds", type=int, default=d.seconds, help="length of each throughput run (%(default)s)")
    p.add_argument("--repeat", type=int, default=d.repeat, help="runs of each throughput configuration (%(default)s)")
    p.add_argument("--warmup-seconds", type=int, default=d.warmup_seconds)
    p.add_argument("--rate", type=float, default=d.rate, help="cycles/s of the latency run (%(default)s)")
    p.add_argument("--latency-clients", type=int, default=d.latency_clients)
    p.add_argument("--latency-seconds", type=int, default=d.latency_seconds)
    p.add_argument("--low-rate", type=float, default=d.low_rate, help="cycles/s of the low-load latency run (20)")
    p.add_argument("--low-seconds", type=int, default=d.low_seconds, help="each low-load turn's length (%(default)s)")
    p.add_argument(
        "--low-turns", type=int, default=d.low_turns, help="low-load turns of each side, alternating (%(default)s)"
    )
    p.add_argument("--list-rows", type=int, default=d.list_rows, help="rows seeded for the list (%(default)s)")
    p.add_argument("--list-rate", type=float, default=d.list_rate, help="list requests/s (%(default)s)")
    p.add_argument("--list-clients", type=int, default=d.list_clients)
    p.add_argument("--list-seconds", type=int, default=d.list_seconds)
    p.add_argument(
        "--scaling-repeat",
        type=int,
        default=d.scaling_repeat,
        help="runs of each load on one process, `serve --workers 2` and 2 replicas, in turns (%(default)s)",
    )
    p.add_argument(
        "--no-scaling", dest="scaling_repeat", action="store_const", const=0, help="no scaling phase (~1 minute)"
    )
    p.add_argument("--skip-direct", action="store_true", help="HTTP only (no baseline, no ratio)")
    p.add_argument(
        "--peers",
        choices=("etcd", "none"),
        default="etcd" if d.peers else "none",
        help="other lock services to run side by side (default: %(default)s; etcd when its binary is installed)",
    )
    p.add_argument(
        "--etcd-lease",
        choices=LEASE_MODES,
        default=d.etcd_lease,
        help="exact: a lease per acquisition, as lock_at_most_for, released by txn then revoked (default); revoke: "
        "the same, released by revoking the lease; reuse: a client's lease for up to 1 s (see bench/etcd.py)",
    )
    p.add_argument("--etcd-dir", help="where etcd's data directory goes (default: the system's temp directory)")
    p.add_argument(
        "--no-auth",
        dest="auth",
        action="store_false",
        help="start the server without API tokens (default: one token scoped to the benchmark's names, sent on "
        "every request; with --url, the token is read from SCHEDLOCK_TOKEN)",
    )
    p.add_argument("--profile", action="store_true", help="also record a py-spy flame graph of the server")
    p.add_argument("--quick", action="store_true", help="a few seconds in all, tiny figures (checks the harness)")
    p.add_argument("--output", type=Path, help="JSON file to write (default: bench/results/<time>.json)")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    if "--quick" in (sys.argv[1:] if argv is None else argv):
        parser.set_defaults(**QUICK)  # explicit flags still win
    args = parser.parse_args(argv)
    settings = {k: v for k, v in vars(args).items() if k in Config.__dataclass_fields__}
    settings["server_env"] = dict(item.split("=", 1) for item in args.server_env)
    settings["peers"] = [] if args.peers == "none" else [args.peers]
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    output: Path = args.output or RESULTS / f"{stamp}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    with database(args.database_url) as url:
        config = Config(**{**settings, "database_url": url})
        results = run(config, output, say=lambda line: print(f"# {line}", file=sys.stderr, flush=True))
    output.write_text(json.dumps(results, indent=2) + "\n")
    print(render(results))
    print(f"\nresults: {output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
