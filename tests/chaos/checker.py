"""The checker: pure functions over the history and the final reads, each rule returning its violations.

Rules (docs/reliability.md says why each is a promise):

- ``no_overlap``: per name, the live leases never overlap on the database's clock, neither as the participants saw
  them nor as the run history has them;
- ``fencing``: fencing tokens strictly increase with each grant of a name (Java's included) and are never reused;
- ``acks_hold``: every acknowledged release and extend is what the table shows afterwards (later refusals of other
  callers, the run history, the final table);
- ``at_least``: ``lock_at_least_for`` is kept;
- ``slot_once``: a slot is completed at most once, and never granted after it was completed;
- ``only_503``: no 5xx but 503, and each 503 carries Retry-After;
- ``no_row_deleted``: every name ever granted still has its row;
- ``runs``: the run history has one run per grant, with the outcome the history implies;
- ``recovers``: after the faults heal, every name is acquired again within ``lock_at_most_for`` + 1 s.

A violation carries the few operations that show it: the shortest excerpt of the history that proves it.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tests.chaos.grants import Grant, by_name, grants_of
from tests.chaos.history import Op, db_time, to_api_time


@dataclass(frozen=True)
class Violation:
    rule: str
    name: str
    message: str
    ops: tuple[Op, ...] = ()

    def describe(self) -> str:
        lines = [f"VIOLATION {self.rule} on {self.name}: {self.message}"]
        lines += [f"    {op.describe()}" for op in self.ops]
        return "\n".join(lines)


@dataclass
class Final:
    """What the campaign read once the faults had healed: the table's rows (as dicts of the table's columns, times
    in the API's format) and the run history (GET /v1/runs items)."""

    rows: dict[str, dict[str, Any]]
    runs: list[dict[str, Any]]


@dataclass
class Verdict:
    violations: list[Violation]
    grants: list[Grant]
    outlived: list[Grant] = field(default_factory=list)
    orphan_runs: int = 0

    @property
    def ok(self) -> bool:
        return not self.violations


def _ops_of(*grants: Grant) -> tuple[Op, ...]:
    return tuple(op for g in grants for op in g.ops)


def no_overlap(grants: list[Grant]) -> list[Violation]:
    found = []
    for name, ordered in by_name(grants).items():
        holder: Grant | None = None  # the grant whose lease reaches furthest so far
        for grant in ordered:
            if holder is not None and grant.locked_at < holder.until:
                message = (
                    f"fencing {grant.fencing_token} granted at {to_api_time(grant.locked_at)} while fencing "
                    f"{holder.fencing_token} held it until {to_api_time(holder.until)}"
                )
                found.append(Violation("no_overlap", name, message, _ops_of(holder, grant)))
            if holder is None or grant.until > holder.until:
                holder = grant
    return found


def runs_do_not_overlap(runs: list[dict[str, Any]]) -> list[Violation]:
    found = []
    per_name: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for run in runs:
        per_name[run["name"]].append(run)
    for name, items in per_name.items():
        items.sort(key=lambda r: r["fencing_token"])
        for before, after in itertools.pairwise(items):
            if _t(after["acquired_at"]) < _t(before["lock_until"]):
                message = f"the run history has run {after} starting inside run {before}"
                found.append(Violation("no_overlap", name, message))
    return found


def fencing(grants: list[Grant]) -> list[Violation]:
    found = []
    seen: dict[int, Grant] = {}
    for grant in grants:
        if grant.fencing_token in seen:
            other = seen[grant.fencing_token]
            found.append(
                Violation("fencing", grant.name, f"fencing {grant.fencing_token} granted twice", _ops_of(other, grant))
            )
        seen[grant.fencing_token] = grant
    for name, ordered in by_name(grants).items():
        for before, after in itertools.pairwise(ordered):
            if after.locked_at > before.locked_at and after.fencing_token <= before.fencing_token:
                message = f"fencing went from {before.fencing_token} to {after.fencing_token}"
                found.append(Violation("fencing", name, message, _ops_of(before, after)))
    return found


def _t(text: str) -> datetime:
    value = db_time(text)
    assert value is not None
    return value


def _held_answers(ops: list[Op]) -> list[Op]:
    return [op for op in ops if op.kind == "acquire" and op.status == 409 and op.error_code == "lock_held"]


def acks_hold(grants: list[Grant], ops: list[Op], final: Final) -> list[Violation]:
    """Acknowledged releases and extends, against what was seen of the row afterwards."""
    found = []
    by_holder = {(g.name, g.locked_by, to_api_time(g.locked_at)): g for g in grants}
    for op in _held_answers(ops):
        error = (op.body or {})["error"]
        grant = by_holder.get((op.name, error.get("locked_by"), error.get("locked_at")))
        if grant is None:
            continue  # a lease granted to nobody (an unanswered acquire), or a holder outside the history
        seen_until = _t(error["lock_until"])
        if grant.release is not None and grant.release.t1 < op.t0:
            if seen_until != grant.released_until:
                message = f"released with lock_until {grant.release.body}, later refused with {error}"
                found.append(Violation("acks_hold", op.name, message, (*_ops_of(grant), op)))
            continue
        extended = [e for e in grant.extends if e.t1 < op.t0]
        sent = grant.release_sent
        if (
            extended
            and (sent is None or sent.t0 > op.t1)
            and seen_until < max(_t((e.body or {})["lock_until"]) for e in extended)
        ):
            message = f"extended, then a refusal showed an earlier lock_until: {error}"
            found.append(Violation("acks_hold", op.name, message, (*_ops_of(grant), op)))
    runs = {run["fencing_token"]: run for run in final.runs}
    for grant in grants:
        run = runs.get(grant.fencing_token)
        row = final.rows.get(grant.name)
        current = row is not None and row["fencing_token"] == grant.fencing_token
        # A late release (after lock_until) sets the row's lock_until to its now; the run keeps the lease's own.
        kept = run is not None and not grant.late and not grant.borderline
        shown = [(f"run {run}", run["lock_until"])] if kept and run is not None else []
        shown += [(f"final row {row}", row["lock_until"])] if current and row is not None else []
        for what, lock_until in shown:
            if grant.released_until is not None and _t(lock_until) != grant.released_until:
                found.append(Violation("acks_hold", grant.name, f"acknowledged release, but {what}", _ops_of(grant)))
            last = grant.last_extended_until
            if grant.release_sent is None and last is not None and _t(lock_until) < last:
                found.append(Violation("acks_hold", grant.name, f"acknowledged extend, but {what}", _ops_of(grant)))
    return found


def at_least(grants: list[Grant]) -> list[Violation]:
    found = []
    for grant in grants:
        if grant.released_until is not None and grant.released_until < grant.locked_at + grant.at_least:
            message = f"released to {grant.released_until} before locked_at + lock_at_least_for"
            found.append(Violation("at_least", grant.name, message, _ops_of(grant)))
    for name, ordered in by_name(grants).items():
        for before, after in itertools.pairwise(ordered):
            if after.locked_at < before.locked_at + before.at_least:
                message = f"granted again at {to_api_time(after.locked_at)}, inside the at-least window"
                found.append(Violation("at_least", name, message, _ops_of(before, after)))
    return found


def slot_once(ops: list[Op]) -> list[Violation]:
    found = []
    completed: dict[tuple[str, str], Op] = {}
    for op in sorted(ops, key=lambda o: o.t0):
        body = op.body or {}
        if op.kind == "acquire" and op.ok and body.get("slot") is not None:
            done = completed.get((op.name, body["slot"]))
            if done is not None and done.t1 < op.t0:
                found.append(
                    Violation("slot_once", op.name, f"slot {body['slot']} granted after completion", (done, op))
                )
        if op.kind == "release" and op.ok and body.get("completed") and body.get("slot") is not None:
            key = (op.name, body["slot"])
            if key in completed:
                found.append(Violation("slot_once", op.name, f"slot {key[1]} completed twice", (completed[key], op)))
            completed.setdefault(key, op)
    return found


def only_503(ops: list[Op]) -> list[Violation]:
    return [
        Violation("only_503", op.name, f"answered {op.status} (Retry-After {op.retry_after})", (op,))
        for op in ops
        if op.status is not None and op.status >= 500 and (op.status != 503 or not op.retry_after)
    ]


def no_row_deleted(grants: list[Grant], final: Final) -> list[Violation]:
    gone = sorted({g.name for g in grants} - set(final.rows))
    return [Violation("no_row_deleted", name, "granted, but the table has no row for it") for name in gone]


def runs_match(grants: list[Grant], final: Final) -> tuple[list[Violation], int]:
    """One run per grant with the right outcome; returns the violations and how many runs no answer showed (grants
    to nobody: an acquire that got no answer or a 503, which the caller must treat as unknown)."""
    found = []
    runs: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for run in final.runs:
        runs[run["fencing_token"]].append(run)
    for grant in grants:
        mine = runs.get(grant.fencing_token, [])
        if len(mine) != 1 or mine[0]["name"] != grant.name or mine[0]["acquired_at"] != to_api_time(grant.locked_at):
            found.append(Violation("runs", grant.name, f"expected one run for the grant, found {mine}", _ops_of(grant)))
            continue
        outcome = mine[0]["outcome"]
        if grant.release is not None and (grant.unknown_extends or grant.borderline):
            # An unanswered extend may have made a late release timely; a release in lock_until's millisecond may be
            # either.
            expected = {"expired", "released"}
        elif grant.release is not None:
            expected = {"expired"} if grant.late else {"released"}
        elif grant.release_sent is None:
            expected = {"running", "expired", "taken_over"}
        else:
            continue  # an unanswered release: either outcome is right
        if outcome not in expected:
            message = f"run outcome {outcome}, expected one of {sorted(expected)}"
            found.append(Violation("runs", grant.name, message, _ops_of(grant)))
    known = {g.fencing_token for g in grants}
    return found, sum(1 for token in runs if token not in known)


def recovers(probes: list[Op], healed_at: float, bound: float) -> list[Violation]:
    """``probes``: the acquires sent after the heal, per name, until one was granted."""
    found = []
    per_name: dict[str, list[Op]] = defaultdict(list)
    for op in probes:
        per_name[op.name].append(op)
    for name, ops in per_name.items():
        granted = [op for op in ops if op.ok]
        if not granted or granted[0].t1 - healed_at > bound:
            took = f"{granted[0].t1 - healed_at:.2f} s" if granted else "never"
            found.append(
                Violation("recovers", name, f"acquired {took} after the heal (bound {bound:.2f} s)", (ops[-1],))
            )
    return found


def check(ops: list[Op], final: Final, probes: list[Op], healed_at: float, bound: float) -> Verdict:
    """Every rule over one campaign's history."""
    grants = grants_of(ops + probes)
    everything = ops + probes
    run_violations, orphans = runs_match(grants, final)
    violations = [
        *no_overlap(grants),
        *runs_do_not_overlap(final.runs),
        *fencing(grants),
        *acks_hold(grants, everything, final),
        *at_least(grants),
        *slot_once(everything),
        *only_503(everything),
        *no_row_deleted(grants, final),
        *run_violations,
        *recovers(probes, healed_at, bound),
    ]
    return Verdict(violations, grants, [g for g in grants if g.outlived], orphans)
