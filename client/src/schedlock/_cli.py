"""The ``schedlock`` command: run a command under a lock, and inspect or release locks."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from schedlock._base import Tick, windows
from schedlock._cli_history import force_release, history_parsers, positive_int, print_table, runs
from schedlock._cli_jobs import jobs, jobs_parser
from schedlock._durations import parse_duration
from schedlock._exceptions import APIError, LockNotFound, NotHolder, ServiceUnavailable
from schedlock._keepalive import MINIMUM_LOCK_AT_MOST_FOR, check_keep_alive
from schedlock._models import LockInfo
from schedlock._run import Exit, RunOptions, run, say
from schedlock._sync import LockClient
from schedlock._times import format_time
from schedlock._version import __version__

EXIT_CODES = f"""\
exit codes:
  0        the command ran and exited 0, or the lock was held or --once-per's tick already done
           (see --held-exit-code)
  1-255    otherwise the command's own exit code; 128+N when a signal N killed it
  1        status/release/force-release: no such lock; release: the token does not hold it;
           jobs --down: a job listed is down
  {Exit.USAGE:<8} bad arguments (also --keep-alive with --at-most under 30s)
  {Exit.REJECTED:<8} the service rejected the request (invalid name or duration, unauthorized, forbidden,
           force-release without an admin token)
  {Exit.UNAVAILABLE:<8} the lock service is unavailable: the command was NOT run (unless --fail-open)
  {Exit.LOCK_LOST:<8} --keep-alive lost the lock: the command was terminated (SIGTERM, then SIGKILL)
  {Exit.CANNOT_EXECUTE:<8} the command cannot be executed; {Exit.COMMAND_NOT_FOUND}: not found

environment:
  SCHEDLOCK_URL    the service (default http://127.0.0.1:8000); --url overrides
  SCHEDLOCK_TOKEN  API token, sent as "Authorization: Bearer"; --api-token overrides (prefer the variable:
                   arguments are visible to every user in `ps`)
  SCHEDLOCK_TOKEN_FILE
                   a file holding the API token, read at every request (a rotated token is picked up); used
                   when neither --api-token nor SCHEDLOCK_TOKEN is given
"""

RUN_DESCRIPTION = """\
Take the lock NAME and run COMMAND under it; if someone else holds it, exit at once without running it (quietly,
exit code 0 by default, so cron sends no mail). Never waits for the lock.

COMMAND gets SCHEDLOCK_LOCK_NAME and SCHEDLOCK_FENCING_TOKEN in its environment and runs in its own process group;
SIGINT, SIGTERM and SIGHUP sent to schedlock are forwarded to that group. When COMMAND ends (also when it fails or
is killed) the lock is released; lock_at_least_for keeps it a little longer if the run was short. schedlock exits
with COMMAND's exit code.

Without --keep-alive the lock expires after --at-most even if COMMAND still runs: choose --at-most well above the
longest run. With --keep-alive the lock is extended every at-most/2; if an extension is refused (the lock was taken
over) COMMAND is terminated. This is "at most one at a time", not "exactly once": keep jobs idempotent.

With --once-per CRON (read in --timezone, default UTC), COMMAND runs at most once per tick of that schedule: the
tick is the schedule's latest at or before the database's now, and once a run of it exits 0 every later attempt
at the same tick exits at once, like a held lock. A run that fails or is killed leaves the tick open for another
node. COMMAND gets the tick in SCHEDLOCK_SLOT. --slot KEY does the same with a tick key of your own.
"""


def _connection_options(parser: argparse.ArgumentParser, defaults: bool) -> None:
    """--url, --api-token and --timeout. They are accepted before the subcommand (``schedlock --url X run ...``)
    and after it; a subcommand's copy has no defaults (argparse.SUPPRESS), so it never overwrites a value given
    before it, and a value given after it wins."""

    def default(value: Any) -> Any:
        return value if defaults else argparse.SUPPRESS

    parser.add_argument(
        "--url", default=default(None), help="service URL (default: SCHEDLOCK_URL, else http://127.0.0.1:8000)"
    )
    parser.add_argument("--api-token", default=default(None), help="API token (default: SCHEDLOCK_TOKEN)")
    parser.add_argument("--timeout", type=float, default=default(10.0), help="seconds per request (default 10)")


def _parser() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """The command's parser, and the one of ``run`` (for its usage errors)."""
    common = argparse.ArgumentParser(add_help=False)
    _connection_options(common, defaults=False)
    formatter = argparse.RawDescriptionHelpFormatter

    parser = argparse.ArgumentParser(
        prog="schedlock",
        description="ShedLock's lock semantics for shell and cron jobs, through a schedlock service.",
        epilog=EXIT_CODES,
        formatter_class=formatter,
    )
    parser.add_argument("--version", action="version", version=f"schedlock {__version__}")
    _connection_options(parser, defaults=True)
    sub = parser.add_subparsers(
        dest="command_name", required=True, metavar="{run,list,status,release,runs,force-release,jobs}"
    )

    run_parser = sub.add_parser(
        "run",
        parents=[common],
        help="run a command under a lock, or skip it when the lock is held",
        description=RUN_DESCRIPTION,
        epilog=EXIT_CODES,
        formatter_class=formatter,
        usage="schedlock run --name NAME --at-most DURATION [options] -- COMMAND [ARGS...]",
    )
    # --name, --at-most and COMMAND are required (checked in _require: argparse would not name a REMAINDER).
    run_parser.add_argument("--name", help="lock name (1-64 characters, no '/')")
    run_parser.add_argument("--at-most", metavar="DURATION", help="lock_at_most_for: e.g. 10m, 2h, PT90M")
    run_parser.add_argument(
        "--at-least", default="0s", metavar="DURATION", help="lock_at_least_for: keep the lock this long (default 0s)"
    )
    run_parser.add_argument(
        "--keep-alive",
        action="store_true",
        help=f"extend the lock every at-most/2 while COMMAND runs (needs --at-most >= "
        f"{MINIMUM_LOCK_AT_MOST_FOR.total_seconds():g}s); terminate COMMAND if the lock is lost",
    )
    run_parser.add_argument(
        "--holder", help="who holds the lock, recorded in locked_by (default: COMMAND on host pid N)"
    )
    run_parser.add_argument(
        "--held-exit-code", type=int, default=0, metavar="N", help="exit code when the lock is held (default 0)"
    )
    run_parser.add_argument(
        "--fail-open",
        action="store_true",
        help="when the service is unavailable, run COMMAND anyway, without the lock (default: do not run, exit 69)",
    )
    run_parser.add_argument(
        "--kill-after",
        default="10s",
        metavar="DURATION",
        help="after a lost lock, SIGKILL the command this long after SIGTERM (default 10s)",
    )
    run_parser.add_argument(
        "--once-per", metavar="CRON", help='run at most once per tick of this cron schedule, e.g. "0 3 * * *"'
    )
    run_parser.add_argument("--timezone", metavar="ZONE", help="IANA time zone of --once-per (default UTC)")
    run_parser.add_argument("--slot", metavar="KEY", help="run at most once for this tick key (not with --once-per)")
    run_parser.add_argument(
        "-v", "--verbose", action="store_true", help="say on stderr when the lock is held or the tick done"
    )
    # COMMAND is every word from the first that is not an option (or after --): the command's own options stay its
    # own (`-v`, `--name`...), as with env, nice or timeout.
    run_parser.add_argument("command", nargs=argparse.REMAINDER, metavar="COMMAND", help="the command to run, after --")

    list_parser = sub.add_parser(
        "list", parents=[common], help="list locks", epilog=EXIT_CODES, formatter_class=formatter
    )
    list_parser.add_argument("--prefix", help="only names starting with this")
    which = list_parser.add_mutually_exclusive_group()
    which.add_argument("--held", dest="held", action="store_const", const=True, help="only held locks")
    which.add_argument("--free", dest="held", action="store_const", const=False, help="only free locks")
    list_parser.add_argument("--limit", type=positive_int, help="at most this many locks (default: all)")
    list_parser.add_argument("--json", action="store_true", help="JSON for scripts instead of a table")

    status_parser = sub.add_parser(
        "status", parents=[common], help="show one lock", epilog=EXIT_CODES, formatter_class=formatter
    )
    status_parser.add_argument("name", help="lock name")
    status_parser.add_argument("--json", action="store_true", help="JSON for scripts instead of text")

    release_parser = sub.add_parser(
        "release",
        parents=[common],
        help="release a lease by its token",
        epilog=EXIT_CODES,
        formatter_class=formatter,
    )
    release_parser.add_argument("name", help="lock name")
    release_parser.add_argument("--token", required=True, help="the lease token acquire returned ('-': read stdin)")
    history_parsers(sub, common, formatter, EXIT_CODES)
    jobs_parser(sub, common, formatter, EXIT_CODES)
    return parser, run_parser


def main(argv: Sequence[str] | None = None) -> int:
    parser, run_parser = _parser()
    args = parser.parse_args(argv)
    if args.command_name == "run":
        _require(run_parser, args)
    _configure_logging(verbose=getattr(args, "verbose", False))
    client = LockClient(args.url, token=args.api_token, timeout=args.timeout)
    try:
        if args.command_name == "run":
            return run(client, _run_options(run_parser, args))
        if args.command_name == "list":
            return _list(client, args)
        if args.command_name == "status":
            return _status(client, args)
        if args.command_name == "runs":
            return runs(client, args)
        if args.command_name == "force-release":
            return force_release(client, args)
        if args.command_name == "jobs":
            return jobs(client, args)
        return _release(client, args)
    except ServiceUnavailable as exc:
        say(f"lock service unavailable: {exc}")
        return Exit.UNAVAILABLE
    except (LockNotFound, NotHolder) as exc:
        say(exc.message)
        return Exit.NOT_FOUND
    except APIError as exc:
        say(f"the lock service rejected the request: {exc}")
        return Exit.REJECTED
    except ValueError as exc:  # a lock name the API cannot take (empty, or a "/" where none may be): bad arguments
        say(str(exc))
        return Exit.USAGE
    finally:
        client.close()


def _configure_logging(verbose: bool) -> None:
    # Only the client's own messages, on stderr; httpx logs every request at INFO, which would fill cron mail.
    logger = logging.getLogger("schedlock.client")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("schedlock: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO if verbose else logging.WARNING)
    logger.propagate = False


def _require(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """run's required arguments, named as argparse names missing ones; COMMAND without the ``--`` before it."""
    if args.command[:1] == ["--"]:
        args.command = args.command[1:]
    missing = [option for option, value in (("--name", args.name), ("--at-most", args.at_most)) if value is None]
    if not args.command:
        missing.append("COMMAND")
    if missing:
        parser.error(f"the following arguments are required: {', '.join(missing)}")


def _run_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> RunOptions:
    try:
        at_most, at_least = windows(args.at_most, args.at_least)
        if args.keep_alive:
            check_keep_alive(at_most)
        kill_after = parse_duration(args.kill_after, "--kill-after")
        Tick(args.slot, args.once_per, args.timezone)
    except ValueError as exc:
        message = str(exc)
        for api, option in _OPTION_NAMES:
            message = message.replace(api, option)
        parser.error(message)
    if not 0 <= args.held_exit_code <= 255:
        parser.error("--held-exit-code: must be between 0 and 255")
    return RunOptions(
        name=args.name,
        lock_at_most_for=at_most,
        lock_at_least_for=at_least or timedelta(0),
        command=args.command,
        keep_alive=args.keep_alive,
        holder=args.holder,
        held_exit_code=args.held_exit_code,
        fail_open=args.fail_open,
        kill_after=kill_after.total_seconds(),
        verbose=args.verbose,
        slot=args.slot,
        once_per=args.once_per,
        timezone=args.timezone,
    )


#: The API's names in messages, and the options of ``run`` that stand for them.
_OPTION_NAMES = (
    ("lock_at_most_for", "--at-most"),
    ("lock_at_least_for", "--at-least"),
    ("once_per_timezone", "--timezone"),
    ("once_per", "--once-per"),
    ("slot", "--slot"),
)


def _lock_json(lock: LockInfo) -> dict[str, Any]:
    return {
        "name": lock.name,
        "locked_by": lock.locked_by,
        "locked_at": format_time(lock.locked_at),
        "lock_until": format_time(lock.lock_until),
        "held": lock.held,
        "fencing_token": lock.fencing_token,
        **_last_completed(lock),
    }


def _last_completed(lock: LockInfo) -> dict[str, str]:
    """The last completed slot, for names that have one (docs/slots.md)."""
    if lock.last_completed_slot is None or lock.last_completed_at is None:
        return {}
    return {"last_completed_slot": lock.last_completed_slot, "last_completed_at": format_time(lock.last_completed_at)}


def _list(client: LockClient, args: argparse.Namespace) -> int:
    locks: list[LockInfo] = []
    page_size = min(args.limit, 1000) if args.limit else 1000
    for lock in client.iter_locks(prefix=args.prefix, held=args.held, page_size=page_size):
        locks.append(lock)
        if args.limit and len(locks) >= args.limit:
            break
    if args.json:
        print(json.dumps({"items": [_lock_json(lock) for lock in locks]}, indent=2))
        return Exit.OK
    rows = [["NAME", "HELD", "LOCK UNTIL", "FENCING", "LOCKED BY"]]
    rows += [
        [lock.name, "yes" if lock.held else "no", format_time(lock.lock_until), str(lock.fencing_token), lock.locked_by]
        for lock in locks
    ]
    print_table(rows)
    return Exit.OK


def _status(client: LockClient, args: argparse.Namespace) -> int:
    lock = client.get(args.name)
    if args.json:
        print(json.dumps({**_lock_json(lock), "db_time": format_time(lock.db_time)}, indent=2))
        return Exit.OK
    left = (lock.lock_until - lock.db_time).total_seconds()
    held = f"yes, for {_seconds(left)} more" if lock.held else "no"
    rows = [
        ("name", lock.name),
        ("held", held),
        ("locked by", lock.locked_by),
        ("locked at", format_time(lock.locked_at)),
        ("lock until", format_time(lock.lock_until)),
        ("fencing token", str(lock.fencing_token)),
    ]
    if last := _last_completed(lock):
        rows.append(("last completed", f"{last['last_completed_slot']} at {last['last_completed_at']}"))
    rows.append(("database time", format_time(lock.db_time)))
    for label, value in rows:
        print(f"{label:<14} {value}")
    return Exit.OK


def _release(client: LockClient, args: argparse.Namespace) -> int:
    token = sys.stdin.readline().strip() if args.token == "-" else args.token
    released = client.release(args.name, token)
    print(f"released {released.name!r}; free from {format_time(released.lock_until)}")
    return Exit.OK


def _seconds(total: float) -> str:
    minutes, seconds = divmod(int(total), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{seconds:02d}s" if hours else f"{minutes}m{seconds:02d}s"
