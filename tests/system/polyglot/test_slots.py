"""The Java, Go and Node examples run a job once per tick (docs/slots.md): a failed run leaves the tick open, a
completed one makes every later attempt skip, and the lease says which tick it runs."""

from __future__ import annotations

from tests.support.polyglot import Program, row
from tests.support.servers import LiveServer


def test_a_tick_of_ones_own_runs_once_and_a_failure_leaves_it_open(
    program: Program, poly_server: LiveServer, poly_name: str
) -> None:
    def tick(mode: str) -> dict[str, object]:
        return program.run("tick", poly_name, mode, "slot", "2026-11-30", url=poly_server.url)

    assert tick("throw") == {"outcome": "threw", "slot": "2026-11-30"}
    assert row(poly_server, poly_name).get("last_completed_slot") is None  # the failed run left it open
    assert tick("ok") == {"outcome": "executed", "slot": "2026-11-30"}
    assert tick("ok") == {"outcome": "skipped_done", "slot": None}
    assert row(poly_server, poly_name)["last_completed_slot"] == "2026-11-30"


def test_once_per_a_schedule_in_a_time_zone(program: Program, poly_server: LiveServer, poly_name: str) -> None:
    # New Year in Tokyo is 15:00 UTC on December 31st.
    args = ("tick", poly_name, "ok", "once-per", "0 0 1 1 *", "Asia/Tokyo")
    first = program.run(*args, url=poly_server.url)
    assert first["outcome"] == "executed" and str(first["slot"]).endswith("-12-31T15:00:00.000Z")
    assert program.run(*args, url=poly_server.url) == {"outcome": "skipped_done", "slot": None}
