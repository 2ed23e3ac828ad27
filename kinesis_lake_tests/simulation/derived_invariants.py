"""The derived-table simulation's reference model (kept in plain Python from what was put) and
the invariants that hold the lake against it after every step (see ``derived``)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import duckdb

from kinesis_lake.config import Settings
from kinesis_lake.pipeline.fresh_read import fresh_read
from kinesis_lake.pipeline.lake import open_lake
from kinesis_lake_tests.pipeline.fresh_helpers import comparable
from kinesis_lake_tests.pipeline_helpers import reconciliation
from kinesis_lake_tests.simulation.derived_schedules import (
    INT_MAX,
    RAW,
    ROUTED,
    WINDOWED_SQL,
    show_record,
)


@dataclass
class Model:
    """What each table must hold, kept from what was put (Kinesis order = put order)."""

    edits: set[str] = field(default_factory=set)
    put: list[tuple[str, Any]] = field(default_factory=list)  # (sequence number, record)
    ingested: int = 0  # how many of ``put`` the raw table holds
    seen: dict[str, set[str]] = field(default_factory=dict)  # table -> sequences refreshed
    holds: dict[str, list[str]] = field(default_factory=dict)  # table -> sequences held
    quarantined: dict[str, bool] = field(default_factory=dict)  # sequence -> resolved
    derived_once: set[str] = field(default_factory=set)  # sequences a refresh processed
    unsettled: bool = False  # a failure, edit or drop since the last successful derive

    def tables(self) -> tuple[str, ...]:
        return (*ROUTED, "signups") if "add_table" in self.edits else ROUTED

    def takes(self, table: str, record: Any) -> bool:
        """The route and the fields (written here from the declaration, not imported)."""
        if not isinstance(record, dict):
            return False
        wanted = {"views": "view", "updates": "profile", "signups": "signup"}[table]
        if record.get("type") != wanted:
            return False
        if table == "views":
            n = record.get("n")
            limit = 2**63 - 1 if "widen" in self.edits else INT_MAX
            return isinstance(n, int) and -limit - 1 <= n <= limit
        return True

    def key(self, table: str, record: dict) -> tuple[str, str] | None:
        return (record["id"], record["at"][:10]) if table == "views" else None

    def _place(self, table: str, sequence: str) -> bool:
        record = dict(self.put)[sequence]
        held = self.holds.setdefault(table, [])
        key = self.key(table, record)
        if key is not None and any(self.key(table, dict(self.put)[s]) == key for s in held):
            return False  # a duplicate
        held.append(sequence)
        return True

    def _raw(self) -> list[tuple[str, Any]]:
        return self.put[: self.ingested]

    def catch_up(self) -> None:
        """A table with no history (new, or dropped) fills from the whole raw table."""
        for table in self.tables():
            if table in self.seen:
                continue
            self.seen[table] = set()
            self.holds[table] = []
            for sequence, record in self._raw():
                self.seen[table].add(sequence)
                if self.takes(table, record):
                    self._place(table, sequence)

    def derive(self) -> None:
        self.catch_up()
        for sequence, record in self._raw():
            if sequence in self.derived_once:
                continue
            self.derived_once.add(sequence)
            taken = False
            for table in self.tables():
                if sequence in self.seen[table]:
                    taken |= sequence in self.holds[table]
                    continue
                self.seen[table].add(sequence)
                if self.takes(table, record):
                    taken |= self._place(table, sequence)
            if not taken:
                self.quarantined[sequence] = False

    def replay(self) -> None:
        self.catch_up()
        for sequence, resolved in list(self.quarantined.items()):
            if resolved:
                continue
            record = dict(self.put)[sequence]
            for table in self.tables():
                if not self.takes(table, record):
                    continue
                if sequence in self.holds[table] or self._place(table, sequence):
                    self.quarantined[sequence] = True

    def drop(self, table: str) -> None:
        self.seen.pop(table, None)
        self.holds.pop(table, None)

    def winners(self) -> dict[str, int]:
        best: dict[str, tuple[int, int, dict]] = {}
        records = dict(self.put)
        for position, sequence in enumerate(self.holds.get("updates", [])):
            record = records[sequence]
            if record.get("user_id") is None:
                continue
            rank = (record["version"], position, record)
            if rank[:2] > best.get(record["user_id"], (-1, -1, {}))[:2]:
                best[record["user_id"]] = rank
        return {u: r[0] for u, r in best.items() if r[2].get("op") != "delete"}


class Violation(AssertionError):
    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind


def _rows(settings: Settings, table: str) -> list[dict] | None:
    catalog = open_lake(settings)
    identifier = table_identifier(settings, table)
    if not catalog.table_exists(identifier):
        return None
    return catalog.load_table(identifier).scan().to_arrow().to_pylist()


def check(settings: Settings, model: Model, *, converged: bool) -> None:
    """The invariants; ``converged`` False (after a failure on purpose): no duplicates only."""
    tables = model.tables()
    for table in (*tables, "quarantine"):
        rows = _rows(settings, table)
        if rows is None:
            continue
        twice = [k for k, c in Counter(r["sequence_number"] for r in rows).items() if c > 1]
        if twice:
            raise Violation("record-twice", f"{table} holds {twice} more than once")
    profiles = _rows(settings, "profiles") or []
    repeated = [k for k, c in Counter(r["user_id"] for r in profiles).items() if c > 1]
    if repeated:
        raise Violation("record-twice", f"profiles holds keys {repeated} more than once")
    if not converged:
        return
    records = dict(model.put)
    tables = tuple(t for t in tables if t in model.seen)  # created and filled by a refresh
    for table in tables:
        rows = _rows(settings, table)
        expected = Counter(model.holds.get(table, []))
        actual = Counter(r["sequence_number"] for r in rows or [])
        if actual != expected:
            show = {
                s: show_record(records[s])
                for s in set(actual).symmetric_difference(expected)
                if s in records
            }
            raise Violation(
                f"routed-{table}",
                f"extra {sorted((actual - expected).elements())}, missing "
                f"{sorted((expected - actual).elements())}: {show}",
            )
    got = {r["user_id"]: r["version"] for r in profiles if r.get("user_id") is not None}
    if got != model.winners():
        raise Violation("upsert", f"profiles {got}, winners {model.winners()}")
    views = _rows(settings, "views") or []
    windowed = _rows(settings, "views_per_hour")
    if windowed is not None and views:
        connection = duckdb.connect()
        connection.register("views", _arrow(settings, "views"))
        again = {(_naive(h), c, t) for h, c, t in connection.execute(WINDOWED_SQL).fetchall()}
        have = {(_naive(r["hour"]), r["views"], r["top"]) for r in windowed}
        if have != again:
            raise Violation("sql-windowed", f"views_per_hour {sorted(have)}, SQL {sorted(again)}")
    count = _rows(settings, "profile_count")
    if count is not None and [r["profiles"] for r in count] != [len(profiles)]:
        raise Violation("sql-full", f"profile_count {count}, profiles has {len(profiles)} rows")
    report = reconciliation(settings, tables)
    if not report.passed:
        raise Violation("reconcile", str(report))


def _naive(value: datetime) -> datetime:
    return value.astimezone(UTC).replace(tzinfo=None) if value.tzinfo else value


def _arrow(settings: Settings, table: str) -> Any:
    return open_lake(settings).load_table(settings.table_identifier(table)).scan().to_arrow()


def table_identifier(settings: Settings, table: str) -> str:
    """The lake's identifier of a table the simulation names (``quarantine`` included)."""
    return settings.quarantine_table if table == "quarantine" else settings.table_identifier(table)


def fresh_reads(settings: Settings, model: Model) -> dict[str, list[tuple]]:
    """Each table a fresh read offers (raw, routed, the upsert table), read fresh now: the
    table the next ``ingest --derive`` must make, row for row (issue 36), when nothing but
    records happened since the last one (``model.unsettled`` False)."""
    offered = (RAW, *model.tables(), "profiles")
    return {name: comparable(fresh_read(settings, name).table.to_pylist()) for name in offered}


def check_fresh(settings: Settings, shown: dict[str, list[tuple]]) -> None:
    """The tables after the derive against what their fresh reads showed before it."""
    for name, fresh in shown.items():
        committed = comparable(_rows(settings, name) or [])
        if committed != fresh:
            only_fresh = sorted(set(fresh) - set(committed))[:3]
            only_committed = sorted(set(committed) - set(fresh))[:3]
            raise Violation(
                "fresh-read",
                f"{name}: the fresh read before the derive showed {len(fresh)} rows, the "
                f"table after it holds {len(committed)}; only fresh {only_fresh}, only "
                f"committed {only_committed}",
            )
