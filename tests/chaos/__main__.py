"""``python -m tests.chaos``: run a fault campaign against real server processes and check its history.

Exit status: 0 when the checker found no violation, 1 when it found some (each printed with the shortest excerpt of
the history that shows it), 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tests.chaos.campaign import PLANTS, CampaignConfig, run
from tests.chaos.nemesis import ALL_FAULTS, DEFAULT_FAULTS, OPT_IN_FAULTS


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m tests.chaos",
        description="A Jepsen-style fault campaign: a throwaway Postgres, schedlock servers behind fault proxies, "
        "HTTP clients and Java ShedLock nodes, a seeded nemesis, and a checker over the recorded history "
        "(docs/reliability.md). Needs Debian's postgresql and libfaketime; runs on loopback only.",
        epilog="exit status: 0 no violation, 1 violations found, 2 bad arguments",
    )
    p.add_argument("--seed", type=int, default=1, help="seeds the nemesis and every participant (default 1)")
    p.add_argument("--duration", type=float, default=45.0, help="seconds of faults before the heal (default 45)")
    p.add_argument("--servers", type=int, default=2, help="schedlock server processes, 2 or more (default 2)")
    p.add_argument("--clients", type=int, default=2, help="HTTP client processes (default 2)")
    p.add_argument("--workers", type=int, default=3, help="workers per client process (default 3)")
    p.add_argument("--java", type=int, default=2, help="Java ShedLock nodes (default 2)")
    p.add_argument(
        "--names",
        type=int,
        default=3,
        help="plain lock names, the last one chaos.锁 (default 3; two slot names besides)",
    )
    p.add_argument(
        "--faults",
        default=",".join(DEFAULT_FAULTS),
        help=f"comma-separated faults (default: all but {', '.join(OPT_IN_FAULTS)}); all: {', '.join(ALL_FAULTS)}",
    )
    p.add_argument(
        "--plant",
        choices=PLANTS,
        action="append",
        default=[],
        help="plant a bug for the checker to find (repeatable): java-unguarded adds a Java node whose takeover has "
        "no lock_until guard; server-unguarded runs server 0 with an acquire that has none",
    )
    p.add_argument(
        "--pgbouncer",
        action="store_true",
        help="the last server reaches Postgres through PgBouncer (transaction pooling), with "
        "SCHEDLOCK_DB_STATEMENT_CACHE_SIZE=0",
    )
    p.add_argument(
        "--standby",
        action="store_true",
        help="Postgres is a primary with a synchronous standby; the pg_promote fault promotes it (once a run)",
    )
    p.add_argument(
        "--encoding",
        choices=("UTF8", "LATIN1", "SQL_ASCII"),
        default="UTF8",
        help="the database's encoding (default UTF8); the others are issue 20's defect 3, opt-in",
    )
    p.add_argument("--workdir", help="where the history goes (default: a new temporary folder)")
    p.add_argument("--json", type=Path, help="also write the figures and violations to this file as JSON")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    faults = tuple(f for f in args.faults.split(",") if f)
    unknown = sorted(set(faults) - set(ALL_FAULTS))
    if unknown or not faults or args.servers < 2:
        print(f"bad --faults {unknown} or --servers {args.servers}", file=sys.stderr)
        return 2
    config = CampaignConfig(
        seed=args.seed,
        duration=args.duration,
        servers=args.servers,
        clients=args.clients,
        workers=args.workers,
        java=args.java,
        names=args.names,
        faults=faults,
        plant=tuple(args.plant),
        pgbouncer=args.pgbouncer,
        standby=args.standby,
        encoding=args.encoding,
        workdir=args.workdir,
    )
    report = run(config)
    print(report.summary())
    if args.json:
        args.json.write_text(json.dumps(report.to_json(), indent=2) + "\n")
    return 0 if report.verdict.ok else 1


if __name__ == "__main__":
    sys.exit(main())
