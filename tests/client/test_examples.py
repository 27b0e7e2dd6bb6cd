"""examples/cron-job.sh, the bash + curl cron wrapper, run end to end against the live server."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from schedlock import LockClient
from tests.support.cli import Spawn, wait_until

EXAMPLE = Path(__file__).parents[2] / "examples" / "cron-job.sh"


def example(*args: str) -> list[str]:
    return ["bash", str(EXAMPLE), *args]


def test_two_concurrent_runs_one_runs_one_skips(url: str, name: str, tmp_path: Path, spawn: Spawn) -> None:
    log, stop = tmp_path / "runs", tmp_path / "stop"
    command = [
        "sh",
        "-c",
        f'echo "$SCHEDLOCK_LOCK_NAME $SCHEDLOCK_FENCING_TOKEN" >> {log}; while [ ! -e {stop} ]; do sleep 0.05; done',
    ]
    runs = [spawn(example(name, "1m", "--", *command)) for _ in range(2)]
    wait_until(lambda: any(run.poll() is not None for run in runs), 30, "one run to skip")
    stop.touch()
    outputs = [run.communicate(timeout=30) for run in runs]
    assert [run.returncode for run in runs] == [0, 0]
    assert outputs == [("", ""), ("", "")]  # the skipped run is silent too
    [line] = log.read_text().splitlines()
    lock_name, fencing_token = line.split()
    with LockClient(url) as client:
        info = client.get(name)
    assert lock_name == name and int(fencing_token) == info.fencing_token
    assert not info.held  # released at the end
    assert info.locked_by.endswith("]") and " cron pid " in info.locked_by


def test_the_command_exit_code_comes_back_and_the_lock_is_released(url: str, name: str, spawn: Spawn) -> None:
    run = spawn(example(name, "1m", "--", "sh", "-c", "exit 5"))
    run.communicate(timeout=30)
    assert run.returncode == 5
    with LockClient(url) as client:
        assert not client.get(name).held


def test_held_skips_without_running(url: str, name: str, tmp_path: Path, spawn: Spawn) -> None:
    marker = tmp_path / "ran"
    with LockClient(url) as client, client.acquire(name, "1m"):
        run = spawn(example(name, "1m", "--", "touch", str(marker)))
        assert run.communicate(timeout=30) == ("", "")
    assert run.returncode == 0 and not marker.exists()


def test_unreachable_service_exits_69_without_running(dead_url: str, name: str, tmp_path: Path, spawn: Spawn) -> None:
    marker = tmp_path / "ran"
    run = spawn(example(name, "1m", "--", "touch", str(marker)), dead_url)
    _, stderr = run.communicate(timeout=30)
    assert run.returncode == 69 and "unreachable" in stderr and not marker.exists()


def test_a_rejected_request_exits_64(spawn: Spawn) -> None:
    run = spawn(example("x" * 65, "1m", "--", "true"))
    _, stderr = run.communicate(timeout=30)
    assert run.returncode == 64 and "invalid_request" in stderr


@pytest.mark.parametrize("bad", ["billing/nightly", "tab\there", "new\nline"], ids=["slash", "tab", "newline"])
def test_an_invalid_name_is_the_services_422_not_unreachable(bad: str, tmp_path: Path, spawn: Spawn) -> None:
    marker = tmp_path / "ran"
    run = spawn(example(bad, "1m", "--", "touch", str(marker)))
    _, stderr = run.communicate(timeout=30)
    assert run.returncode == 64, stderr
    assert "rejected (422)" in stderr and '"field":"name"' in stderr and "unreachable" not in stderr
    assert not marker.exists()


def test_any_valid_name_reaches_the_service_encoded(url: str, spawn: Spawn) -> None:
    """Spaces, '?', '#', '%' and non-ASCII are valid in a lock name: the URL carries them percent-encoded."""
    name = f"nächtlicher Bericht #{uuid.uuid4().hex[:6]}?x=1%"
    run = spawn(example(name, "1m", "--", "sh", "-c", 'printf "%s" "$SCHEDLOCK_LOCK_NAME"'))
    stdout, stderr = run.communicate(timeout=30)
    assert (run.returncode, stdout) == (0, name), stderr
    with LockClient(url) as client:
        assert client.get(name).held is False  # taken under exactly that name, and released
