"""Upsert tables: the current row per key of a declared table, refreshed incrementally.

A refresh reads only the source files appended since the table last caught up (the same
watermark every derived table keeps), picks the latest new row per key, and merges it
with the rows the table and its tombstones already hold **for those keys only**: rows are
written sorted by key into small files, so each file covers a narrow key range and the
touched keys' files are found from the files' key bounds alone; they are read and
rewritten without the replaced rows (copy-on-write per affected file), in one commit with
the winners. The cost follows the keys a refresh touches, not the table's size
(``benchmarks/upsert_refresh.py`` measures it). The tables are not partitioned: a hash
partition of the key would spread every file's key range over the whole key space.

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
from functools import partial

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.sorting import SortField, SortOrder
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from kinesis_lake.config import Settings
from kinesis_lake.events import columns as C
from kinesis_lake.events.derived_tables import ORDER_COLUMNS, DerivedTable, UpsertSpec
from kinesis_lake.iceberg.arrow_schema import table_arrow_schema
from kinesis_lake.iceberg.commit import commit_arrow
from kinesis_lake.iceberg.filters import any_of
from kinesis_lake.iceberg.lineage import (
    rebuild_if_source_moved_back,
    source_properties,
    source_summary,
)
from kinesis_lake.iceberg.summary import derived_writer_id
from kinesis_lake.iceberg.tables import ensure_table
from kinesis_lake.pipeline.refresh import TableRefresh, pending_slice, sequence_number
from kinesis_lake.spark.iceberg.files_reader import read_table_files

TARGET_FILE_BYTES = str(8 * 1024 * 1024)
"""Small files keep a refresh's rewrite small: it rewrites every file holding a touched key."""
_DELETED = "__deleted"


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
            properties=properties,
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
    try:
        keys = [row[0] for row in newest.select(upsert.key).collect()]
        held = (
            _held(
                spark, held_table, upsert.key, keys, newest, deleted=held_table is tables.tombstones
            )
            for held_table in (tables.table, tables.tombstones)
        )
        candidates = newest
        for rows in held:
            candidates = candidates.unionByName(rows, allowMissingColumns=True)
        winners = latest_per_key(candidates, upsert).persist()
        try:  # newest stays cached until the winners are computed from it
            live = _arrow(winners.where(~F.col(_DELETED)), tables.table, upsert.key)
            dead = _arrow(winners.where(F.col(_DELETED)), tables.tombstones, upsert.key)
        finally:
            winners.unpersist()
    finally:
        newest.unpersist()
    commit = partial(
        commit_arrow,
        writer_id=derived_writer_id(source.name()[-1]),
        batch_id=sequence_number(source, piece.to_snapshot_id),
        summary=source_summary(source, piece.to_snapshot_id),
        writer_properties=source_properties(source),
        overwrite_filter=any_of(upsert.key, keys) if keys else None,
    )
    commit(tables.tombstones, dead)  # first: see the module docstring
    outcome = commit(tables.table, live)
    return TableRefresh(
        name, len(piece.files), piece.rows, live.num_rows, piece.to_snapshot_id, outcome.committed
    )


def latest_per_key(rows: DataFrame, upsert: UpsertSpec) -> DataFrame:
    """The winning row of every key: highest version, then the later Kinesis record."""
    order = Window.partitionBy(upsert.key).orderBy(*winning_order(upsert.version))
    ranked = rows.withColumn("__rank", F.row_number().over(order))
    return ranked.where(F.col("__rank") == 1).drop("__rank")


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
    files = []
    if table.current_snapshot() is not None and keys:
        files = [
            task.file.file_path for task in table.scan(row_filter=any_of(key, keys)).plan_files()
        ]
    if not files:
        return newest.limit(0).select(key).withColumn(_DELETED, F.lit(deleted))
    held = read_table_files(spark, table, files).join(newest.select(key), key, "left_semi")
    return held.withColumn(_DELETED, F.lit(deleted))


def _arrow(rows: DataFrame, table: Table, key: str) -> pa.Table:
    """The rows in ``table``'s Arrow schema, sorted by key so each written file covers a
    narrow key range (what lets the next refresh skip it)."""
    schema = table_arrow_schema(table.schema())
    data = rows.select(*schema.names).toArrow()
    return data.sort_by(key).cast(schema) if data.num_rows else schema.empty_table()
