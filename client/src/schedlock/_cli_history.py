"""The ``schedlock runs`` and ``schedlock force-release`` commands: a lock's history, and the admin's way to free it."""

from __future__ import annotations

import argparse
import json
from typing import Any

from schedlock._models import Run
from schedlock._run import Exit
from schedlock._sync import LockClient
from schedlock._times import format_time


def history_parsers(
    sub: Any, common: argparse.ArgumentParser, formatter: type[argparse.HelpFormatter], epilog: str
) -> None:
    """Add ``runs`` and ``force-release`` to the subcommands ``sub``."""
    runs_parser = sub.add_parser(
        "runs",
        parents=[common],
        help="show a lock's recent runs: who held it, how long, how it ended, how many skipped",
        epilog=epilog,
        formatter_class=formatter,
    )
    runs_parser.add_argument("name", help="lock name")
    runs_parser.add_argument("--limit", type=positive_int, default=20, help="this many runs, newest first (20)")
    runs_parser.add_argument("--json", action="store_true", help="JSON for scripts instead of a table")

    force_parser = sub.add_parser(
        "force-release",
        parents=[common],
        help="free a held lock now, whoever holds it (needs an admin token)",
        description="Free the lock NAME now, ignoring its at-least window: its holder's lease ends (its release and "
        "extend fail; under keep-alive it is told). The run is recorded as force_released with the reason. A lock "
        "that is not held is left alone (exit 0).",
        epilog=epilog,
        formatter_class=formatter,
    )
    force_parser.add_argument("name", help="lock name")
    force_parser.add_argument("--reason", required=True, help="why: recorded in the history and the audit log")
    force_parser.add_argument("--json", action="store_true", help="JSON for scripts instead of text")


def _run_json(run: Run) -> dict[str, Any]:
    return {
        "name": run.name,
        "fencing_token": run.fencing_token,
        "locked_by": run.locked_by,
        "token_name": run.token_name,
        "source": run.source,
        "acquired_at": format_time(run.acquired_at),
        "lock_until": format_time(run.lock_until),
        "ended_at": format_time(run.ended_at) if run.ended_at else None,
        "outcome": run.outcome,
        "duration_ms": round(run.duration.total_seconds() * 1000),
        "skipped": run.skipped,
        "forced_by": run.forced_by,
        "force_reason": run.force_reason,
    }


def runs(client: LockClient, args: argparse.Namespace) -> int:
    """``schedlock runs NAME``: a table of the newest runs, or JSON."""
    found: list[Run] = []
    cursor: str | None = None
    while len(found) < args.limit:
        page = client.history(args.name, limit=min(args.limit - len(found), 1000), cursor=cursor)
        found += page.items
        cursor = page.next_cursor
        if cursor is None:
            break
    if args.json:
        print(json.dumps({"items": [_run_json(run) for run in found]}, indent=2))
        return Exit.OK
    rows = [["ACQUIRED AT", "DURATION", "OUTCOME", "SKIPPED", "FENCING", "LOCKED BY"]]
    rows += [
        [
            format_time(run.acquired_at),
            duration_text(run.duration.total_seconds()),
            run.outcome,
            str(run.skipped),
            str(run.fencing_token),
            run.locked_by + (f"  (forced by {run.forced_by}: {run.force_reason})" if run.forced_by else ""),
        ]
        for run in found
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)) + "  " + row[-1])
    return Exit.OK


def force_release(client: LockClient, args: argparse.Namespace) -> int:
    """``schedlock force-release NAME --reason ...``."""
    result = client.force_release(args.name, args.reason)
    if args.json:
        run = _run_json(result.run) if result.run else None
        print(json.dumps({"name": result.name, "forced": result.forced, "run": run}, indent=2))
    elif result.forced:
        holder = f", held by {result.run.locked_by}" if result.run else ""
        print(f"force-released {result.name!r}{holder}; free from {format_time(result.lock_until)}")
    else:
        print(f"{result.name!r} was not held; nothing changed")
    return Exit.OK


def positive_int(text: str) -> int:
    """An argparse type: an integer of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def duration_text(total: float) -> str:
    if total < 60:
        return f"{total:.3f}s"
    minutes, seconds = divmod(int(total), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{seconds:02d}s" if hours else f"{minutes}m{seconds:02d}s"
