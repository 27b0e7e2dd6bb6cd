"""The soak harness (python -m bench.soak): its verdicts on records made to pass or fail each target, and 60 s of
the real thing as a smoke test (two servers, retention pruning, every window recorded)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.soak_report import checks, render, svg
from tests.support.databases import schemas_left

ROOT = Path(__file__).parents[2]


def _window(
    t: float, *, rss: float = 90.0, fds: int = 20, pool: int = 8, p99: float = 5.0, runs: int = 10**6
) -> dict[str, Any]:
    server = {"rss_mb": rss, "fds": fds + 10, "fds_own": fds, "pool_open": pool, "pool_busy": 1, "tasks": 9}
    return {
        "t_s": t,
        "cycles": 500 * 60,
        "cycles_per_s": 500.0,
        "reads": 600,
        "kinds": {},
        "dropped": 0,
        "unexpected": {},
        "loadavg_1m": 1.0,
        "ops": {"acquire": {"n": 20_000, "p50_ms": 1.0, "p99_ms": p99}},
        "servers": [server, dict(server)],
        "pg": {"connections": 2 * pool, "by_state": {"idle": 2 * pool}},
        "history": {"runs_bytes": runs, "runs_live": 1, "runs_dead": 0, "skips_bytes": 0, "locks": 1},
    }


def _record(windows: list[dict[str, Any]]) -> dict[str, Any]:
    config = {
        "duration_s": 60.0 * len(windows),
        "rate": 500.0,
        "servers": 2,
        "connections": 16,
        "window_s": 60.0,
        "settle_s": 300.0,
        "retention_s": 120.0,
        "prune_interval_s": 15.0,
    }
    return {"config": config, "windows": windows}


def _steady() -> list[dict[str, Any]]:
    return [_window(60.0 * (i + 1), runs=10**6 if i >= 3 else (i + 1) * 300_000) for i in range(30)]


def _verdicts(windows: list[dict[str, Any]]) -> dict[str, str]:
    return {name: check["verdict"] for name, check in checks(_record(windows)).items()}


def test_a_steady_soak_passes_every_target() -> None:
    assert set(_verdicts(_steady()).values()) == {"pass"}


def test_each_target_fails_on_its_own_leak() -> None:
    # Planted in a steady record, one at a time: each checker must catch its own.
    def planted(change: Any) -> dict[str, str]:
        windows = copy.deepcopy(_steady())
        for i, w in enumerate(windows):
            change(i, w)
        return _verdicts(windows)

    def rss(i: int, w: dict[str, Any]) -> None:
        w["servers"][1]["rss_mb"] += 0.5 * i  # 0.5 MB a minute: 12.5 MB over the 25 settled minutes

    def fds(i: int, w: dict[str, Any]) -> None:
        w["servers"][0]["fds_own"] += i // 4  # a descriptor every 4 minutes

    def connections(i: int, w: dict[str, Any]) -> None:
        w["pg"]["connections"] += i // 5

    def p99(i: int, w: dict[str, Any]) -> None:
        if i == 20:
            w["ops"]["acquire"]["p99_ms"] = 16.0  # 3.2 x the first minute's

    def history(i: int, w: dict[str, Any]) -> None:
        w["history"]["runs_bytes"] += i * 20_000  # retention falls behind: 20 kB more a minute

    def answers(i: int, w: dict[str, Any]) -> None:
        if i == 7:
            w["unexpected"] = {"release:503": 1}

    def rate(i: int, w: dict[str, Any]) -> None:
        w["cycles"] = 450 * 60

    for name, change in [
        ("rss", rss),
        ("fds", fds),
        ("connections", connections),
        ("p99", p99),
        ("history", history),
        ("answers", answers),
        ("rate", rate),
    ]:
        verdicts = planted(change)
        assert verdicts[name] == "fail", (name, verdicts)
        assert {v for k, v in verdicts.items() if k != name} == {"pass"}, (name, verdicts)


def test_what_a_short_run_cannot_judge_is_said_so() -> None:
    verdicts = _verdicts([_window(60.0 * (i + 1)) for i in range(3)])  # 3 minutes: not settled, not caught up
    assert verdicts["rss"] == verdicts["fds"] == verdicts["history"] == "n/a"


def test_the_plot_and_the_table_show_every_window() -> None:
    record = _record(_steady())
    record["checks"] = checks(record)
    text = render(record)
    assert len([line for line in text.splitlines() if line.strip()[:1].isdigit()]) == 30
    drawn = svg(record)
    assert drawn.startswith("<svg") and drawn.count("<polyline") == 2 + 2 + 3 + 1 + 1 + 2


@pytest.mark.system
def test_a_minute_of_soak_records_every_window_and_passes_its_checks(database_url: str, tmp_path: Path) -> None:
    output = tmp_path / "soak.json"
    command = [sys.executable, "-m", "bench.soak", "--database-url", database_url, "--output", str(output)]
    # A low rate (the suite shares the machine); retention 20 s, pruned every 5 s, so it prunes within the minute.
    options = ["--duration", "60s", "--rate", "40", "--read-rate", "4", "--window", "10s", "--settle", "20s"]
    options += ["--retention", "20s", "--prune-interval", "5s"]
    done = subprocess.run([*command, *options], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert output.exists(), done.stdout + done.stderr
    record = json.loads(output.read_text())
    assert output.with_suffix(".svg").read_text().startswith("<svg")
    windows = record["windows"]
    assert len(windows) == 6, [w["t_s"] for w in windows]
    for w in windows:
        assert w["cycles"] > 0 and w["reads"] > 0, w
        for server in w["servers"]:
            assert server["rss_mb"] > 0 and server["fds_own"] > 0 and server["pool_open"] > 0, server
            assert server["tasks"] > 0, server  # the gauge /metrics exports
        assert w["pg"]["connections"] > 0 and w["history"]["runs_bytes"] > 0, w
    ops = {op for w in windows for op in w["ops"]}
    assert {"acquire", "extend", "release", "skip", "slot", "job", "read_runs", "read_ticks", "read_ui"} <= ops
    # Retention pruned: far fewer runs are left than the cycles that acquired (each plain or skip cycle one).
    acquired = sum(w["kinds"].get("plain", 0) + w["kinds"].get("skip", 0) for w in windows)
    assert windows[-1]["history"]["runs_live"] < 0.8 * acquired, (windows[-1]["history"], acquired)
    verdicts = {name: c["verdict"] for name, c in record["checks"].items()}
    # What a minute can judge. Not p99 against the first window's (the suite shares the machine), nor the history's
    # size once flat (the deleted space is reused after autovacuum, whose naptime is a minute).
    for name in ("rate", "answers", "fds", "connections"):
        assert verdicts[name] == "pass", (name, record["checks"][name], done.stdout)
    assert schemas_left(database_url, "soak_") == 0
