"""One HTTP phase measured whole: wrk against one server, or a load split between several at once (one wrk each),
with each server's CPU and RSS (its process tree) and its Postgres backends' CPU, added up."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence

from bench import target
from bench.dbcpu import BackendsCpu
from bench.loadgen import Load, run_wrks
from bench.stats import Phase, combine


def measure(
    database_url: str | None,
    runs: Sequence[tuple[target.Server, Load]],
    protocol_env: dict[str, str] | None = None,
) -> Phase:
    """The runs at once, as one phase. ``database_url`` None: no database to look at (etcd)."""
    with contextlib.ExitStack() as stack:
        # The first watch is entered first and left last: its machine-wide CPU spans the whole phase.
        watches = [stack.enter_context(target.ProcessWatch(server.pid)) for server, _ in runs]
        backends = [stack.enter_context(BackendsCpu(database_url, server.pid)) for server, _ in runs if database_url]
        phase = combine(run_wrks([(server.url, load) for server, load in runs], protocol_env))
    phase.server_cpu_s = _total(w.cpu_s for w in watches)
    phase.server_rss_mb = _total(w.rss_mb for w in watches)
    phase.db_cpu_s = _total(b.cpu_s for b in backends)
    phase.machine_cpu_s = watches[0].machine_cpu_s
    return phase


def _total(values: Iterable[float | None]) -> float | None:
    """The sum, or None when any is unknown (a figure for some of the servers would pass for all of them)."""
    known = list(values)
    return None if not known or None in known else sum(v for v in known if v is not None)
