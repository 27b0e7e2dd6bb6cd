"""What one measured phase produced, and how it is summarised: rates, latency percentiles, error counts."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

PERCENTILES = (50, 90, 99)


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile of already sorted values (no interpolation: every figure was really observed)."""
    if not sorted_values:
        return float("nan")
    rank = max(1, -(-len(sorted_values) * p // 100))  # ceil(n * p / 100), at least 1
    return sorted_values[int(rank) - 1]


def latency_summary(samples_us: Sequence[float]) -> dict[str, Any]:
    """Count and p50/p90/p99/max in milliseconds."""
    ordered = sorted(samples_us)
    out: dict[str, Any] = {"count": len(ordered)}
    for p in PERCENTILES:
        out[f"p{p}_ms"] = round(percentile(ordered, p) / 1000, 3) if ordered else None
    out["max_ms"] = round(ordered[-1] / 1000, 3) if ordered else None
    return out


@dataclass
class Phase:
    """Raw results of one run of one load pattern against one target (schedlock over HTTP, or the database)."""

    seconds: float
    acquire_us: list[float] = field(default_factory=list)
    release_us: list[float] = field(default_factory=list)
    get_us: list[float] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    #: CPU seconds the load generator used (wrk, or this process for the direct baseline).
    loadgen_cpu_s: float = 0.0
    #: CPU seconds the server process used, when it is known.
    server_cpu_s: float | None = None
    #: Largest server RSS seen during the phase, in MB, when the server's pid is known.
    server_rss_mb: float | None = None
    #: CPU seconds the Postgres backends serving the phase used, when they could be found.
    db_cpu_s: float | None = None
    #: CPU seconds the whole machine was busy during the phase, when measured.
    machine_cpu_s: float | None = None
    #: HTTP requests sent (wrk's count); an etcd cycle takes more requests than a schedlock one.
    http_requests: int | None = None

    def count(self, key: str) -> int:
        return self.counts.get(key, 0)

    def summary(self) -> dict[str, Any]:
        s = self.seconds
        cycles = self.count("rel_ok")
        requests = len(self.acquire_us) + len(self.release_us) + len(self.get_us)
        if self.http_requests is not None:
            requests = self.http_requests
        cpu = [c for c in (self.server_cpu_s, self.db_cpu_s) if c is not None]
        out: dict[str, Any] = {
            "seconds": round(s, 3),
            "cycles": cycles,
            "cycles_per_s": round(cycles / s, 1) if s else 0.0,
            "requests_per_s": round(requests / s, 1) if s else 0.0,
            "acquire": latency_summary(self.acquire_us),
            "release": latency_summary(self.release_us),
            "counts": dict(sorted(self.counts.items())),
            "errors": self.errors(),
            "loadgen_cpu_s": round(self.loadgen_cpu_s, 2),
            "server_cpu_s": round(self.server_cpu_s, 2) if self.server_cpu_s is not None else None,
            # What one request costs the server process: the figure that middleware and auth will move.
            "server_cpu_us_per_request": round(self.server_cpu_s / requests * 1e6)
            if self.server_cpu_s is not None and requests
            else None,
            "server_rss_mb": round(self.server_rss_mb, 1) if self.server_rss_mb is not None else None,
            # Cores the whole machine kept busy: below the machine's count, something waits instead of working.
            "machine_cores_busy": round(self.machine_cpu_s / s, 2) if self.machine_cpu_s is not None and s else None,
            "db_cpu_s": round(self.db_cpu_s, 2) if self.db_cpu_s is not None else None,
            # Server (or etcd) plus database CPU per completed cycle: what a lock cycle costs the machine.
            "cpu_us_per_cycle": round(sum(cpu) / cycles * 1e6) if cpu and cycles else None,
            "db_cpu_us_per_cycle": round(self.db_cpu_s / cycles * 1e6)
            if self.db_cpu_s is not None and cycles
            else None,
        }
        if self.get_us:
            out["get"] = latency_summary(self.get_us)
        acquires = self.count("acq_ok") + self.count("acq_held") + self.count("acq_other")
        out["held_fraction"] = round(self.count("acq_held") / acquires, 3) if acquires else None
        return out

    def errors(self) -> int:
        """Answers that are neither success nor the expected 409 lock_held, plus socket errors and timeouts."""
        return sum(v for k, v in self.counts.items() if k.endswith("_other") or k.startswith("socket_"))


def spread(values: Sequence[float]) -> dict[str, float | None]:
    """Median, min and max of repeated runs of one configuration."""
    if not values:
        return {"median": None, "min": None, "max": None}
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3), "max": round(max(values), 3)}


def combine(phases: Sequence[Phase]) -> Phase:
    """Phases that ran at the same time (one wrk per server) as one: their counts and samples together, over the
    longest one's duration. They start together and last the same ``-d``, so its cycles/s is their sum (short of it
    by the few milliseconds the durations differ)."""
    if len(phases) == 1:
        return phases[0]
    requests = [p.http_requests for p in phases if p.http_requests is not None]
    out = Phase(
        seconds=max(p.seconds for p in phases), http_requests=sum(requests) if len(requests) == len(phases) else None
    )
    _add_samples(out, phases)
    out.loadgen_cpu_s += sum(p.loadgen_cpu_s for p in phases)
    return out


def pooled(phases: Sequence[Phase]) -> Phase:
    """Phases of one side that ran one after another (turns) as one: their samples and counts together, over their
    summed durations; CPU figures summed when every turn has them, the largest RSS."""
    if len(phases) == 1:
        return phases[0]

    def total(values: list[float | None]) -> float | None:
        return None if any(v is None for v in values) else sum(v for v in values if v is not None)

    requests = [p.http_requests for p in phases]
    rss = [p.server_rss_mb for p in phases if p.server_rss_mb is not None]
    out = Phase(
        seconds=sum(p.seconds for p in phases),
        loadgen_cpu_s=sum(p.loadgen_cpu_s for p in phases),
        server_cpu_s=total([p.server_cpu_s for p in phases]),
        server_rss_mb=max(rss) if rss else None,
        db_cpu_s=total([p.db_cpu_s for p in phases]),
        machine_cpu_s=total([p.machine_cpu_s for p in phases]),
        http_requests=None if any(r is None for r in requests) else sum(r for r in requests if r is not None),
    )
    _add_samples(out, phases)
    return out


def _add_samples(out: Phase, phases: Sequence[Phase]) -> None:
    """Every phase's latency samples and outcome counts, added to ``out``'s."""
    for p in phases:
        out.acquire_us += p.acquire_us
        out.release_us += p.release_us
        out.get_us += p.get_us
        for key, value in p.counts.items():
            out.counts[key] = out.counts.get(key, 0) + value
