"""The derive job: every table downstream of raw, brought up to date incrementally.

Words used the same way everywhere: the *routed* tables are the declaration's ``tables:``,
fed by routing raw records; the *derived* tables are its ``derived:`` section (upsert and
SQL tables over other tables); *downstream* means all of them with the quarantine and the
per-minute counts: raw -> routed tables + quarantine -> counts -> derived tables.

Each derived table remembers, in its own Iceberg commit, the snapshot of its source it
has caught up to: the commit's batch id is that source snapshot's sequence number
(monotonic), under writer id ``derive:<source table>``. A refresh therefore reads only the
data files appended to the source since then, and re-running a refresh that already
committed is skipped by the same idempotent commit that protects ingestion.

This module is the order of one refresh, and only that: the routed tables and the
quarantine of every stream (``routed_refresh.py``, duplicates: ``dedup.py``), then the
per-minute counts (``aggregate.py``), then the derived tables in declared order, each after
the ones it reads (``upsert.py``, ``sql_tables.py``).
"""

from __future__ import annotations

import time
from concurrent.futures import Executor, Future
from dataclasses import dataclass

from pyiceberg.table import Table
from pyspark.sql import SparkSession

from kinesis_lake.config import Settings
from kinesis_lake.events.declaration import AGGREGATE_TABLE, LakeDeclaration
from kinesis_lake.events.declaration_file import load_declaration
from kinesis_lake.events.derived_tables import DerivedTable
from kinesis_lake.pipeline.aggregate import refresh_aggregate
from kinesis_lake.pipeline.downstream_tables import DownstreamTables, ensure_downstream_tables
from kinesis_lake.pipeline.lake import declared_stream, lake_streams, load_table, open_lake
from kinesis_lake.pipeline.refresh import (
    APPEND_THREADS,
    OnCommit,
    TableRefresh,
    combined,
    no_report,
    one_at_a_time,
    timed,
)
from kinesis_lake.pipeline.routed_refresh import refresh_routed
from kinesis_lake.pipeline.session_thread import session_pool
from kinesis_lake.pipeline.sql_tables import refresh_sql
from kinesis_lake.pipeline.upsert import ensure_upsert_tables, refresh_upsert


@dataclass
class DeriveResult:
    tables: dict[str, TableRefresh]
    """Per routed table (its short name), in declared order."""
    quarantine: TableRefresh
    aggregate: TableRefresh
    windows_recomputed: int
    derived: dict[str, TableRefresh]
    """Per ``derived:`` table (upsert and SQL), in declared order."""

    @property
    def rows_written(self) -> int:
        return sum(refresh.rows_written for refresh in self.tables.values())


def refresh_downstream(
    spark: SparkSession, settings: Settings, *, on_commit: OnCommit = no_report
) -> DeriveResult:
    """Bring every downstream table up to date with raw: the routed tables, the quarantine
    and the aggregate, then the derived tables; ``on_commit`` hears of each commit as it
    lands (a table with nothing new commits nothing and is not reported).

    Tables that do not read each other are refreshed side by side (``APPEND_THREADS``),
    for clusters; on two cores that takes as long as one after another.
    """
    report = one_at_a_time(on_commit)
    declaration = load_declaration(settings.event_schema_path)
    tables = ensure_downstream_tables(settings, declaration)
    routed: dict[str, TableRefresh] = {}
    quarantined: list[TableRefresh] = []
    for stream in lake_streams(settings, declaration):
        raw = load_table(open_lake(stream), stream.raw_table)
        part = declaration.for_stream(declared_stream(stream, declaration))
        if raw is None:  # a stream not ingested yet: its tables wait
            continue
        written, quarantine_part = refresh_routed(
            spark, stream, part, raw, tables, on_commit=report
        )
        routed.update(written)
        quarantined.append(quarantine_part)
    for name in declaration.names:
        identifier = settings.table_identifier(name)
        routed.setdefault(name, TableRefresh(identifier, 0, 0, 0, None, False))
    quarantine = combined(settings.quarantine_table, quarantined)
    with session_pool(spark, APPEND_THREADS, "derived-refresh") as pool:
        counted = pool.submit(_refresh_counts, spark, settings, declaration, tables, report)
        derived = refresh_derived_tables(
            spark, settings, declaration, tables, pool=pool, on_commit=report
        )
        aggregate, windows = counted.result()
    return DeriveResult(
        {name: routed[name] for name in declaration.names}, quarantine, aggregate, windows, derived
    )


def _refresh_counts(
    spark: SparkSession,
    settings: Settings,
    declaration: LakeDeclaration,
    tables: DownstreamTables,
    on_commit: OnCommit,
) -> tuple[TableRefresh, int]:
    started = time.monotonic()
    source = open_lake(settings).load_table(settings.table_identifier(declaration.aggregate_source))
    aggregate, windows = refresh_aggregate(
        spark, declaration.table(declaration.aggregate_source).schema, source, tables.aggregate
    )
    aggregate = timed(aggregate, started)
    if aggregate.committed:
        on_commit(AGGREGATE_TABLE, aggregate, {"windows_recomputed": windows})
    return aggregate, windows


def refresh_derived_tables(
    spark: SparkSession,
    settings: Settings,
    declaration: LakeDeclaration,
    tables: DownstreamTables,
    *,
    pool: Executor,
    on_commit: OnCommit = no_report,
) -> dict[str, TableRefresh]:
    """Refresh the ``derived:`` tables on ``pool``, each once the derived tables it reads
    are done (declared order lists those first, so a waiting task's inputs were submitted,
    and taken by a thread, before it: the waits cannot deadlock)."""
    catalog = open_lake(settings)
    routed = {name: catalog.load_table(settings.table_identifier(name)) for name in tables.routed}
    refreshed: dict[str, Future[TableRefresh]] = {}

    def readable(name: str) -> Table:
        if name in refreshed:
            refreshed[name].result()  # its refresh committed (or raised, and so do we)
            return open_lake(settings).load_table(settings.table_identifier(name))
        return routed[name]

    def refresh(spec: DerivedTable) -> TableRefresh:
        inputs = {name: readable(name) for name in spec.inputs}
        started = time.monotonic()  # its inputs are done: from here the work is its own
        if spec.upsert is not None:
            source = inputs[spec.source]
            catalog = open_lake(settings)
            upsert_tables = ensure_upsert_tables(catalog, settings, spec, source)
            result = refresh_upsert(spark, spec, source, upsert_tables)
        else:
            result = refresh_sql(spark, open_lake(settings), settings, spec, inputs)
        result = timed(result, started)
        if result.committed:
            on_commit(spec.name, result, {})
        return result

    for spec in declaration.derived:
        refreshed[spec.name] = pool.submit(refresh, spec)
    return {name: done.result() for name, done in refreshed.items()}
