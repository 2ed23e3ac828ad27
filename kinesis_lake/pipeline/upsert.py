"""Upsert tables: the current row per key of a declared table, refreshed incrementally.

A refresh reads only the source files appended since the table last caught up (the same
watermark every derived table keeps), picks the latest new row per key, and merges it
with the rows the table and its tombstones already hold **for those keys only**: rows are
written sorted by key into small files, so each file covers a narrow key range and the
touched keys' files are found from the files' key bounds alone. The tables are not
partitioned: a hash partition of the key would spread every file's key range over the
whole key space.

How the replaced rows go (the table property ``write.update.mode``, Iceberg's own name):

* ``merge-on-read`` (set on every upsert table; format v2): the candidate files' key and
  ordering columns only are read, with each row's position, and the held rows that lose
  are marked deleted in ONE position delete file (merged with the table's earlier deletes,
  so a reader opens one), committed in the same snapshot as the new winners
  (:func:`kinesis_lake.iceberg.commit.commit_row_delta`). A held row that still wins stays
  where it is. Once the table holds 1,000 deleted rows, a refresh also rewrites the files
  a fifth deleted or more, the most deleted first, up to three times the rows it replaced
  or one file (:mod:`kinesis_lake.iceberg.dead_rows`), so a refresh writes a few times
  what it changed whatever the table's size, even when 1,000 uniformly spread keys touch
  every file, and deleted rows stay a small share of what a reader reads; it still reads
  the key columns of the files whose key bounds can hold a touched key (Parquet column
  projection, cheap next to a rewrite; an index beside the table would save that read but
  is one more thing to keep exactly in step with every commit and compaction). Maintenance
  folds the deletes back into data files
  (:func:`kinesis_lake.iceberg.maintenance.fold_deletes`).
* ``copy-on-write`` (Iceberg's default, so a table someone set back to it): the candidate
  files are read whole and rewritten without the replaced rows, in one commit with the
  winners.

Every reader of ours applies the deletes (pyiceberg scans, the Spark readers through
:func:`kinesis_lake.spark.iceberg.files_reader.read_planned_files`, ``kinesis-lake query``),
so both modes read the same rows (``benchmarks/upsert_refresh.py`` measures both).

"Latest" is an order on the records themselves (version, then the order Kinesis received
them: ``ORDER_COLUMNS``), so it does not matter how records were batched, replayed or
delivered out of order. A delete is a row like any other in that order, kept in the
tombstone table, so an older update that arrives after it loses to it.

Crash safety: the tombstones commit first, then the table, each under the derived
table's writer id and the source snapshot's sequence number as batch id. Merging is a
maximum, so it is idempotent: a rerun after a crash between the two commits (the
tombstones already hold the deletes) computes the same winners.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.schema import Schema
from pyiceberg.table import FileScanTask, Table
from pyiceberg.table.sorting import SortField, SortOrder
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from kinesis_lake.config import Settings
from kinesis_lake.events import columns as C
from kinesis_lake.events.derived_tables import ORDER_COLUMNS, DerivedTable, UpsertSpec
from kinesis_lake.iceberg.arrow_schema import table_arrow_schema
from kinesis_lake.iceberg.commit import commit_arrow, commit_row_delta
from kinesis_lake.iceberg.filters import any_of
from kinesis_lake.iceberg.lineage import (
    rebuild_if_source_moved_back,
    source_properties,
    source_summary,
)
from kinesis_lake.iceberg.raw_table import MERGED_MANIFESTS
from kinesis_lake.iceberg.summary import derived_writer_id
from kinesis_lake.iceberg.tables import ensure_table
from kinesis_lake.pipeline.refresh import TableRefresh, pending_slice, sequence_number
from kinesis_lake.spark.iceberg.files_reader import (
    FILE_PATH,
    POSITION,
    read_planned_files,
    read_table_files,
)

TARGET_FILE_BYTES = str(8 * 1024 * 1024)
"""Small files keep a refresh's rewrite small: it rewrites every file holding a touched key."""
_DELETED = "__deleted"
_HELD = "__held"
_RANK = "__rank"
UPDATE_MODE = "write.update.mode"
MERGE_ON_READ = "merge-on-read"


@dataclass(frozen=True)
class UpsertTables:
    table: Table
    tombstones: Table


def ensure_upsert_tables(
    catalog: Catalog, settings: Settings, spec: DerivedTable, source: Table
) -> UpsertTables:
    """The table (the source's columns) and its tombstones (key, version, order), both
    sorted by key; evolved with the source."""
    upsert = _spec(spec)
    schema = source.schema()
    properties = {"write.target-file-size-bytes": TARGET_FILE_BYTES}
    tombstone_schema = Schema(*(schema.find_field(name) for name in _tombstone_columns(upsert)))
    return UpsertTables(
        ensure_table(
            catalog,
            settings.table_identifier(spec.name),
            schema,
            sort_order=_by_key(schema, upsert.key),
            properties={**properties, **MERGED_MANIFESTS, UPDATE_MODE: MERGE_ON_READ},
        ),
        ensure_table(
            catalog,
            settings.table_identifier(spec.tombstones),
            tombstone_schema,
            sort_order=_by_key(tombstone_schema, upsert.key),
            properties=properties,
        ),
    )


def refresh_upsert(
    spark: SparkSession, spec: DerivedTable, source: Table, tables: UpsertTables
) -> TableRefresh:
    """Merge the source rows appended since the last refresh into the current state."""
    upsert = _spec(spec)
    name = ".".join(tables.table.name())
    rebuild_if_source_moved_back(source, tables.table, tables.tombstones)
    piece = pending_slice(source, tables.table)
    if not piece.files:
        return TableRefresh(name, 0, 0, 0, piece.to_snapshot_id, False)
    new_rows = read_table_files(spark, source, piece.files).where(F.col(upsert.key).isNotNull())
    newest = latest_per_key(new_rows.withColumn(_DELETED, _is_delete(upsert)), upsert)
    newest = newest.persist()
    protocol: dict[str, Any] = {
        "writer_id": derived_writer_id(source.name()[-1]),
        "batch_id": sequence_number(source, piece.to_snapshot_id),
        "summary": source_summary(source, piece.to_snapshot_id),
        "writer_properties": source_properties(source),
    }
    planned_on = _snapshot_id(tables.table)  # the state the held rows are read in
    try:
        keys = [row[0] for row in newest.select(upsert.key).collect()]
        held_dead = _held(spark, tables.tombstones, upsert.key, keys, newest, deleted=True)
        decide = _merge_on_read if merge_on_read(tables.table) else _copy_on_write
        live, dead, deletes = decide(spark, tables, upsert, keys, newest, held_dead, planned_on)
    finally:
        newest.unpersist()
    replace_keys = any_of(upsert.key, keys) if keys else None
    commit_arrow(tables.tombstones, dead, overwrite_filter=replace_keys, **protocol)
    if deletes is not None:  # the tombstones first: see the module docstring
        outcome = commit_row_delta(tables.table, live, deletes, planned_on=planned_on, **protocol)
    else:
        outcome = commit_arrow(tables.table, live, overwrite_filter=replace_keys, **protocol)
    return TableRefresh(
        name, len(piece.files), piece.rows, live.num_rows, piece.to_snapshot_id, outcome.committed
    )


_Decided = tuple[pa.Table, pa.Table, pa.Table | None]
"""The winners to append to the table, the tombstones, the held rows' positions to
delete (None: copy-on-write, which replaces every held row of the keys)."""


def _copy_on_write(
    spark: SparkSession,
    tables: UpsertTables,
    upsert: UpsertSpec,
    keys: list[object],
    newest: DataFrame,
    held_dead: DataFrame,
    planned_on: int | None,
) -> _Decided:
    held_live = _held(spark, tables.table, upsert.key, keys, newest, deleted=False)
    candidates = newest.unionByName(held_live, allowMissingColumns=True)
    winners = latest_per_key(
        candidates.unionByName(held_dead, allowMissingColumns=True), upsert
    ).persist()
    try:  # newest stays cached until the winners are computed from it
        live = _arrow(winners.where(~F.col(_DELETED)), tables.table, upsert.key)
        dead = _arrow(winners.where(F.col(_DELETED)), tables.tombstones, upsert.key)
    finally:
        winners.unpersist()
    return live, dead, None


def _merge_on_read(
    spark: SparkSession,
    tables: UpsertTables,
    upsert: UpsertSpec,
    keys: list[object],
    newest: DataFrame,
    held_dead: DataFrame,
    planned_on: int | None,
) -> _Decided:
    """Held rows are read as ordering columns and positions only; those that lose are
    deleted, a held winner stays (a tie with a new row is the same record: it stays)."""
    held = _held_positions(spark, tables.table, upsert, keys, newest, planned_on)
    candidates = newest.withColumn(_HELD, F.lit(False)).unionByName(held, allowMissingColumns=True)
    dead_candidates = held_dead.withColumn(_HELD, F.lit(False))
    ranked = _ranked(
        candidates.unionByName(dead_candidates, allowMissingColumns=True), upsert, prefer=_HELD
    ).persist()
    try:
        winners = ranked.where(F.col(_RANK) == 1)
        new_winners = winners.where(~F.col(_DELETED) & ~F.col(_HELD))
        live = _arrow(new_winners, tables.table, upsert.key)
        dead = _arrow(winners.where(F.col(_DELETED)), tables.tombstones, upsert.key)
        replaced = ranked.where(F.col(_HELD) & (F.col(_RANK) > 1)).select(FILE_PATH, POSITION)
        deletes = replaced.toDF("file_path", "pos").toArrow()
    finally:
        ranked.unpersist()
    return live, dead, deletes


def merge_on_read(table: Table) -> bool:
    """Whether a refresh of ``table`` writes position deletes (see the module docstring)."""
    mode = table.properties.get(UPDATE_MODE)
    return mode == MERGE_ON_READ and table.metadata.format_version == 2


def latest_per_key(rows: DataFrame, upsert: UpsertSpec) -> DataFrame:
    """The winning row of every key: highest version, then the later Kinesis record."""
    return _ranked(rows, upsert).where(F.col(_RANK) == 1).drop(_RANK)


def _ranked(rows: DataFrame, upsert: UpsertSpec, prefer: str | None = None) -> DataFrame:
    """``rows`` with their rank within their key (1 wins); on a full tie (the same record)
    the row whose boolean ``prefer`` column is true ranks first."""
    ties = [F.col(prefer).desc()] if prefer else []
    order = Window.partitionBy(upsert.key).orderBy(*winning_order(upsert.version), *ties)
    return rows.withColumn(_RANK, F.row_number().over(order))


def winning_order(version: str) -> list[Column]:
    """Descending: the first row wins. Sequence numbers compare as integers (by length,
    then digits: they are decimal strings of up to 128 bits)."""
    return [
        F.col(version).desc_nulls_last(),
        F.col(C.ARRIVAL_TIMESTAMP).desc_nulls_last(),
        F.col(C.SHARD_ID).desc_nulls_last(),
        F.length(C.SEQUENCE_NUMBER).desc_nulls_last(),
        F.col(C.SEQUENCE_NUMBER).desc_nulls_last(),
        F.col(C.SUB_SEQUENCE_NUMBER).desc_nulls_last(),
    ]


def _by_key(schema: Schema, key: str) -> SortOrder:
    """Declared so other engines (compaction, Iceberg Java writers) keep the layout too."""
    return SortOrder(SortField(source_id=schema.find_field(key).field_id))


def _spec(spec: DerivedTable) -> UpsertSpec:
    assert spec.upsert is not None, f"{spec.name} is not an upsert table"
    return spec.upsert


def _tombstone_columns(upsert: UpsertSpec) -> list[str]:
    return [upsert.key, upsert.version, *ORDER_COLUMNS]


def _is_delete(upsert: UpsertSpec) -> Column:
    if upsert.delete is None:
        return F.lit(False)
    matches = F.col(upsert.delete.field).cast("string").isin(list(upsert.delete.values))
    return F.coalesce(matches, F.lit(False))


def _held(
    spark: SparkSession,
    table: Table,
    key: str,
    keys: list[object],
    newest: DataFrame,
    *,
    deleted: bool,
) -> DataFrame:
    """The rows ``table`` holds for ``keys`` (those of ``newest``), read only from the files
    whose partition and key bounds can hold them."""
    tasks = _candidates(table, key, keys, _snapshot_id(table))
    if not tasks:
        return newest.limit(0).select(key).withColumn(_DELETED, F.lit(deleted))
    held = read_planned_files(spark, table, tasks).join(newest.select(key), key, "left_semi")
    return held.withColumn(_DELETED, F.lit(deleted))


def _held_positions(
    spark: SparkSession,
    table: Table,
    upsert: UpsertSpec,
    keys: list[object],
    newest: DataFrame,
    snapshot_id: int | None,
) -> DataFrame:
    """The ordering columns and file positions of the rows ``table`` holds for ``keys``
    (as of ``snapshot_id``): all a merge-on-read refresh needs to decide and delete."""
    columns = tuple(_tombstone_columns(upsert))
    tasks = _candidates(table, upsert.key, keys, snapshot_id)
    if tasks:
        rows = read_planned_files(spark, table, tasks, columns=columns, positions=True)
        rows = rows.join(newest.select(upsert.key), upsert.key, "left_semi")
    else:
        rows = (
            newest.limit(0)
            .select(*columns)
            .withColumns(
                {FILE_PATH: F.lit(None).cast("string"), POSITION: F.lit(None).cast("long")}
            )
        )
    return rows.withColumns({_DELETED: F.lit(False), _HELD: F.lit(True)})


def _snapshot_id(table: Table) -> int | None:
    snapshot = table.current_snapshot()
    return snapshot.snapshot_id if snapshot is not None else None


def _candidates(
    table: Table, key: str, keys: list[object], snapshot_id: int | None
) -> list[FileScanTask]:
    """The files (with their delete files) whose key bounds can hold one of ``keys``."""
    if snapshot_id is None or not keys:
        return []
    return list(table.scan(row_filter=any_of(key, keys), snapshot_id=snapshot_id).plan_files())


def _arrow(rows: DataFrame, table: Table, key: str) -> pa.Table:
    """The rows in ``table``'s Arrow schema, sorted by key so each written file covers a
    narrow key range (what lets the next refresh skip it)."""
    schema = table_arrow_schema(table.schema())
    data = rows.select(*schema.names).toArrow()
    return data.sort_by(key).cast(schema) if data.num_rows else schema.empty_table()
