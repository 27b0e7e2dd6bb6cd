"""The lock statements, built from shared fragments: the acquire rule, the takeover and the release are written once,
so the single, batched and slotted forms cannot drift. ShedLock's statements (../shared/SHEDLOCK.md) plus leases.

Every statement runs in its own implicit transaction, with its guard in the WHERE clause; "now" is always ``NOW``,
the database's clock. Each answers its outcome and, when refused, the row as it stands, so one round trip decides
and explains. The operation's input is a relation ``i``: one row of parameters, or arrays unnested (batched).

A refused acquire only reads: a row the statement's snapshot shows held is never written, so a refusal takes no row
lock, no transaction id and no WAL, and never waits behind the holder's commit. A batch never waits on a row lock
either: it locks the rows it will write first, in name order (whatever plan Postgres chose), skipping rows another
transaction holds locked, and inserts no new name (an insert may wait on another's uncommitted insert); those
operations come back *busy* (``ok`` NULL) and their callers go alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import NamedTuple

from app.locking.leases import FORCED_MARKER_SQL
from app.locking.rows import NOW, ROW, row_of
from app.locking.slots import TICK_SQL

#: The columns an acquire writes, in its INSERT's order.
_WRITTEN = "name, lock_until, locked_at, locked_by, lease_token_hash, lock_at_least_for, slot"


class AcquireOp(NamedTuple):
    """One acquire, in the statement's parameter order (a tuple: its fields are the statement's arguments)."""

    name: str
    at_most: timedelta
    locked_by: str
    token_hash: bytes
    at_least: timedelta


class ReleaseOp(NamedTuple):
    """One release, in the statement's parameter order (a tuple: its fields are the statement's arguments)."""

    name: str
    token_hash: bytes
    marker: bytes
    completed: bool


def older(slot: str, last: str) -> str:
    """``slot`` is a tick older than ``last`` (app.locking.slots.TICK: both written as the API writes times, so
    their bytes order them; "C" so that no locale's collation does). NULL, not false, when either is NULL."""
    return f'({slot} ~ {TICK_SQL} AND {last} ~ {TICK_SQL} AND {slot} COLLATE "C" < {last} COLLATE "C")'


def free(row: str, slot: str, *, ticks: bool = False) -> str:
    """The acquire rule: ``row`` may be taken, for the slot ``slot`` (NULL: none). It is free or expired, and its
    last completed slot is not this one; with ``ticks`` (the slotted acquire), nor a tick newer than this one: a
    late trigger of an old tick never runs it after a newer one completed (docs/slots.md)."""
    done = f"{row}.last_completed_slot = {slot}"
    if ticks:
        done += f" OR {older(slot, f'{row}.last_completed_slot')}"
    return f"{row}.lock_until <= {NOW} AND ({done}) IS NOT TRUE"


@dataclass(frozen=True)
class _Operands:
    """How a statement names its operation's values: ``col`` is a value's expression (``$2::interval`` for one
    operation; ``i.at_most`` for a batch, whose arrays are the relation ``input i``); ``with_input`` is that CTE,
    ``join_input`` what reads it."""

    many: bool
    columns: tuple[str, ...]
    types: tuple[str, ...]
    slot: str = "NULL::text"

    def col(self, column: str) -> str:
        if column == "slot":
            return "i.slot" if self.many else self.slot
        if self.many:
            return f"i.{column}"
        n = self.columns.index(column)
        return f"${n + 1}::{self.types[n]}"

    @property
    def with_input(self) -> str:
        if not self.many:
            return ""
        arrays = ", ".join(f"${n}::{t}[]" for n, t in enumerate(self.types, 1))
        return f"input AS (SELECT *, {self.slot} AS slot FROM unnest({arrays}) AS u({', '.join(self.columns)})),"

    def join_input(self, alias: str) -> str:
        return f" JOIN input i ON i.name = {alias}.name" if self.many else ""

    @property
    def names(self) -> str:
        return "= ANY($1::text[])" if self.many else "= $1"


_ACQUIRE = ("name", "at_most", "locked_by", "token_hash", "at_least")
_ACQUIRE_TYPES = ("text", "interval", "text", "bytea", "interval")
_RELEASE = ("name", "token_hash", "marker", "completed")
_RELEASE_TYPES = ("text", "bytea", "bytea", "boolean")


def acquire(table: str, *, many: bool = False, slotted: bool = False) -> str:
    """Insert, or take over a free row (``free``). Answers ``ok`` true with the new lease's row, false with the
    holder's row as the snapshot saw it; a name neither taken nor seen (inserted after the snapshot) has no answer
    row. Batched, ``ok`` NULL (busy) says the operation needs a statement of its own: its row was locked by another
    transaction, or it has no row yet. So a batch never waits on a lock.

    $1 name, $2 lock_at_most_for, $3 locked_by, $4 lease hash, $5 lock_at_least_for (batched: arrays, one element per
    operation, each name at most once). Slotted (single only): $6 tick times, $7 their keys, $8 lo, $9 hi, $10 grace
    (app.locking.slots.Candidates) pick the slot with the statement's own now, and every answer carries it as
    ``picked`` (NULL: that now fell outside the window; nothing written)."""
    assert not (many and slotted), "the slotted acquire is never batched"
    o = _Operands(many, _ACQUIRE, _ACQUIRE_TYPES, "(SELECT key FROM pick)" if slotted else "NULL::text")
    pick = (
        f"""pick AS (
          SELECT (SELECT c.key FROM unnest($6::timestamp[], $7::text[]) AS c(at, key)
                  WHERE c.at <= {NOW} + $10::interval ORDER BY c.at DESC LIMIT 1) AS key
          WHERE {NOW} + $10::interval BETWEEN $8::timestamp AND $9::timestamp),"""
        if slotted
        else ""
    )
    slot = o.col("slot")
    # Batched: the rows to take over are locked first, in name order, skipping any another transaction has locked.
    # (A batch has no slot, so the rule needs no input: the rows are found by name alone.)
    claim = (
        f"""claim AS MATERIALIZED (
          SELECT c.name FROM {table} c WHERE c.name {o.names} AND {free("c", o.slot)}
          ORDER BY c.name FOR NO KEY UPDATE SKIP LOCKED),"""
        if many
        else ""
    )
    # Single: insert unless the snapshot shows the row taken (then the refusal only reads). Batched: update only the
    # rows claimed above (they exist and this statement holds them: no insert, no conflict to resolve, one trigger
    # call per row). A row seen free but not claimed is another's, and a name with no row yet is left to a statement
    # of its own (an insert may wait on another's uncommitted insert of the name): both are busy.
    insert_if = f"NOT EXISTS (SELECT FROM seen s WHERE NOT ({free('s', slot, ticks=slotted)}))"
    if slotted:
        insert_if += f" AND {slot} IS NOT NULL"
    refused = f"CASE WHEN NOT ({free('s', slot)}) THEN false END" if many else "false"
    picked = ", (SELECT key FROM pick) AS picked" if slotted else ""
    if slotted:  # the window missed: nothing taken, nothing seen, and the statement's now
        nulls = ", ".join("NULL" for _ in ROW.split(","))
        nothing_seen = f"""
        UNION ALL
        SELECT false, {nulls}, {NOW}{picked} WHERE NOT EXISTS (SELECT FROM taken) AND NOT EXISTS (SELECT FROM seen)"""
    elif many:  # a name with no row: busy
        no_row = ", ".join(["i.name", *("NULL" for _ in ROW.split(",")[1:])])
        nothing_seen = f"""
        UNION ALL
        SELECT NULL, {no_row}, {NOW} FROM input i WHERE NOT EXISTS (SELECT FROM seen s WHERE s.name = i.name)"""
    else:
        nothing_seen = ""
    at_most, at_least = f"{NOW} + {o.col('at_most')}", o.col("at_least")
    values = [o.col("name"), at_most, NOW, o.col("locked_by"), o.col("token_hash"), at_least, slot]
    if many:  # the claimed rows exist and are this statement's: a plain update takes them over
        assigned = ", ".join(f"{c.strip()} = {v}" for c, v in zip(_WRITTEN.split(",")[1:], values[1:], strict=True))
        take = f"""
          UPDATE {table} AS l SET {assigned}
          FROM input i
          WHERE l.name = i.name AND l.name IN (SELECT name FROM claim) AND {free("l", slot)}
          RETURNING {row_of("l")}"""
    else:
        take = f"""
          INSERT INTO {table} AS l ({_WRITTEN})
          SELECT {", ".join(values)}
          WHERE {insert_if}
          ON CONFLICT (name) DO UPDATE SET
            lock_until = EXCLUDED.lock_until, locked_at = EXCLUDED.locked_at, locked_by = EXCLUDED.locked_by,
            lease_token_hash = EXCLUDED.lease_token_hash, lock_at_least_for = EXCLUDED.lock_at_least_for,
            slot = EXCLUDED.slot
          WHERE {free("l", "EXCLUDED.slot", ticks=slotted)}
          RETURNING {ROW}"""
    return f"""
        WITH {pick}
        {o.with_input}
        seen AS (SELECT {ROW} FROM {table} WHERE name {o.names}),
        {claim}
        taken AS ({take})
        SELECT true AS ok, {ROW}, {NOW} AS db_time{picked} FROM taken
        UNION ALL
        SELECT {refused}, {row_of("s")}, {NOW}{picked} FROM seen s{o.join_input("s")}
        WHERE NOT EXISTS (SELECT FROM taken WHERE taken.name = s.name){nothing_seen}"""


def release(table: str, *, many: bool = False) -> str:
    """End a lease: never earlier than locked_at + lock_at_least_for; a second release with the same token changes
    nothing (the lease keeps a marker hash). The first release of a lease with a slot, if the job completed,
    records the slot (docs/slots.md). Answers ``ok`` true with the row released, false with the row when this token
    does not hold it, NULL (batched only) when another transaction had the row locked; no row: no such lock.

    $1 name, $2 the token's hash, $3 the released marker, $4 completed (arrays when batched)."""
    o = _Operands(many, _RELEASE, _RELEASE_TYPES)
    token_hash, marker = o.col("token_hash"), o.col("marker")
    # Completing never moves the name's last completed tick back: a tick older than it releases, uncompleted.
    completes = (
        f"l.lease_token_hash = {token_hash} AND {o.col('completed')} AND l.slot IS NOT NULL "
        f"AND {older('l.slot', 'l.last_completed_slot')} IS NOT TRUE"
    )
    locked = (
        f"""locked AS MATERIALIZED (
          SELECT name FROM {table} WHERE name = ANY($1::text[]) ORDER BY name FOR NO KEY UPDATE SKIP LOCKED),"""
        if many
        else ""
    )
    only_locked = " AND l.name IN (SELECT name FROM locked)" if many else ""
    refused = "CASE WHEN l.name IN (SELECT name FROM locked) THEN false END" if many else "false"
    return f"""
        WITH {o.with_input}
        {locked}
        done AS (
          UPDATE {table} AS l SET
            lock_until = CASE WHEN l.lease_token_hash = {marker} THEN l.lock_until
              ELSE GREATEST({NOW}, l.locked_at + COALESCE(l.lock_at_least_for, interval '0')) END,
            lease_token_hash = {marker},
            last_completed_slot = CASE WHEN {completes} THEN l.slot ELSE l.last_completed_slot END,
            last_completed_at = CASE WHEN {completes} THEN {NOW} ELSE l.last_completed_at END,
            last_completed_by = CASE WHEN {completes} THEN l.locked_by ELSE l.last_completed_by END
          {"FROM input i" if many else ""}
          WHERE l.name {"= i.name" if many else "= $1"}
            AND l.lease_token_hash IN ({token_hash}, {marker}){only_locked}
          RETURNING {row_of("l")})
        SELECT true AS ok, {ROW}, {NOW} AS db_time FROM done
        UNION ALL
        SELECT {refused}, {row_of("l")}, {NOW} FROM {table} l
        WHERE l.name {o.names} AND NOT EXISTS (SELECT FROM done WHERE done.name = l.name)"""


class LockStatements:
    """Every lock statement over one table (its qualified name) and its run history table, built once."""

    def __init__(self, table: str, runs: str) -> None:
        t = self.table = table
        self.acquire = acquire(t)
        self.acquire_many = acquire(t, many=True)
        self.acquire_slot = acquire(t, slotted=True)
        self.release = release(t)
        self.release_many = release(t, many=True)
        # Only a live lease moves; locked_at stays, so the at-least window still counts from the acquisition.
        self.extend = f"""
            WITH done AS (
              UPDATE {t} SET lock_until = {NOW} + $3::interval,
                lock_at_least_for = COALESCE($4::interval, lock_at_least_for)
              WHERE name = $1 AND lease_token_hash = $2 AND lock_until > {NOW}
              RETURNING {ROW})
            SELECT true AS ok, {ROW}, {NOW} AS db_time FROM done
            UNION ALL
            SELECT false, {ROW}, {NOW} FROM {t} WHERE name = $1 AND NOT EXISTS (SELECT FROM done)"""
        self.get = f"SELECT {ROW}, {NOW} AS db_time FROM {t} WHERE name = $1"
        # Free a held lock now, the at-least window ignored, and end its lease: the empty hash matches no token and
        # tells the history trigger that this statement records the run's end itself, with who and why (migration
        # 0002). The lock row is updated first, so the lock order is the one release's trigger takes.
        self.force_release = f"""
            WITH forced AS (
              UPDATE {t} SET lock_until = {NOW}, lease_token_hash = '{FORCED_MARKER_SQL}'::bytea
              WHERE name = $1 AND lock_until > {NOW}
              RETURNING {ROW}),
            ended AS (
              UPDATE {runs} r SET outcome = 'force_released', ended_at = {NOW},
                lock_until = {NOW}, forced_by = $2, force_reason = $3
              FROM forced
              WHERE r.name = forced.name AND r.fencing_token = forced.fencing_token AND r.outcome = 'running')
            SELECT true AS ok, {ROW}, {NOW} AS db_time FROM forced
            UNION ALL
            SELECT false, {ROW}, {NOW} FROM {t} WHERE name = $1 AND NOT EXISTS (SELECT FROM forced)"""
        self.count_held = f"SELECT count(*) AS n FROM {t} WHERE lock_until > {NOW}"
        self.now = f"SELECT {NOW} AS db_time"
