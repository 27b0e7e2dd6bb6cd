"""examples/cron-job.sh, the bash + curl cron wrapper, run end to end against the live server."""

from __future__ import annotations

import subprocess
from pathlib import Path

from schedlock import LockClient
from tests.client.conftest import cli_env

EXAMPLE = Path(__file__).parents[2] / "examples" / "cron-job.sh"


def start(url: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        ["bash", str(EXAMPLE), *args], env=cli_env(url), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_two_concurrent_runs_one_runs_one_skips(url: str, name: str, tmp_path: Path) -> None:
    log = tmp_path / "runs"
    command = ["sh", "-c", f'echo "$SCHEDLOCK_LOCK_NAME $SCHEDLOCK_FENCING_TOKEN" >> {log}; sleep 2']
    runs = [start(url, name, "1m", "--", *command) for _ in range(2)]
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


def test_the_command_exit_code_comes_back_and_the_lock_is_released(url: str, name: str) -> None:
    run = start(url, name, "1m", "--", "sh", "-c", "exit 5")
    run.communicate(timeout=30)
    assert run.returncode == 5
    with LockClient(url) as client:
        assert not client.get(name).held


def test_held_skips_without_running(url: str, name: str, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    with LockClient(url) as client, client.acquire(name, "1m"):
        run = start(url, name, "1m", "--", "touch", str(marker))
        assert run.communicate(timeout=30) == ("", "")
    assert run.returncode == 0 and not marker.exists()


def test_unreachable_service_exits_69_without_running(dead_url: str, name: str, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    run = start(dead_url, name, "1m", "--", "touch", str(marker))
    _, stderr = run.communicate(timeout=30)
    assert run.returncode == 69 and "unreachable" in stderr and not marker.exists()


def test_a_rejected_request_exits_64(url: str) -> None:
    run = start(url, "x" * 65, "1m", "--", "true")
    _, stderr = run.communicate(timeout=30)
    assert run.returncode == 64 and "invalid_request" in stderr
