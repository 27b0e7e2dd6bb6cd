"""python -m bench.servers works end to end: servers side by side, each measured over its whole process tree.
Nothing here is about speed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.servers import main


def test_two_variants_alternate_and_each_is_measured_whole(
    database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "servers.json"
    quick = ["--rounds", "2", "--seconds", "1", "--warmup-seconds", "1", "--clients", "4", "--names", "16"]
    assert main([*quick, "--database-url", database_url, "--output", str(output)]) == 0
    printed = capsys.readouterr().out
    data = json.loads(output.read_text())
    assert list(data["variants"]) == ["uvicorn", "uvicorn-2-workers"]
    assert data["variants"]["uvicorn-2-workers"].endswith("--workers 2")
    for label, runs in data["runs"].items():
        assert len(runs) == 2
        assert len({run["pid"] for run in runs}) == 2, runs  # each round on a server started for it
        for run in runs:
            assert run["cycles_per_s"] > 0 and run["errors"] == 0, run
            assert run["server_cpu_us_per_request"] > 0 and run["db_cpu_us_per_cycle"] > 0, (label, run)
            assert run["loadavg_1m"] >= 0
    summary = data["summary"]
    assert summary["uvicorn"]["vs_first"]["cycles_per_s"] == {"median": 1.0, "min": 1.0, "max": 1.0}
    assert summary["uvicorn-2-workers"]["vs_first"]["server_cpu_us_per_request"]["median"] > 0
    # The whole tree: a supervisor and two workers hold more memory than one server process.
    assert summary["uvicorn-2-workers"]["server_rss_mb"]["min"] > summary["uvicorn"]["server_rss_mb"]["max"]
    assert "cycles/s vs first" in printed
    for label in data["variants"]:
        assert "schedlock.access" in (output.with_suffix(f".{label}.log")).read_text()
