"""The metrics' two paths (app.ops.metrics, app.ops.multiprocess, app.ops.scrape): one process keeps its values in
memory; the workers of one server share theirs, the job ticks counted at scrapes included. Served workers:
tests/cli/test_workers.py."""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from prometheus_client import values
from prometheus_client.values import MutexValue

from app.main import create_app
from app.ops import job_metrics, multiprocess
from app.ops.scrape import Scraped
from app.settings import Settings

T0 = datetime(2026, 11, 29, 3, 0)


def job(name: str, *decided: int) -> Any:
    """A job's status as the tick counter reads it: its name, state and ticks (``decided``: minutes after T0), read
    half a minute after the last."""
    ticks = [SimpleNamespace(state="completed", at=T0 + timedelta(minutes=m)) for m in decided]
    db_time = T0 + timedelta(minutes=max(decided, default=0) + 0.5)
    return SimpleNamespace(job=SimpleNamespace(name=name), state="up", ticks=ticks, db_time=db_time)


def test_one_process_keeps_its_values_in_memory(settings: Settings) -> None:
    """The witness of the cheap path: an app in a process with no shared directory counts in memory."""
    metrics = create_app(settings).state.metrics
    assert metrics.shared is None
    assert values.ValueClass is MutexValue  # what prometheus-client chose at its import: values in memory
    assert b"\npython_gc_objects_collected_total" in metrics.exposition("")[0]


def test_workers_count_job_ticks_in_one_ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whichever worker reads a tick first counts it, once; every worker's scrape shows the server's count, however
    old its own reading of the jobs."""
    monkeypatch.setattr(job_metrics, "STARTED", time.monotonic())  # the server starts now: T0 + 0.5 min
    first, second = Scraped(5.0, str(tmp_path)), Scraped(5.0, str(tmp_path))
    first.record_ticks([job("nightly", 0)])  # decided before the server started: not counted
    second.record_ticks([job("nightly", 0, 1)])
    first.record_ticks([job("nightly", 0, 1)])  # the tick at 1 is counted already
    assert first.ticks()["nightly", "completed"] == second.ticks()["nightly", "completed"] == 1
    first.record_ticks([job("nightly", 0, 1, 2)])
    assert second.ticks()["nightly", "completed"] == 2
    second.record_ticks([])  # the job is gone
    assert first.ticks() == {}


def test_ticks_decided_before_the_first_scrape_count(monkeypatch: pytest.MonkeyPatch) -> None:
    """A tick decided after the server started counts, though nothing read the job before it was decided (between
    the job's registration and a replica's first scrape); one decided before the start does not."""
    monkeypatch.setattr(
        job_metrics, "STARTED", time.monotonic() - 90, raising=False
    )  # the server started at T0 + 3.5 - 1.5 min
    scraped = Scraped(5.0, None)
    scraped.record_ticks([job("nightly", 1, 2, 3)])  # the first reading, at T0 + 3.5 min
    assert scraped.ticks()["nightly", "completed"] == 2  # the ticks at 2 and 3 (1 was before the start)
    scraped.record_ticks([job("nightly", 1, 2, 3, 4)])
    assert scraped.ticks()["nightly", "completed"] == 3


def test_the_private_directory_is_new_private_and_removed(monkeypatch: Any) -> None:
    monkeypatch.setenv(multiprocess.ENV, "/tmp")  # someone else's: never used
    with multiprocess.private_dir() as path:
        assert path != Path("/tmp") and list(path.iterdir()) == []
        assert path.stat().st_mode & 0o777 == 0o700
        assert multiprocess.worker_dir() == str(path)
    assert not path.exists()
    assert multiprocess.worker_dir() == "/tmp"
