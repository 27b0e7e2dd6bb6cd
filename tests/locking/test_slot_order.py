"""The slot rule as a property (issue 43, docs/slots.md): whatever the interleaving of acquires, completions,
failures and expired leases of time-keyed slots on one name, each tick runs at most once to completion, a tick is
never granted once it or a newer one completed, and the last completed tick never moves back. Against the real
Postgres, through the API."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.settings import Settings
from tests.support.api import acquire

NODES = 3
TICKS = 6


def tick(n: int) -> str:
    return f"2026-11-30T03:{n:02d}:00.000Z"


#: One step: a node fires for a tick, a node's run ends (completed or failed), or the lease runs out (its holder
#: stalled past lock_at_most_for: it may still come back and release).
STEP = st.one_of(
    st.tuples(st.just("fire"), st.integers(0, NODES - 1), st.integers(0, TICKS - 1)),
    st.tuples(st.sampled_from(["complete", "fail"]), st.integers(0, NODES - 1), st.just(0)),
    st.tuples(st.just("expire"), st.just(0), st.just(0)),
)


@dataclass
class World:
    name: str
    leases: dict[int, tuple[str, int]] = field(default_factory=dict)  # node -> (token, tick)
    completed: dict[int, int] = field(default_factory=dict)  # tick -> completions
    last: int = -1  # the newest tick completed so far


@given(steps=st.lists(STEP, max_size=30))
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
async def test_each_tick_completes_at_most_once_and_the_last_completed_tick_never_moves_back(
    client: httpx.AsyncClient, db: Any, settings: Settings, steps: list[tuple[str, int, int]]
) -> None:
    world = World(f"order-{uuid.uuid4().hex[:12]}")
    for kind, node, t in steps:
        if kind == "fire" and node not in world.leases:
            r = await acquire(client, world.name, "10m", slot=tick(t), holder=f"node-{node}")
            if r.status_code == 200:
                assert t > world.last, f"tick {t} granted after tick {world.last} completed: {steps}"
                world.leases[node] = (r.json()["token"], t)
            else:
                assert r.status_code == 409 and r.json()["error"]["code"] in {"lock_held", "slot_done"}, r.text
        elif kind in {"complete", "fail"} and node in world.leases:
            token, t = world.leases.pop(node)
            body = {"token": token, "completed": kind == "complete"}
            r = await client.post(f"/v1/locks/{world.name}/release", json=body)
            if r.status_code == 200 and r.json()["completed"]:
                world.completed[t] = world.completed.get(t, 0) + 1
                assert world.completed[t] == 1, f"tick {t} completed twice: {steps}"
            else:
                assert r.status_code in (200, 409), r.text  # failed, taken over, or a stale tick not recorded
        elif kind == "expire":
            await db.execute(
                f"UPDATE {settings.table} SET lock_until = timezone('utc', now()) - interval '1 second' "
                "WHERE name = $1 AND lock_until > timezone('utc', now())",
                world.name,
            )
        got = await client.get(f"/v1/locks/{world.name}")
        last = got.json()["last_completed_slot"] if got.status_code == 200 else None
        now = -1 if last is None else int(last[14:16])
        assert now >= world.last, f"the last completed tick moved back from {world.last} to {now}: {steps}"
        world.last = now
