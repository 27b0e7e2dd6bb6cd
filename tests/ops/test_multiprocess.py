"""The metrics' two paths (app.ops.metrics, app.ops.multiprocess, app.ops.scrape): one process keeps its values in
memory; the workers of one server share theirs, the job ticks counted at scrapes included. Served workers:
tests/cli/test_workers.py."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from prometheus_client import values
from prometheus_client.values import MutexValue

from app.main import create_app
from app.ops import multiprocess
from app.ops.scrape import Scraped
from app.settings import Settings

T0 = datetime(2026, 11, 29, 3, 0)


def job(name: str, *decided: int) -> Any:
    """A job's status as the tick counter reads it: its name, state and ticks (``decided``: minutes after T0)."""
    ticks = [SimpleNamespace(state="completed", at=T0 + timedelta(minutes=m)) for m in decided]
    return SimpleNamespace(job=SimpleNamespace(name=name), state="up", ticks=ticks)


def test_one_process_keeps_its_values_in_memory(settings: Settings) -> None:
    """The witness of the cheap path: an app in a process with no shared directory counts in memory."""
    metrics = create_app(settings).state.metrics
    assert metrics.shared is None
    assert values.ValueClass is MutexValue  # what prometheus-client chose at its import: values in memory
    assert b"\npython_gc_objects_collected_total" in metrics.exposition("")[0]


def test_workers_count_job_ticks_in_one_ledger(tmp_path: Path) -> None:
    """Whichever worker reads a tick first counts it, once; every worker's scrape shows the server's count, however
    old its own reading of the jobs."""
    first, second = Scraped(5.0, str(tmp_path)), Scraped(5.0, str(tmp_path))
    first.record_ticks([job("nightly", 0)])  # the first reading sets where counting starts
    second.record_ticks([job("nightly", 0, 1)])
    first.record_ticks([job("nightly", 0, 1)])  # the tick at 1 is counted already
    assert first.ticks()["nightly", "completed"] == second.ticks()["nightly", "completed"] == 1
    first.record_ticks([job("nightly", 0, 1, 2)])
    assert second.ticks()["nightly", "completed"] == 2
    second.record_ticks([])  # the job is gone
    assert first.ticks() == {}


def test_the_private_directory_is_new_private_and_removed(monkeypatch: Any) -> None:
    monkeypatch.setenv(multiprocess.ENV, "/tmp")  # someone else's: never used
    with multiprocess.private_dir() as path:
        assert path != Path("/tmp") and list(path.iterdir()) == []
        assert path.stat().st_mode & 0o777 == 0o700
        assert multiprocess.worker_dir() == str(path)
    assert not path.exists()
    assert multiprocess.worker_dir() == "/tmp"
