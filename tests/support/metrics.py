"""Reading GET /metrics in tests: a scrape as samples, one sample's value, and the lock outcomes counted between
two scrapes."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from app.ops.metrics import LOCK_OUTCOMES

#: (sample name, its labels) -> value
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def scrape(client: httpx.AsyncClient) -> Samples:
    """GET /metrics, which must answer 200 in the Prometheus text format, as samples."""
    r = await client.get("/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    return parse(r.text)


def parse(text: str) -> Samples:
    """The samples of an exposition in the Prometheus text format."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sample's value, 0 when it is absent."""
    return samples.get((name, frozenset(labels.items())), 0.0)


def outcomes(before: Samples, after: Samples) -> dict[tuple[str, str], float]:
    """The lock outcomes that changed between two scrapes."""
    deltas = {}
    for op, names in LOCK_OUTCOMES.items():
        for outcome in names:
            labels = {"operation": op, "outcome": outcome}
            delta = value(after, "schedlock_lock_operations_total", **labels) - value(
                before, "schedlock_lock_operations_total", **labels
            )
            if delta:
                deltas[op, outcome] = delta
    return deltas
