"""`list`, `status`, `release`, `runs`, `force-release`, `jobs`, the connection options and tokens (401, 403, a
token file), one contract for both commands; and the JSON shapes docs/cli.md writes down."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from app.settings import Settings
from schedlock import LockClient
from tests.support.api import ts
from tests.support.cli_impls import Cli
from tests.support.servers import LiveServer, free_port, serving_tokens
from tests.support.tokens import Token

pytestmark = pytest.mark.system  # both commands as processes against live servers; the Go binary built

#: The keys of each --json answer, in order (docs/cli.md, "JSON output").
LOCK_KEYS = ["name", "locked_by", "locked_at", "lock_until", "held", "fencing_token"]
SLOT_KEYS = ["last_completed_slot", "last_completed_at"]
RUN_KEYS = ["name", "fencing_token", "locked_by", "token_name", "source", "acquired_at", "lock_until", "ended_at",
            "outcome", "duration_ms", "skipped", "forced_by", "force_reason"]  # fmt: skip
JOB_KEYS = ["name", "schedule", "timezone", "grace", "paused", "state", "recent", "last_tick", "next_tick",
            "last_completed_at"]  # fmt: skip
TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")

CLI_DOC = Path(__file__).parents[3] / "docs" / "cli.md"

BILLING = Token("billing-cron", prefixes=("billing.",))
READER = Token("reader", access="read")
ADMIN = Token("ops", admin=True)


@pytest.fixture(scope="module")
def token_server(settings: Settings) -> Iterator[LiveServer]:
    with serving_tokens(settings, BILLING, READER, ADMIN) as server:
        yield server


def test_list_status_release(cli: Cli, url: str, name: str) -> None:
    with LockClient(url) as client:
        lease = client.acquire(f"{name}.a", "1m", holder="node-a")
        client.acquire(f"{name}.b", "1m").release()

    table = cli(url, "list", "--prefix", f"{name}.")
    assert table.returncode == 0
    header, row_a, row_b = table.stdout.splitlines()
    assert re.fullmatch(r"NAME +HELD  LOCK UNTIL +FENCING  LOCKED BY", header), header
    assert row_a.split()[:2] == [f"{name}.a", "yes"] and "node-a" in row_a
    assert row_b.split()[:2] == [f"{name}.b", "no"]

    listed = json.loads(cli(url, "list", "--prefix", f"{name}.", "--held", "--json").stdout)
    assert [item["name"] for item in listed["items"]] == [f"{name}.a"]
    assert [list(item) for item in listed["items"]] == [LOCK_KEYS]
    free = json.loads(cli(url, "list", "--prefix", f"{name}.", "--free", "--json").stdout)
    assert [item["name"] for item in free["items"]] == [f"{name}.b"]
    assert len(json.loads(cli(url, "list", "--prefix", f"{name}.", "--limit", "1", "--json").stdout)["items"]) == 1
    assert json.loads(cli(url, "list", "--prefix", f"{name}.zzz", "--json").stdout) == {"items": []}

    status = json.loads(cli(url, "status", f"{name}.a", "--json").stdout)
    assert list(status) == [*LOCK_KEYS, "db_time"]
    assert status["held"] is True and status["fencing_token"] == lease.fencing_token
    assert all(TIME.fullmatch(status[key]) for key in ("locked_at", "lock_until", "db_time"))
    text = cli(url, "status", f"{name}.a").stdout
    fields = {line[:14].strip(): line[15:] for line in text.splitlines()}  # "{label:<14} {value}"
    left = int((ts(fields["lock until"]) - ts(fields["database time"])).total_seconds())
    assert fields["held"] == f"yes, for {left // 60}m{left % 60:02d}s more", text
    assert [line[:14].strip() for line in text.splitlines()] == [
        "name", "held", "locked by", "locked at", "lock until", "fencing token", "database time"]  # fmt: skip
    missing = cli(url, "status", f"{name}.zzz")
    assert missing.returncode == 1 and missing.stderr.startswith("schedlock: no lock named")

    released = cli(url, "release", f"{name}.a", "--token", "-", stdin=lease.token + "\n")
    assert released.returncode == 0 and released.stdout.startswith(f"released '{name}.a'; free from ")
    assert cli(url, "release", f"{name}.a", "--token", lease.token).returncode == 0  # idempotent
    wrong = cli(url, "release", f"{name}.a", "--token", "not-the-token")
    assert wrong.returncode == 1 and "no longer holds" in wrong.stderr
    assert json.loads(cli(url, "status", f"{name}.a", "--json").stdout)["held"] is False


def test_a_completed_slot_shows_in_status(cli: Cli, url: str, name: str) -> None:
    assert cli(url, "run", "--name", name, "--at-most", "1m", "--slot", "t1", "--", "true").returncode == 0
    status = json.loads(cli(url, "status", name, "--json").stdout)
    assert list(status) == [*LOCK_KEYS, *SLOT_KEYS, "db_time"] and status["last_completed_slot"] == "t1"
    assert re.search(r"^last completed t1 at \S+Z$", cli(url, "status", name).stdout, re.M)


def test_runs_and_force_release(cli: Cli, url: str, name: str) -> None:
    for code in (0, 3):
        assert cli(url, "run", "--name", name, "--at-most", "1m", "--", "sh", "-c", f"exit {code}").returncode == code
    with LockClient(url) as client:
        client.acquire(name, "1m", holder="node-b")
    forced = json.loads(cli(url, "force-release", name, "--reason", "stuck", "--json").stdout)
    assert list(forced) == ["name", "forced", "run"] and forced["forced"] is True
    assert list(forced["run"]) == RUN_KEYS and forced["run"]["force_reason"] == "stuck"
    again = cli(url, "force-release", name, "--reason", "stuck")
    assert (again.returncode, again.stdout) == (0, f"'{name}' was not held; nothing changed\n")
    unknown = cli(url, "force-release", f"{name}-zzz", "--reason", "x")
    assert unknown.returncode == 1 and unknown.stderr.startswith("schedlock: ")

    history = json.loads(cli(url, "runs", name, "--json").stdout)["items"]
    assert [run["outcome"] for run in history] == ["force_released", "released", "released"]
    assert all(list(run) == RUN_KEYS for run in history)
    assert len(json.loads(cli(url, "runs", name, "--limit", "2", "--json").stdout)["items"]) == 2
    header, first, *_ = cli(url, "runs", name).stdout.splitlines()
    assert header.split() == ["ACQUIRED", "AT", "DURATION", "OUTCOME", "SKIPPED", "FENCING", "LOCKED", "BY"]
    assert "force_released" in first and first.endswith("  (forced by anonymous: stuck)")


def test_jobs(cli: Cli, url: str, name: str) -> None:
    yearly = ("--once-per", "0 0 1 1 *")
    assert cli(url, "run", "--name", name, "--at-most", "1m", *yearly, "--", "true").returncode == 0
    listed = json.loads(cli(url, "jobs", "--prefix", name, "--json").stdout)["items"]
    assert [list(job) for job in listed] == [JOB_KEYS]
    state = listed[0]["state"]
    assert listed[0]["name"] == name and state in ("up", "new") and listed[0]["last_completed_at"] is not None
    header, row = cli(url, "jobs", "--prefix", name).stdout.splitlines()
    assert header.split()[:3] == ["STATE", "NAME", "SCHEDULE"] and row.split()[:3] == [state, name, "0"]
    assert cli(url, "jobs", "--prefix", name, "--down").returncode == 0  # not down
    assert json.loads(cli(url, "jobs", "--prefix", name, "--state", "down", "--json").stdout) == {"items": []}
    bad = cli(url, "jobs", "--state", "sideways")
    assert bad.returncode == 2 and bad.stderr.endswith(
        "schedlock jobs: error: argument --state: invalid choice: 'sideways' (choose from 'up', 'late', 'down', "
        "'paused', 'new')\n"
    )


def test_jobs_down_exits_1_when_a_job_listed_is_down(cli: Cli, url: str, name: str) -> None:
    """`jobs --down` is a cron check: exit 1 (the table still printed, nothing on stderr) when any job listed is
    down, 0 when none is; --json keeps the exit code."""
    yearly = ("--once-per", "0 0 1 1 *")
    assert cli(url, "run", "--name", f"{name}.ok", "--at-most", "1m", *yearly, "--", "true").returncode == 0
    # A job ticking every second (a minute of grace): once a tick is due, a failed run makes it down (docs/jobs.md).
    bad = f"{name}.bad"
    assert httpx.put(f"{url}/v1/jobs/{bad}", json={"schedule": "PT1S", "grace": "1m"}).status_code == 200
    wait_for_state(url, bad, lambda state: state != "new", "a tick due")
    assert cli(url, "run", "--name", bad, "--at-most", "1m", "--", "false").returncode == 1
    wait_for_state(url, bad, lambda state: state == "down", "the job down after its failed run")

    down = cli(url, "jobs", "--prefix", f"{name}.", "--down")
    assert (down.returncode, down.stderr) == (1, ""), down
    header, *rows = down.stdout.splitlines()
    assert header.split()[:2] == ["STATE", "NAME"]
    states = {row.split()[1]: row.split()[0] for row in rows}
    assert states == {bad: "down", f"{name}.ok": states[f"{name}.ok"]} and states[f"{name}.ok"] != "down", rows
    as_json = cli(url, "jobs", "--prefix", f"{name}.", "--down", "--json")
    assert as_json.returncode == 1
    assert {job["name"]: job["state"] for job in json.loads(as_json.stdout)["items"]}[bad] == "down"

    fine = cli(url, "jobs", "--prefix", f"{name}.ok", "--down")  # the down job not listed: none is down
    assert (fine.returncode, fine.stderr) == (0, ""), fine
    assert [row.split()[1] for row in fine.stdout.splitlines()[1:]] == [f"{name}.ok"]
    nothing = cli(url, "jobs", "--prefix", f"{name}.zzz", "--down", "--json")  # no job at all: none is down
    assert (nothing.returncode, json.loads(nothing.stdout)) == (0, {"items": []})


def wait_for_state(url: str, job: str, done: Callable[[str], bool], what: str, timeout: float = 30) -> None:
    """Poll the job's state until done(state) (generous: the machine is shared); fail saying what did not happen."""
    deadline = time.monotonic() + timeout
    while not done(state := httpx.get(f"{url}/v1/jobs/{job}").json()["state"]):
        assert time.monotonic() < deadline, f"{what}: still {state} after {timeout} s"
        time.sleep(0.1)


def test_the_service_down_is_69_for_every_command(cli: Cli, dead_url: str) -> None:
    for args in (["list"], ["status", "x"], ["release", "x", "--token", "t"], ["runs", "x"], ["jobs"],
                 ["force-release", "x", "--reason", "r"]):  # fmt: skip
        result = cli(dead_url, *args)
        *retries, last = result.stderr.splitlines()
        assert result.returncode == 69 and last.startswith("schedlock: lock service unavailable: "), args
        # A release is idempotent: it is tried again three times first, and says so.
        expected = ["0.2", "0.5", "1"] if args[0] == "release" else []
        assert [re.sub(r".* retrying in (\S+)s: .*", r"\1", line) for line in retries] == expected


def test_connection_options_before_or_after_the_subcommand_the_later_wins(cli: Cli, token_server: LiveServer) -> None:
    lock, dead = f"billing.cli-{free_port()}", f"http://127.0.0.1:{free_port()}"
    before = cli(None, "--url", token_server.url, "--api-token", BILLING.secret, "--timeout", "5", "run",
                 "--name", lock, "--at-most", "1m", "--", "echo", "ran")  # fmt: skip
    assert (before.returncode, before.stdout) == (0, "ran\n"), before.stderr
    after = cli(None, "--url", dead, "--api-token", "wrong", "status", lock, "--json", "--url", token_server.url,
                "--api-token", BILLING.secret)  # fmt: skip
    assert after.returncode == 0, after.stderr
    assert "[schedlock via billing-cron lease " in json.loads(after.stdout)["locked_by"]
    assert cli(None, "--api-t", BILLING.secret, "stat", lock).returncode == 2  # a subcommand is never abbreviated
    assert cli(token_server.url, "--api-t", BILLING.secret, "status", lock, "--js").returncode == 0  # options are


def test_401_and_403_are_rejections(cli: Cli, token_server: LiveServer) -> None:
    lock = f"billing.cli-{free_port()}"
    command = ("run", "--name", lock, "--at-most", "1m", "--", "true")
    missing = cli(token_server.url, *command)
    assert missing.returncode == 64
    assert missing.stderr.startswith("schedlock: the lock service rejected the request: unauthorized (401): ")
    outside = cli(token_server.url, "run", "--name", "payroll.x", "--at-most", "1m", "--", "true",
                  SCHEDLOCK_TOKEN=BILLING.secret)  # fmt: skip
    assert outside.returncode == 64 and "forbidden (403)" in outside.stderr
    read_only = cli(token_server.url, *command, SCHEDLOCK_TOKEN=READER.secret)
    assert read_only.returncode == 64 and "forbidden (403)" in read_only.stderr
    not_admin = cli(token_server.url, "force-release", lock, "--reason", "x", SCHEDLOCK_TOKEN=BILLING.secret)
    assert not_admin.returncode == 64 and "forbidden (403)" in not_admin.stderr
    assert cli(token_server.url, "list", SCHEDLOCK_TOKEN="wrong").returncode == 64


def test_a_token_file_is_read_at_every_request(cli: Cli, token_server: LiveServer, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(BILLING.secret + "\n")
    lock = f"billing.cli-{free_port()}"
    ran = cli(token_server.url, "run", "--name", lock, "--at-most", "1m", "--", "echo", "ran",
              SCHEDLOCK_TOKEN_FILE=str(token_file))  # fmt: skip
    assert (ran.returncode, ran.stdout) == (0, "ran\n"), ran.stderr
    # The token is read at every request: a file that changes between the acquire and the release is followed (the
    # release, sent with the new, wrong token, is refused and the lock stays held).
    rotate = f"printf wrong > {token_file}.new && mv {token_file}.new {token_file}"
    rotated = cli(token_server.url, "run", "--name", f"{lock}-2", "--at-most", "1m", "--", "sh", "-c", rotate,
                  SCHEDLOCK_TOKEN_FILE=str(token_file))  # fmt: skip
    assert rotated.returncode == 0, rotated.stderr
    assert f"schedlock: could not release lock '{lock}-2'; it frees itself at its lock_until: unauthorized" in (
        rotated.stderr
    )
    status = cli(token_server.url, "status", f"{lock}-2", "--json", SCHEDLOCK_TOKEN=BILLING.secret)
    assert json.loads(status.stdout)["held"] is True
    token_file.write_text(ADMIN.secret)
    assert cli(token_server.url, "force-release", f"{lock}-2", "--reason", "r",
               SCHEDLOCK_TOKEN_FILE=str(token_file)).returncode == 0  # fmt: skip
    # SCHEDLOCK_TOKEN wins over the file; a file that cannot be read is a rejection, never an outage.
    wins = cli(token_server.url, "list", SCHEDLOCK_TOKEN="wrong", SCHEDLOCK_TOKEN_FILE=str(token_file))
    assert wins.returncode == 64
    gone = cli(token_server.url, "run", "--fail-open", "--name", lock, "--at-most", "1m", "--", "echo", "ran",
               SCHEDLOCK_TOKEN_FILE=str(tmp_path / "missing"))  # fmt: skip
    assert (gone.returncode, gone.stdout) == (64, "")
    assert "token_file_unreadable" in gone.stderr and "SCHEDLOCK_TOKEN_FILE" in gone.stderr


def test_the_json_shapes_docs_cli_md_writes_down_are_the_commands() -> None:
    """docs/cli.md's ```json blocks, in order: a LOCK (with its slot and db_time), a RUN, a JOB."""
    shapes = [json.loads(b) for b in re.findall(r"^```json\n(.*?)^```$", CLI_DOC.read_text(), re.M | re.S)]
    assert [list(shape) for shape in shapes] == [[*LOCK_KEYS, *SLOT_KEYS, "db_time"], RUN_KEYS, JOB_KEYS]
