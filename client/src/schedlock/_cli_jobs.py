"""The ``schedlock jobs`` command: the registered jobs and their state (docs/jobs.md)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from schedlock._cli_history import positive_int, print_table
from schedlock._models import JobInfo
from schedlock._run import Exit
from schedlock._sync import LockClient
from schedlock._times import format_time

JOB_STATES = ("up", "late", "down", "paused", "new")
#: One character per tick state, for the LAST TICKS column (oldest first).
TICK_MARKS = {"completed": "+", "failed": "F", "timed_out": "T", "missed": "M", "running": "R", "pending": "."}


def jobs_parser(
    sub: Any, common: argparse.ArgumentParser, formatter: type[argparse.HelpFormatter], epilog: str
) -> None:
    """Add ``jobs`` to the subcommands ``sub``."""
    parser = sub.add_parser(
        "jobs",
        parents=[common],
        help="list the registered jobs and their state: up, late, down, paused or new",
        description="The jobs the token may read, by name. LAST TICKS shows their latest due ticks, oldest first: "
        "+ completed, F failed, T timed out, M missed, R running, . pending. With --down, exit 1 when any job "
        "listed is down (for a cron check).",
        epilog=epilog,
        formatter_class=formatter,
    )
    parser.add_argument("--prefix", help="only names starting with this")
    parser.add_argument("--state", choices=JOB_STATES, help="only jobs in this state")
    parser.add_argument("--limit", type=positive_int, help="at most this many jobs (default: all)")
    parser.add_argument("--down", action="store_true", help="exit 1 when a job listed is down")
    parser.add_argument("--json", action="store_true", help="JSON for scripts instead of a table")


def _job_json(job: JobInfo) -> dict[str, Any]:
    return {
        "name": job.name,
        "schedule": job.schedule,
        "timezone": job.timezone,
        "grace": job.grace,
        "paused": job.paused,
        "state": job.state,
        "recent": list(job.recent),
        "last_tick": format_time(job.last_tick) if job.last_tick else None,
        "next_tick": format_time(job.next_tick) if job.next_tick else None,
        "last_completed_at": format_time(job.last_completed_at) if job.last_completed_at else None,
    }


def jobs(client: LockClient, args: argparse.Namespace) -> int:
    """``schedlock jobs``: a table of the jobs, or JSON."""
    found: list[JobInfo] = []
    cursor: str | None = None
    while args.limit is None or len(found) < args.limit:
        limit = 1000 if args.limit is None else min(args.limit - len(found), 1000)
        page = client.jobs(prefix=args.prefix, state=args.state, limit=limit, cursor=cursor)
        found += page.items
        cursor = page.next_cursor
        if cursor is None:
            break
    if args.json:
        print(json.dumps({"items": [_job_json(job) for job in found]}, indent=2))
    else:
        rows = [["STATE", "NAME", "SCHEDULE", "LAST TICKS", "NEXT TICK", "LAST COMPLETED"]]
        rows += [
            [
                job.state,
                job.name,
                job.schedule if job.timezone == "UTC" else f"{job.schedule} ({job.timezone})",
                "".join(TICK_MARKS.get(s, "?") for s in job.recent) or "-",
                format_time(job.next_tick) if job.next_tick else "-",
                format_time(job.last_completed_at) if job.last_completed_at else "-",
            ]
            for job in found
        ]
        print_table(rows)
    if args.down and any(job.state == "down" for job in found):
        return Exit.NOT_FOUND  # 1: as status says a lock is not there, a job that is not running
    return Exit.OK
