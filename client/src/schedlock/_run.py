"""``schedlock run``: take the lock, run a command under it, release when it ends.

The command runs in its own process group, so signals reach its whole tree (a shell script and its children) and
a terminal's Ctrl-C is delivered once, by us. SIGINT, SIGTERM and SIGHUP are forwarded to that group.
"""

from __future__ import annotations

import contextlib
import enum
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from types import FrameType, TracebackType

from schedlock._exceptions import APIError, LockHeld, ServiceUnavailable, SlotDone
from schedlock._policy import default_holder
from schedlock._sync import LockClient
from schedlock._times import format_time


class Exit(enum.IntEnum):
    """Exit codes of the ``schedlock`` command (the run's command's own codes pass through)."""

    OK = 0
    #: status/release: no such lock, or the token does not hold it.
    NOT_FOUND = 1
    #: bad arguments (argparse's own code).
    USAGE = 2
    #: the service rejected the request: invalid name or duration, unauthorized, forbidden.
    REJECTED = 64
    #: the lock service is unavailable (unreachable, timeout, 5xx): the command was not run.
    UNAVAILABLE = 69
    #: under --keep-alive the lock was lost, and the command was terminated.
    LOCK_LOST = 75
    #: the command could not be executed / was not found (as in a shell).
    CANNOT_EXECUTE = 126
    COMMAND_NOT_FOUND = 127


FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@dataclass(frozen=True)
class RunOptions:
    name: str
    lock_at_most_for: timedelta
    lock_at_least_for: timedelta
    command: Sequence[str]
    keep_alive: bool = False
    holder: str | None = None
    held_exit_code: int = 0
    fail_open: bool = False
    kill_after: float = 10.0
    verbose: bool = False
    slot: str | None = None
    once_per: str | None = None
    timezone: str | None = None


class _CommandFailed(Exception):
    """Leaves ``with lease:`` as a failure, so that the release leaves the lease's slot open for another run."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def say(message: str) -> None:
    print(f"schedlock: {message}", file=sys.stderr, flush=True)


class _Signals:
    """Records SIGINT/SIGTERM/SIGHUP and forwards them to the command's process group while it runs."""

    def __init__(self) -> None:
        self.received: int | None = None
        self.child: subprocess.Popen[bytes] | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> _Signals:
        for signum in FORWARDED_SIGNALS:
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)  # type: ignore[arg-type]

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received = signum
        self.send(signum)

    def send(self, signum: int) -> None:
        if self.child is not None:
            with contextlib.suppress(ProcessLookupError):  # the group is gone already
                os.killpg(self.child.pid, signum)


def run(client: LockClient, options: RunOptions) -> int:
    """Acquire, run, release; return the exit code (see :class:`Exit`)."""
    lost = threading.Event()
    command_name = Path(options.command[0]).name
    with _Signals() as signals:
        try:
            lease = client.acquire(
                options.name,
                options.lock_at_most_for,
                options.lock_at_least_for,
                holder=options.holder or default_holder(command_name),
                keep_alive=options.keep_alive,
                on_lost=lambda error: lost.set(),
                slot=options.slot,
                once_per=options.once_per,
                once_per_timezone=options.timezone,
            )
        except LockHeld as held:
            if options.verbose:
                until = format_time(held.lock_until) if held.lock_until else "?"
                say(f"{options.name!r} is held by {held.locked_by} until {until}; not running {command_name}")
            return options.held_exit_code
        except SlotDone as done:
            if options.verbose:
                at = format_time(done.completed_at) if done.completed_at else "?"
                if done.stale:
                    say(
                        f"slot {done.slot} of {options.name!r} is stale: older than its last completed slot "
                        f"{done.last_completed_slot} (completed at {at}); not running {command_name}"
                    )
                else:
                    say(f"slot {done.slot} of {options.name!r} was completed at {at}; not running {command_name}")
            return options.held_exit_code
        except ServiceUnavailable as exc:
            say(f"lock service unavailable, so {options.name!r} could not be taken: {exc}")
            if not options.fail_open:
                return Exit.UNAVAILABLE
            say(f"--fail-open: running {command_name} WITHOUT the lock")
            return _supervise(options, dict(os.environ), signals, None)
        except APIError as exc:
            say(f"the lock service rejected the request: {exc}")
            return Exit.REJECTED
        try:
            with lease:
                if signals.received is not None:  # stopped while acquiring: do not start the command
                    raise _CommandFailed(128 + signals.received)
                env = {
                    **os.environ,
                    "SCHEDLOCK_LOCK_NAME": lease.name,
                    "SCHEDLOCK_FENCING_TOKEN": str(lease.fencing_token),
                    **({"SCHEDLOCK_SLOT": lease.slot} if lease.slot is not None else {}),
                }
                code = _supervise(options, env, signals, lost)
                if code != Exit.OK:
                    raise _CommandFailed(code)  # the release says so: the tick stays open
                return code
        except _CommandFailed as failed:
            return failed.code


def _supervise(options: RunOptions, env: dict[str, str], signals: _Signals, lost: threading.Event | None) -> int:
    try:
        child = subprocess.Popen(list(options.command), env=env, process_group=0)
    except FileNotFoundError:
        say(f"command not found: {options.command[0]}")
        return Exit.COMMAND_NOT_FOUND
    except OSError as exc:
        say(f"cannot execute {options.command[0]}: {exc.strerror or exc}")
        return Exit.CANNOT_EXECUTE
    signals.child = child
    if signals.received is not None:  # arrived between the last check and now: pass it on
        signals.send(signals.received)
    terminating_since: float | None = None
    killed = False
    try:
        while True:
            try:
                returncode = child.wait(timeout=0.1)
                break
            except subprocess.TimeoutExpired:
                pass
            if lost is not None and lost.is_set() and terminating_since is None:
                say(
                    f"lost the lock {options.name!r}; terminating the command "
                    f"(SIGTERM, then SIGKILL after {options.kill_after:g}s)"
                )
                signals.send(signal.SIGTERM)
                terminating_since = time.monotonic()
            overdue = terminating_since is not None and time.monotonic() - terminating_since >= options.kill_after
            if overdue and not killed:
                signals.send(signal.SIGKILL)
                killed = True
    finally:
        signals.child = None
    if terminating_since is not None:  # the loss is what ended the command
        return Exit.LOCK_LOST
    # Popen reports "killed by signal N" as -N; shells (and we) report 128+N.
    return 128 + -returncode if returncode < 0 else returncode
