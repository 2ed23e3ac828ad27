"""A fresh read: a table as its current snapshot plus what its stream holds past it.

Every commit of the raw table records, with its data, the last committed sequence number
of each shard (``kinesis-lake.positions``). So "the table now, with the records no commit
holds yet" is exact: the snapshot, then each shard read straight from Kinesis after its
committed position (a shard without one from where ingestion starts it), up to the tip.
What the table records of ingestion's reads (:func:`~kinesis_lake.pipeline.earlier_reads.
earlier_reads`: each shard's last read to its tip) is loaded with the positions and used
as ingestion uses it: a shard quiet since a read to its tip after the trim horizon is no
alarm, and with ``latest`` a shard no record of which was committed starts at that read
(none is on record: the shard is left out, since nothing says where ingestion starts it).
The tail goes through the pipeline's own code: the Spark source's rows
(:func:`~kinesis_lake.spark.kinesis.arrow.records_to_arrow`), the declaration's routing
and parsing (:func:`~kinesis_lake.events.parse.route_events`) and its dedup rule (first
occurrence of a key and UTC day, in Kinesis order, wins), so a row shows once whether it
is committed or not, and as the pipeline will commit it. Its columns are the table's as
that commit leaves them: the pipeline evolves a table to the declaration (the code's
schema, for raw) before it writes, and the read applies the same evolution
(:func:`~kinesis_lake.iceberg.tables.evolved_schema`) without committing it, so a field
just declared or widened reads as it will be. No Spark session, no Dagster.

A routed table is behind raw as well as behind the stream: its fresh read is its
snapshot, the raw rows committed since the raw snapshot it caught up to, and the stream's
tail after raw's positions, routed together as one derive pass would route them.

Consistency with commits racing the read: the table's metadata is loaded once, before the
stream is read (:func:`fresh_base`), and its snapshot, positions and caught-up point come
from that one load (the positions are a table property written in the same commit as the
data). A commit landing afterwards changes nothing the read uses: its rows are read from
the stream instead, once. A routed table is loaded before raw, so raw is at or past the
point the routed table caught up to.

Bounded: the tail read stops at ``TailLimits.max_records`` Kinesis records over all
shards, a shard whose oldest uncommitted record is older than ``max_age_s`` is not read
(the pipeline is that far behind: the read would not be "fresh" but a backfill), and a
child shard waits for its parents as the Spark source does. Whatever is not read is
named in ``FreshRead.left_out``: the result is then the table as it will be once the
pipeline has committed what was read, never a table with a gap.

The tail's reading is :mod:`kinesis_lake.pipeline.fresh_tail`; this module assembles it
with the snapshots.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TypedDict

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.table import Table

from kinesis_lake.config import Settings
from kinesis_lake.errors import TableError
from kinesis_lake.events import columns as C
from kinesis_lake.events.declaration import LakeDeclaration
from kinesis_lake.events.declaration_file import load_declaration
from kinesis_lake.events.derived_tables import ORDER_COLUMNS, DerivedTable
from kinesis_lake.events.parse import route_events
from kinesis_lake.events.tables import parsed_arrow_schema, parsed_table_schema
from kinesis_lake.iceberg.arrow_schema import conform_batch, table_arrow_schema
from kinesis_lake.iceberg.filters import any_of
from kinesis_lake.iceberg.incremental import appended_since, caught_up_snapshot_id, read_files
from kinesis_lake.iceberg.raw_table import RAW_SCHEMA
from kinesis_lake.iceberg.summary import committed_positions
from kinesis_lake.iceberg.tables import evolved_schema
from kinesis_lake.kinesis.client import KinesisClient, kinesis_client
from kinesis_lake.pipeline.earlier_reads import earlier_reads
from kinesis_lake.pipeline.fresh_memo import files_appended_since, routed_raw_files
from kinesis_lake.pipeline.fresh_tail import (
    DEFAULT_LIMITS,
    RAW_STAMPS,
    LeftOut,
    Tail,
    TailLimits,
    raw_arrow_schema,
    read_tail,
    relaxed,
)
from kinesis_lake.pipeline.fresh_upsert import upsert_winners
from kinesis_lake.pipeline.lake import declared_stream, lake_streams, load_table, open_lake

RAW, ROUTED = "raw", "routed"

# Columns the pipeline stamps when it commits a row: a row still in the stream has none
# yet, and reads as null there (which also tells the two kinds of row apart).
_ROUTED_STAMPS = (C.PARSED_AT,)
_DAY_MICROS = 86_400_000_000


class FreshReadNotOffered(TableError):
    """A table a fresh read does not cover (yet); the message says which ones it does."""


@dataclass(frozen=True)
class SnapshotRows:
    """A table's snapshot as a fresh read takes it, not yet read: ``table`` at
    ``snapshot_id`` in ``schema``, without the rows whose ``key`` is one of ``replaced``
    (an upsert table's keys that the fresh rows decide again).

    Kept unread so that the reader can be chosen: :meth:`read` on the driver for the Python
    API and ``query --fresh``, one executor task per data file for the Spark reader
    (:mod:`kinesis_lake.pipeline.fresh_spark`), whose snapshot may be any size.
    """

    table: Table | None
    snapshot_id: int | None
    schema: pa.Schema
    key: str | None = None
    replaced: pa.Array | None = None

    @property
    def row_filter(self) -> pc.Expression | None:
        """The rows kept (a null key is never replaced); None: all of them."""
        if self.key is None or self.replaced is None or len(self.replaced) == 0:
            return None
        return ~pc.field(self.key).isin(self.replaced)

    def read(self) -> pa.Table:
        """The rows, read here."""
        if self.table is None or self.snapshot_id is None:
            return self.schema.empty_table()
        rows = self.table.scan(snapshot_id=self.snapshot_id).to_arrow()
        if self.row_filter is not None:
            rows = rows.filter(self.row_filter)
        return _conformed(rows, self.schema)


@dataclass
class FreshRead:
    """A fresh read's rows and what they are made of: the snapshot's rows (unread until
    :attr:`table` is asked for) and the ``fresh`` rows no snapshot of the table holds."""

    snapshot: SnapshotRows
    fresh: pa.Table
    rows_from_raw: int
    """A routed table's rows from raw rows committed after the raw snapshot it caught up
    to (0 for a raw table)."""
    rows_from_tail: int
    """Rows from records read from the stream (committed nowhere yet)."""
    tail_records: int
    """User records read from the stream (after KPL de-aggregation)."""
    shards_read: int
    left_out: list[LeftOut] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    shards_subscribed: int = 0
    """Shards read through the fresh reads' enhanced fan-out consumer (the rest polled)."""
    polled_while_held: list[str] = field(default_factory=list)
    """Shards polled although a fresh consumer is configured: their subscription was refused
    as in use (Kinesis allows one per consumer and shard every 5 s)."""

    @property
    def snapshot_id(self) -> int | None:
        return self.snapshot.snapshot_id

    @cached_property
    def table(self) -> pa.Table:
        """Every row, the snapshot's read on this process."""
        return pa.concat_tables([self.snapshot.read(), self.fresh])

    @property
    def rows_from_snapshot(self) -> int:
        """Rows taken from the snapshot (reads it here, once)."""
        return self.table.num_rows - self.fresh.num_rows

    @property
    def tail_truncated(self) -> bool:
        """Whether the stream held records past the committed positions that this read
        left out (the pipeline is further behind than the limits take)."""
        return bool(self.left_out)

    def describe(self, name: str) -> str:
        """One line for people: where the rows came from and what was left out. The
        snapshot's rows are counted only if this process read them."""
        snapshot = f"snapshot {self.snapshot_id}"
        read_here = "table" in self.__dict__
        parts = [f"{self.rows_from_snapshot} rows from {snapshot}" if read_here else snapshot]
        if self.rows_from_raw:
            parts.append(f"{self.rows_from_raw} from raw not yet derived")
        fanned_out = (
            f", {self.shards_subscribed} by enhanced fan-out" if self.shards_subscribed else ""
        )
        parts.append(
            f"{self.rows_from_tail} from the stream's tail "
            f"({self.tail_records} records, {self.shards_read} shards read{fanned_out})"
        )
        line = f"{name}: " + ", ".join(parts)
        if self.left_out:
            shown = "; ".join(
                f"{o.shard_id} after {o.after_sequence_number or 'its start'}: {o.reason}"
                for o in self.left_out
            )
            line += f"; tail truncated, left out: {shown}"
        if self.polled_while_held:
            line += (
                f"; polled {', '.join(self.polled_while_held)}: a subscription was refused "
                "as in use (the fresh reads' consumer holds one per shard, 5 s at least)"
            )
        return line


@dataclass(frozen=True)
class FreshBase:
    """What a fresh read is based on, loaded once: the table, its raw table and the
    committed positions, all from metadata (no data file read yet). An upsert table's
    base is its source's, with ``upsert`` set."""

    name: str
    kind: str
    stream: Settings
    table: Table | None
    raw: Table | None
    positions: dict[str, str]
    tips: dict[str, int]
    """Each shard's last read to its tip by ingestion (server ms), as the raw table
    records it: loaded with ``positions``, so never newer than the data it vouches for."""
    declaration: LakeDeclaration
    upsert: UpsertBase | None = None


@dataclass(frozen=True)
class UpsertBase:
    """An upsert table and its tombstones, loaded before its source (a routed table)."""

    spec: DerivedTable
    table: Table | None
    tombstones: Table | None


def fresh_read(
    settings: Settings,
    name: str,
    *,
    limits: TailLimits = DEFAULT_LIMITS,
    client: KinesisClient | None = None,
) -> FreshRead:
    """Table ``name`` (short name: a raw or routed table) read fresh; see the module."""
    return read_fresh(fresh_base(settings, name), limits=limits, client=client)


def fresh_base(settings: Settings, name: str) -> FreshBase:
    """Load what a fresh read of ``name`` stands on (each table before the tables it is
    computed from: an upsert table, its tombstones, its routed source, raw).

    Raises:
        FreshReadNotOffered: ``name`` is neither a raw, routed nor upsert table (over a
            routed table) of the lake.
    """
    declaration = load_declaration(settings.event_schema_path)
    catalog = open_lake(settings)
    streams = lake_streams(settings, declaration)
    spec = next((d for d in declaration.derived if d.name == name), None)
    if spec is not None and spec.upsert is not None and spec.source in declaration.names:
        upsert = UpsertBase(
            spec,
            load_table(catalog, settings.table_identifier(name)),
            load_table(catalog, settings.table_identifier(spec.tombstones)),
        )
        return replace(fresh_base(settings, spec.source), upsert=upsert)
    for stream in streams:
        if name == stream.raw_table_name:
            raw = load_table(catalog, stream.raw_table)
            positions, tips = _recorded(raw)
            return FreshBase(name, RAW, stream, raw, raw, positions, tips, declaration)
    if name in declaration.names:
        owner = declaration.table(name).stream
        stream = next(s for s in streams if declared_stream(s, declaration) == owner)
        table = load_table(catalog, settings.table_identifier(name))
        raw = load_table(catalog, stream.raw_table)
        positions, tips = _recorded(raw)
        part = declaration.for_stream(owner)
        return FreshBase(name, ROUTED, stream, table, raw, positions, tips, part)
    upserts = [d.name for d in declaration.derived if d.upsert is not None]
    offered = [s.raw_table_name for s in streams] + declaration.names + upserts
    raise FreshReadNotOffered(
        f"A fresh read is not offered for {name!r}: it reads raw, routed and upsert tables "
        f"({', '.join(offered)}). SQL, quarantine and aggregate tables are computed over "
        "whole inputs; read them without --fresh, or read their inputs fresh."
    )


def _recorded(raw: Table | None) -> tuple[dict[str, str], dict[str, int]]:
    """The committed positions and the reads to the tip ``raw`` records (none: empty)."""
    if raw is None:
        return {}, {}
    return committed_positions(raw), earlier_reads(raw).tip_ms


def read_fresh(
    base: FreshBase,
    *,
    limits: TailLimits = DEFAULT_LIMITS,
    client: KinesisClient | None = None,
    now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
) -> FreshRead:
    """The table ``base`` stands on, plus its stream's tail as it is now."""
    stream = base.stream
    kinesis = client or kinesis_client(stream.endpoint_url, stream.region)
    tail = read_tail(kinesis, stream, base.positions, base.tips, limits, now_ms())
    if base.kind == RAW:
        return _fresh_raw(base, tail)
    routed = _fresh_routed(base, tail)
    return routed if base.upsert is None else _fresh_upsert(base, base.upsert, routed)


def _snapshot(table: Table | None, schema: pa.Schema) -> SnapshotRows:
    current = table.current_snapshot() if table is not None else None
    return SnapshotRows(table, current.snapshot_id if current is not None else None, schema)


def _rows_with_keys(snapshot: SnapshotRows, key: str, keys: pa.Array) -> pa.Table:
    """The snapshot's rows whose ``key`` is one of ``keys``: a filtered scan, so the
    driver reads only the files whose statistics can hold them, not the whole table."""
    if snapshot.table is None or snapshot.snapshot_id is None:
        return snapshot.schema.empty_table()
    values = [value for value in keys.unique().to_pylist() if value is not None]
    rows = snapshot.table.scan(row_filter=any_of(key, values), snapshot_id=snapshot.snapshot_id)
    return _conformed(rows.to_arrow(), snapshot.schema)


def _conformed(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    """``rows`` in ``schema``, columns it lacks read as null: a scan reads a snapshot in
    its own schema, and the table may have gained columns since (derived simulation seed
    5301: a selection by name raised KeyError). Columns ``schema`` lacks are left out."""
    kept = rows.select([name for name in rows.schema.names if name in schema.names])
    return pa.Table.from_batches([conform_batch(b, schema) for b in kept.to_batches()], schema)


def _fresh_raw(base: FreshBase, tail: Tail) -> FreshRead:
    # As ingestion leaves the table: it evolves it to the code's schema before it commits.
    schema = (
        relaxed(table_arrow_schema(evolved_schema(base.table, RAW_SCHEMA)), RAW_STAMPS)
        if base.table is not None
        else raw_arrow_schema()
    )
    fresh = _conformed(tail.rows, schema)
    return FreshRead(
        snapshot=_snapshot(base.table, schema),
        fresh=fresh,
        rows_from_raw=0,
        rows_from_tail=fresh.num_rows,
        tail_records=fresh.num_rows,
        **_how_read(tail),
    )


class _HowRead(TypedDict):
    shards_read: int
    left_out: list[LeftOut]
    warnings: list[str]
    shards_subscribed: int
    polled_while_held: list[str]


def _how_read(tail: Tail) -> _HowRead:
    """What a fresh read reports of its tail's reading, whatever the table."""
    return {
        "shards_read": tail.shards_read,
        "left_out": tail.left_out,
        "warnings": tail.warnings,
        "shards_subscribed": tail.subscribed,
        "polled_while_held": tail.polled_while_held,
    }


def _fresh_routed(base: FreshBase, tail: Tail) -> FreshRead:
    declared = base.declaration.table(base.name)
    # The table as the next refresh leaves it: it evolves the table to the declaration
    # before it writes, so a field just declared is a column of every row already
    # (null in the committed ones), and a widened type is the wider one.
    schema = relaxed(
        table_arrow_schema(evolved_schema(base.table, parsed_table_schema(declared.schema)))
        if base.table is not None
        else parsed_arrow_schema(declared.schema),
        _ROUTED_STAMPS,
    )
    snapshot = _snapshot(base.table, schema)
    pending = _raw_not_derived(base, tail.rows.schema)
    rows = pa.concat_tables([pending, route_events(tail.rows, base.declaration).tables[base.name]])
    rows = rows.set_column(
        rows.schema.get_field_index(C.PARSED_AT),
        C.PARSED_AT,
        pa.nulls(rows.num_rows, rows.schema.field(C.PARSED_AT).type),
    )
    key = declared.schema.event_key
    if key is not None:
        rows = first_occurrences(rows, _rows_with_keys(snapshot, key, rows.column(key)), key)
    rows = _conformed(rows, schema)
    from_raw = pc.is_in(_identities(rows), value_set=_identities(pending))
    taken_from_raw = int(pc.sum(from_raw).as_py() or 0)
    return FreshRead(
        snapshot=snapshot,
        fresh=rows,
        rows_from_raw=taken_from_raw,
        rows_from_tail=rows.num_rows - taken_from_raw,
        tail_records=tail.rows.num_rows,
        **_how_read(tail),
    )


def _fresh_upsert(base: FreshBase, upsert: UpsertBase, source: FreshRead) -> FreshRead:
    """The upsert table with the source's rows it has not merged merged in: the rows its
    source committed since the upsert caught up, and the source's fresh rows. Only the
    keys those rows touch are decided again, so only their rows of the table and of its
    tombstones are read here; the rest of the table is the snapshot, left for the reader."""
    spec = upsert.spec.upsert
    assert spec is not None
    schema = source.fresh.schema
    done = (
        caught_up_snapshot_id(base.table, upsert.table)
        if base.table is not None and upsert.table is not None
        else None
    )
    not_merged = (
        read_files(base.table, appended_since(base.table, done).files)
        if base.table is not None
        else schema.empty_table()
    )
    new_rows = pa.concat_tables([_conformed(not_merged, schema), source.fresh])
    touched = pc.drop_null(new_rows.column(spec.key)).unique()
    table = _snapshot(upsert.table, schema)
    tombstones = (
        _rows_with_keys(
            _snapshot(upsert.tombstones, table_arrow_schema(upsert.tombstones.schema())),
            spec.key,
            touched,
        )
        if upsert.tombstones is not None
        else schema.empty_table().select([spec.key, spec.version, *ORDER_COLUMNS])
    )
    held = _rows_with_keys(table, spec.key, touched)
    winners = upsert_winners(held, tombstones, new_rows, spec)
    # What the source read (raw, tail, shards, what was left out) is what this read read.
    return replace(source, snapshot=replace(table, key=spec.key, replaced=touched), fresh=winners)


def _raw_not_derived(base: FreshBase, tail_schema: pa.Schema) -> pa.Table:
    """The table's rows routed from raw rows committed after the raw snapshot it caught up
    to (routed once per process: :mod:`~kinesis_lake.pipeline.fresh_memo`)."""
    files: tuple[str, ...] = ()
    if base.raw is not None:
        done = caught_up_snapshot_id(base.raw, base.table) if base.table is not None else None
        files = files_appended_since(base.raw, done)
    return routed_raw_files(base.raw, files, base.declaration, base.name, tail_schema)


def _identities(rows: pa.Table) -> pa.Array:
    """One string per row naming its Kinesis record, for membership tests."""
    parts = [rows.column(name).cast(pa.string()) for name in C.IDENTITY_COLUMNS]
    return pc.binary_join_element_wise(*parts, "\x1f").combine_chunks()


def first_occurrences(rows: pa.Table, committed: pa.Table, key: str) -> pa.Table:
    """The rows that are the first occurrence of their key and UTC day of event time:
    none of the committed rows has it, and no row before it in Kinesis order (shard, then
    sequence number as an integer, then sub-sequence) does. The pipeline's rule
    (``pipeline.dedup.deduplicate``: a window over key and day, then a join with the
    table's rows, which no null key matches), which sends the others to quarantine."""
    keys, days = rows.column(key).to_pylist(), _days(rows)
    seen = {
        mark
        for mark in zip(committed.column(key).to_pylist(), _days(committed), strict=True)
        if mark[0] is not None
    }
    shards = rows.column(C.SHARD_ID).to_pylist()
    sequences = [int(s) for s in rows.column(C.SEQUENCE_NUMBER).to_pylist()]
    subs = rows.column(C.SUB_SEQUENCE_NUMBER).to_pylist()
    kept: list[int] = []
    for row in sorted(range(rows.num_rows), key=lambda r: (shards[r], sequences[r], subs[r])):
        mark = (keys[row], days[row])
        if mark not in seen:
            seen.add(mark)
            kept.append(row)
    return rows.take(pa.array(sorted(kept), pa.int64()))


def _days(rows: pa.Table) -> list[int]:
    micros = rows.column(C.EVENT_TIMESTAMP).cast(pa.int64()).to_pylist()
    return [value // _DAY_MICROS for value in micros]
