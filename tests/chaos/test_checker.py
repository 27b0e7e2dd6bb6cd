"""The fault campaign's checker (tests/chaos/checker.py) on hand-made histories: each rule passes a clean history
and reports a planted violation, with the operations that show it."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from tests.chaos.checker import Final, Verdict, check
from tests.chaos.grants import grants_of
from tests.chaos.history import Op, to_api_time

T0 = datetime(2026, 12, 1, 12, 0, 0)


def at(seconds: float) -> str:
    return to_api_time(T0 + timedelta(seconds=seconds))


class History:
    """Operations in the order they are written, 10 ms apart on the monotonic clock."""

    def __init__(self) -> None:
        self.ops: list[Op] = []
        self.clock = 100.0

    def op(self, kind: str, name: str, lease: str, req: dict[str, Any], status: int | None, body: Any, **kw: Any) -> Op:
        self.clock += 0.01
        op = Op(f"{lease}.{len(self.ops)}", lease.split(".")[0], kind, name, lease, self.clock, self.clock + 0.005,
                req, status, body, **kw)  # fmt: skip
        self.ops.append(op)
        return op

    def grant(self, name: str, lease: str, fencing: int, start: float, until: float, **extra: Any) -> Op:
        at_least = extra.pop("at_least_ms", 0)
        body = {"acquired": True, "token": "t", "fencing_token": fencing, "locked_at": at(start),
                "lock_until": at(until), "locked_by": f"{lease} [schedlock lease 1]", "db_time": at(start),
                **extra}  # fmt: skip
        return self.op("acquire", name, lease, {"lock_at_most_for": 2000, "lock_at_least_for": at_least}, 200, body)

    def release(self, name: str, lease: str, now: float, until: float, status: int = 200, **extra: Any) -> Op:
        body = {"released": True, "lock_until": at(until), "db_time": at(now), **extra} if status == 200 else {}
        if status == 409:
            body = {"error": {"code": "not_holder", "name": name}}
        headers = {"retry_after": "1"} if status == 503 else {}
        return self.op("release", name, lease, {}, status, body, **headers)

    def extend(self, name: str, lease: str, now: float, until: float) -> Op:
        body = {"extended": True, "lock_until": at(until), "db_time": at(now)}
        return self.op("extend", name, lease, {"lock_at_most_for": 2000}, 200, body)

    def java_grant(self, name: str, lease: str, fencing: int, start: float, until: float) -> Op:
        body = {"ok": True, "locked_at": at(start), "lock_until": at(until), "locked_by": lease.split(".")[0],
                "fencing_token": fencing, "db_time": at(start)}  # fmt: skip
        return self.op("java_acquire", name, lease, {"lock_at_most_for": 2000}, None, body)

    def held(self, name: str, by: Op, until: float) -> Op:
        assert by.body is not None
        error = {"code": "lock_held", "locked_by": by.body["locked_by"], "locked_at": by.body["locked_at"],
                 "lock_until": at(until)}  # fmt: skip
        return self.op("acquire", name, "other.9", {"lock_at_most_for": 2000}, 409, {"error": error})


def consistent_final(ops: list[Op]) -> Final:
    """The table and run history a correct service would show after ``ops``."""
    runs, rows = [], {}
    for g in sorted(grants_of(ops), key=lambda g: g.fencing_token):
        outcome = "released" if g.release is not None else "expired"
        runs.append({"name": g.name, "fencing_token": g.fencing_token, "acquired_at": to_api_time(g.locked_at),
                     "lock_until": to_api_time(g.until), "outcome": outcome})  # fmt: skip
        rows[g.name] = {"name": g.name, "fencing_token": g.fencing_token, "lock_until": to_api_time(g.until)}
    return Final(rows, runs)


def verdict(h: History, final: Final | None = None, probes: list[Op] | None = None) -> Verdict:
    return check(h.ops, final or consistent_final(h.ops), probes or [], healed_at=0.0, bound=3.0)


def rules(v: Verdict) -> list[str]:
    return sorted(violation.rule for violation in v.violations)


def two_leases() -> History:
    h = History()
    h.grant("n", "a.1", 1, 0, 2)
    h.release("n", "a.1", 1, 1)
    h.grant("n", "b.1", 2, 1.5, 3.5)
    h.release("n", "b.1", 2, 2)
    return h


def test_a_clean_history_passes() -> None:
    v = verdict(two_leases())
    assert v.ok, [x.describe() for x in v.violations]
    assert len(v.grants) == 2 and v.outlived == []


def test_an_overlap_is_reported_with_the_two_leases_operations() -> None:
    h = History()
    first = h.grant("n", "a.1", 1, 0, 2)
    second = h.grant("n", "b.1", 2, 1, 3)  # granted while a.1 held it until 2
    v = verdict(h)
    assert rules(v) == ["no_overlap", "no_overlap"]  # as the clients were told, and as the run history has it
    assert v.violations[0].ops == (first, second)
    assert "fencing 2 granted" in v.violations[0].describe() and "b.1" in v.violations[0].describe()


def test_the_run_history_is_checked_for_overlaps_too() -> None:
    h = two_leases()
    final = consistent_final(h.ops)
    final.runs[0]["lock_until"] = at(1.8)  # the run history says a.1 held until after b.1 began
    assert "no_overlap" in rules(verdict(h, final))


def test_a_holder_that_outlived_its_lease_is_the_caveat_not_a_violation() -> None:
    h = History()
    h.grant("n", "a.1", 1, 0, 2)
    h.grant("n", "b.1", 2, 2.5, 4.5)
    h.release("n", "a.1", 3, 0, status=409)  # a.1 was paused past lock_until; its release is refused
    v = verdict(h)
    assert v.ok and [g.lease for g in v.outlived] == ["a.1"]


def test_an_unanswered_release_may_have_freed_the_lock() -> None:
    h = History()
    h.grant("n", "a.1", 1, 0, 10)
    h.extend("n", "a.1", 1, 11)
    h.release("n", "a.1", 0, 0, status=503)  # ran or not: if it ran, the lock was free from after db_time 1
    h.grant("n", "b.1", 2, 1.5, 3.5)
    v = check(h.ops, consistent_final(h.ops), [], 0.0, 3.0)
    assert "no_overlap" not in rules(v)
    h.grant("n", "c.1", 3, 0.5, 2.5)  # but not before the last db_time it saw
    assert "no_overlap" in rules(check(h.ops, consistent_final(h.ops), [], 0.0, 3.0))


def test_fencing_tokens_must_rise_java_included() -> None:
    h = History()
    h.grant("n", "a.1", 5, 0, 1)
    h.java_grant("n", "java-1.1", 4, 2, 3)
    assert "fencing" in rules(verdict(h))


def test_a_fencing_token_granted_twice_is_reported() -> None:
    h = History()
    h.grant("n", "a.1", 5, 0, 1)
    h.grant("m", "b.1", 5, 0, 1)
    assert "fencing" in rules(verdict(h))


def test_a_refusal_must_show_the_acknowledged_release() -> None:
    h = History()
    lease = h.grant("n", "a.1", 1, 0, 10, at_least_ms=5000)
    h.release("n", "a.1", 1, 5)
    h.held("n", lease, until=5)
    assert verdict(h).ok
    h.held("n", lease, until=10)  # the table still shows the lease as acquired: the release was lost
    assert rules(verdict(h)) == ["acks_hold"]


def test_a_refusal_must_show_the_acknowledged_extend() -> None:
    h = History()
    lease = h.grant("n", "a.1", 1, 0, 2)
    h.extend("n", "a.1", 1, 3)
    h.held("n", lease, until=2)
    assert rules(verdict(h)) == ["acks_hold"]


def test_the_run_history_and_the_table_must_show_the_acknowledged_release() -> None:
    h = two_leases()
    final = consistent_final(h.ops)
    final.rows["n"]["lock_until"] = at(3.5)  # b.1's release acknowledged to 2, the table says 3.5
    assert rules(verdict(h, final)) == ["acks_hold"]


def test_at_least_is_kept_by_the_release_and_by_the_next_grant() -> None:
    h = History()
    h.grant("n", "a.1", 1, 0, 10, at_least_ms=5000)
    h.release("n", "a.1", 1, 1)  # released to 1 s, inside the 5 s at-least window
    assert rules(verdict(h)) == ["at_least"]
    h = History()
    h.grant("n", "a.1", 1, 0, 1, at_least_ms=3000)
    h.grant("n", "b.1", 2, 2, 4)
    assert rules(verdict(h)) == ["at_least"]


def test_a_slot_is_completed_at_most_once() -> None:
    h = History()
    h.grant("s", "a.1", 1, 0, 2, slot="tick-1")
    h.release("s", "a.1", 1, 1, slot="tick-1", completed=True)
    h.grant("s", "b.1", 2, 1.5, 3.5, slot="tick-1")  # granted after the slot was completed
    h.release("s", "b.1", 2, 2, slot="tick-1", completed=True)
    assert rules(verdict(h)) == ["slot_once", "slot_once"]


def test_only_503_with_retry_after() -> None:
    h = History()
    h.op("acquire", "n", "a.1", {}, 503, {}, retry_after="1")
    assert verdict(h).ok
    h.op("acquire", "n", "b.1", {}, 503, {})
    h.op("acquire", "n", "c.1", {}, 500, {"text": "Internal Server Error"})
    assert rules(verdict(h)) == ["only_503", "only_503"]


def test_no_row_is_deleted() -> None:
    h = two_leases()
    final = consistent_final(h.ops)
    del final.rows["n"]
    assert rules(verdict(h, final)) == ["no_row_deleted"]


def test_one_run_per_grant_with_the_right_outcome() -> None:
    h = two_leases()
    final = consistent_final(h.ops)
    final.runs[1]["outcome"] = "taken_over"  # b.1 was released while live
    assert rules(verdict(h, final)) == ["runs"]
    final = consistent_final(h.ops)
    final.runs.pop(0)
    assert rules(verdict(h, final)) == ["runs"]
    final = consistent_final(h.ops)
    final.runs.append(
        {"name": "n", "fencing_token": 3, "acquired_at": at(5), "lock_until": at(7), "outcome": "expired"}
    )
    v = verdict(h, final)
    assert v.ok and v.orphan_runs == 1  # a grant nobody was told of (an unanswered acquire): counted, allowed


def test_every_name_is_acquired_soon_after_the_heal() -> None:
    h = two_leases()
    probes = History()
    probes.clock = 10.0
    probes.op("acquire", "n", "probe.n", {}, 409, {"error": {"code": "lock_held"}})
    probes.grant("n", "probe.n", 3, 9, 11)
    assert check(h.ops, consistent_final(h.ops + probes.ops), probes.ops, 9.0, 3.0).ok
    assert rules(check(h.ops, consistent_final(h.ops + probes.ops), probes.ops, 5.0, 3.0)) == ["recovers"]


def test_a_release_in_lock_untils_millisecond_may_end_the_run_either_way() -> None:
    # The API truncates times to milliseconds: a release whose db_time equals lock_until may have come just after it.
    for outcome in ("released", "expired"):
        h = History()
        h.grant("n", "a.1", 1, 0, 2)
        h.release("n", "a.1", 2, 2)
        final = consistent_final(h.ops)
        final.runs[0]["outcome"] = outcome
        assert verdict(h, final).ok, outcome
    final.runs[0]["outcome"] = "taken_over"
    assert rules(verdict(h, final)) == ["runs"]
