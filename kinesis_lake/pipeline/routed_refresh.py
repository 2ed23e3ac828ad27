"""The routed tables and the quarantine, brought up to date with one raw table.

The raw files a target has not seen are read on executors; every record is decoded once,
routed to the tables whose routes take it and parsed against each one's schema
(``mapInArrow``, :mod:`kinesis_lake.spark.routing`). Valid rows go to their tables, the rest
(undecodable, no route, rejected by a table's schema, repeated keys: ``dedup.py``) with
their payload and error to the quarantine.

Invariant: every raw record lands once, in a routed table or in the quarantine, and none
is dropped. Each target keeps its own place in raw (its commit's batch id is the raw
snapshot's sequence number), so a crash between two targets' commits is repaired by the
next refresh writing only the ones behind; a table added to the declaration is backfilled
up to the quarantine's place, its rejections quarantined there and the records it takes
that the quarantine held as taken by no table marked resolved, before the quarantine moves
on, so no verdict on an earlier record is skipped or given twice.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from functools import reduce

from pyiceberg.expressions import And, EqualTo, In, IsNull, Or
from pyiceberg.table import Table
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from kinesis_lake.config import Settings
from kinesis_lake.events import columns as C
from kinesis_lake.events.declaration import QUARANTINE_TABLE, LakeDeclaration
from kinesis_lake.events.tables import quarantine_arrow_schema
from kinesis_lake.iceberg.incremental import IncrementalSlice, appended_since, caught_up_snapshot_id
from kinesis_lake.iceberg.lineage import (
    rebuild_if_source_moved_back,
    source_properties,
    source_summary,
)
from kinesis_lake.iceberg.summary import derived_writer_id
from kinesis_lake.pipeline.dedup import deduplicate
from kinesis_lake.pipeline.downstream_tables import DownstreamTables
from kinesis_lake.pipeline.quarantine_marks import KEYS, WAS, mark_resolved, movable, resolvable
from kinesis_lake.pipeline.refresh import (
    APPEND_THREADS,
    OnCommit,
    TableRefresh,
    append_rows,
    combined,
    no_report,
    one_at_a_time,
    pending_slice,
    sequence_number,
    timed,
)
from kinesis_lake.pipeline.session_thread import session_pool
from kinesis_lake.spark.iceberg.files_reader import read_table_files
from kinesis_lake.spark.routing import (
    QUARANTINE,
    declared_rows,
    quarantined_rows,
    route_on_executors,
)


def refresh_routed(
    spark: SparkSession,
    settings: Settings,
    declaration: LakeDeclaration,
    raw: Table,
    tables: DownstreamTables,
    *,
    on_commit: OnCommit = no_report,
) -> tuple[dict[str, TableRefresh], TableRefresh]:
    """Route and parse the raw files each target has not seen, and append them to it;
    ``on_commit`` hears of each target's commit as it lands.

    Every target (each routed table and the quarantine) keeps its own place in raw, so a
    crash between two targets' commits is repaired by the next refresh writing only the ones
    behind. Targets that lag by the same slice, the usual case, share one routing pass.

    The pass that starts furthest back goes first, and each pass sees the tables as the
    earlier ones left them: the quarantine's duplicate verdicts for a keyed table must be
    computed against every earlier record of that table. A table added to the declaration
    (its first refresh reads all of raw) judged by a quarantine pass over the new files
    alone, before its backfill, let a repeat of a backfilled key land in neither. The
    loaded tables in ``tables`` are left refreshed, as this refresh's commits left them.

    A target whose rows came from a raw history raw no longer has (raw dropped and
    re-created, or rolled back) is emptied first and rebuilt from the whole of raw,
    the quarantine too: its rows, and the marks of records a replay resolved (their rows
    go with the tables), are verdicts on the old history; the rebuilt raw's records are
    all judged again under the declaration as it is now, each once.
    """
    on_commit = one_at_a_time(on_commit)
    stream_tables = {name: tables.routed[name] for name in declaration.names}
    targets: dict[str, Table] = {**stream_tables, QUARANTINE: tables.quarantine}
    for table in stream_tables.values():  # each by its own record: a crash between is repaired
        rebuild_if_source_moved_back(raw, table)
    # The quarantine holds every stream's records: only this stream's are verdicts on raw.
    stream_rows = EqualTo(C.STREAM_NAME, settings.stream_name)
    rebuild_if_source_moved_back(raw, tables.quarantine, rows=stream_rows)
    backfilled = _backfill_to_quarantine(spark, settings, declaration, raw, tables, on_commit)
    for name, earlier in backfilled.items():
        on_commit(name, earlier, {})
    slices = {name: pending_slice(raw, table) for name, table in targets.items()}
    groups: dict[tuple[str, ...], list[str]] = {}
    for name, piece in slices.items():
        groups.setdefault(tuple(piece.files), []).append(name)
    results: dict[str, TableRefresh] = {}
    for names in sorted(groups.values(), key=lambda names: _start(raw, slices[names[0]])):
        piece = slices[names[0]]
        if not piece.files:
            for name in names:
                identifier = ".".join(targets[name].name())
                results[name] = TableRefresh(identifier, 0, 0, 0, piece.to_snapshot_id, False)
            continue
        started = time.monotonic()
        raw_rows = read_table_files(spark, raw, piece.files)
        routed = route_on_executors(raw_rows, declaration).persist()
        try:
            outputs = target_rows(spark, routed, raw_rows, declaration, tables, names)
            results.update(
                _append_side_by_side(
                    spark, settings, raw, piece, targets, outputs, on_commit, started
                )
            )
        finally:
            routed.unpersist()
    for name, earlier in backfilled.items():
        results[name] = combined(results[name].table, [earlier, results[name]])
    quarantine = results.pop(QUARANTINE)
    return {name: results[name] for name in declaration.names}, quarantine


def _append_side_by_side(
    spark: SparkSession,
    settings: Settings,
    raw: Table,
    piece: IncrementalSlice,
    targets: dict[str, Table],
    outputs: dict[str, DataFrame],
    on_commit: OnCommit,
    started: float,
) -> dict[str, TableRefresh]:
    """Append each target's rows of one routing pass, side by side (``APPEND_THREADS``).

    Every output was planned before (the duplicate verdicts' reads of the keyed tables
    included), so no append sees another's commit; each is a commit of its own, which a
    crash between leaves for the next refresh. All of them end before the first failure,
    if any, is raised."""

    def append(name: str) -> TableRefresh:
        identifier = ".".join(targets[name].name())
        count = _append(outputs[name], settings, identifier, raw, piece)
        result = timed(
            TableRefresh(
                identifier, len(piece.files), piece.rows, count, piece.to_snapshot_id, True
            ),
            started,
        )
        targets[name].refresh()  # committed through Spark: the next pass reads it
        on_commit(QUARANTINE_TABLE if name == QUARANTINE else name, result, {})
        return result

    with session_pool(spark, min(len(outputs), APPEND_THREADS), "routed-append") as pool:
        appended = {name: pool.submit(append, name) for name in outputs}
    return {name: future.result() for name, future in appended.items()}


def _backfill_to_quarantine(
    spark: SparkSession,
    settings: Settings,
    declaration: LakeDeclaration,
    raw: Table,
    tables: DownstreamTables,
    on_commit: OnCommit,
) -> dict[str, TableRefresh]:
    """Bring each routed table that is behind the quarantine in raw (one just added to
    the declaration) up to the quarantine's place, and quarantine its own rejections there;
    ``on_commit`` hears of the quarantine's commit that marks resolved the records such a
    table takes (``rows_resolved``).

    The quarantine judged those raw records before the table existed: the table's schema
    rejections and duplicates among them would otherwise be in neither (issue 31, suspected
    c). They are appended first, so a crash before the table's commit repeats this pass;
    records the quarantine already holds for the table, or holds as taken by no table (a
    replay judges those again), are left out, so nothing is quarantined twice.
    """
    done = caught_up_snapshot_id(raw, tables.quarantine)
    if done is None:
        return {}
    behind: dict[int | None, list[str]] = {}
    for name in declaration.names:
        start = caught_up_snapshot_id(raw, tables.routed[name])
        if start is None or sequence_number(raw, start) < sequence_number(raw, done):
            behind.setdefault(start, []).append(name)
    results: dict[str, TableRefresh] = {}
    for start, names in behind.items():
        piece = appended_since(raw, start, to_snapshot_id=done)
        if not piece.files:
            continue
        started = time.monotonic()
        raw_rows = read_table_files(spark, raw, piece.files)
        routed = route_on_executors(raw_rows, declaration).persist()
        try:
            outputs = target_rows(
                spark, routed, raw_rows, declaration, tables, [*names, QUARANTINE], judged=names
            )
            rejected = outputs[QUARANTINE].where(F.col(C.TARGET_TABLE).isin(names))
            held = _quarantined_for(spark, tables.quarantine, names)
            if held is not None:
                rejected = rejected.join(held, list(C.IDENTITY_COLUMNS), "left_anti")
            identifier = ".".join(tables.quarantine.name())
            writer_id = f"{derived_writer_id(raw.name()[-1])}:{'+'.join(names)}"
            append_rows(
                rejected,
                settings,
                identifier,
                writer_id=writer_id,
                batch_id=sequence_number(raw, done),
                summary=source_summary(raw, done),
                writer_properties=source_properties(raw),
            )
            tables.quarantine.refresh()
            resolved = _resolve_what_the_backfill_takes(
                spark,
                settings,
                tables.quarantine,
                outputs,
                names,
                writer_id=f"{writer_id}:resolved",
                batch_id=sequence_number(raw, done),
            )
            if resolved:
                marking = timed(
                    TableRefresh(identifier, len(piece.files), piece.rows, 0, done, True), started
                )
                on_commit(QUARANTINE_TABLE, marking, {"rows_resolved": resolved})
            for name in names:
                table = tables.routed[name]
                count = _append(outputs[name], settings, ".".join(table.name()), raw, piece)
                results[name] = timed(
                    TableRefresh(
                        ".".join(table.name()), len(piece.files), piece.rows, count, done, True
                    ),
                    started,
                )
                table.refresh()
        finally:
            routed.unpersist()
    return results


def _resolve_what_the_backfill_takes(
    spark: SparkSession,
    settings: Settings,
    quarantine: Table,
    outputs: dict[str, DataFrame],
    names: list[str],
    *,
    writer_id: str,
    batch_id: int,
) -> int:
    """Mark resolved the records the quarantine holds as taken by no table that the new
    tables ``names`` now take, before their rows are appended.

    The backfill fills a new table from the whole raw table, so such a record (a sign-up
    quarantined before a ``signups`` table was declared) enters the table; left unresolved,
    the reconciliation check counted it twice until someone ran a replay. Marked first: a
    crash before the table's commit leaves the record briefly in neither, and the next
    refresh, finding the table still behind, repeats the backfill and appends it (the
    marking, idempotent, is not repeated); marked after, a crash would leave it in both
    until a replay.
    """
    files = [
        task.file.file_path
        for task in quarantine.scan(
            row_filter=And(IsNull(C.TARGET_TABLE), IsNull(C.RESOLVED_AT))
        ).plan_files()
    ]
    if not files:
        return 0
    unresolved = movable(read_table_files(spark, quarantine, files), settings.stream_name).where(
        F.col(C.TARGET_TABLE).isNull()
    )
    candidates = unresolved.select(*KEYS, F.col(C.TARGET_TABLE).alias(WAS))
    fixed = resolvable(candidates, outputs, names)
    marked = mark_resolved(unresolved, fixed, quarantine, writer_id=writer_id, batch_id=batch_id)
    quarantine.refresh()
    return marked


def _quarantined_for(spark: SparkSession, quarantine: Table, names: list[str]) -> DataFrame | None:
    """Identities the quarantine holds for ``names`` or for no table (a one-time scan: it
    serves a new table's backfill, which reads the whole raw table anyway)."""
    wanted = Or(IsNull(C.TARGET_TABLE), In(C.TARGET_TABLE, names))
    files = [task.file.file_path for task in quarantine.scan(row_filter=wanted).plan_files()]
    if not files:
        return None
    rows = read_table_files(spark, quarantine, files)
    wanted_rows = F.col(C.TARGET_TABLE).isNull() | F.col(C.TARGET_TABLE).isin(names)
    return rows.where(wanted_rows).select(*C.IDENTITY_COLUMNS).distinct()


def _start(raw: Table, piece: IncrementalSlice) -> int:
    """Where in raw a slice starts, as a sequence number (-1: from the beginning)."""
    if piece.from_snapshot_id is None:
        return -1
    return sequence_number(raw, piece.from_snapshot_id)


def target_rows(
    spark: SparkSession,
    routed: DataFrame,
    raw_rows: DataFrame,
    declaration: LakeDeclaration,
    tables: DownstreamTables,
    names: list[str],
    judged: Collection[str] | None = None,
) -> dict[str, DataFrame]:
    """The rows each of ``names`` receives from one routing pass.

    A table with a dedup key keeps the first occurrence of each key and day; the repeats go
    to quarantine, so the quarantine needs every keyed table's verdicts (or those of the
    ``judged`` ones: each verdict reads the table's days), a table only its own.
    """
    quarantine_columns = quarantine_arrow_schema().names
    outputs: dict[str, DataFrame] = {}
    quarantined = [quarantined_rows(routed)]
    for table in declaration.tables:
        wanted = table.name in names
        verdicts = QUARANTINE in names and (judged is None or table.name in judged)
        if not wanted and not (verdicts and table.schema.event_key):
            continue
        rows = declared_rows(routed, declaration, table.name)
        if table.schema.event_key:
            rows, repeats = deduplicate(
                spark, rows, raw_rows, table.name, table.schema, tables.routed[table.name]
            )
            quarantined.append(repeats.select(*quarantine_columns))
        if wanted:
            outputs[table.name] = rows
    if QUARANTINE in names:
        outputs[QUARANTINE] = reduce(DataFrame.unionByName, quarantined)
    return outputs


def _append(
    rows: DataFrame, settings: Settings, identifier: str, source: Table, piece: IncrementalSlice
) -> int:
    assert piece.to_snapshot_id is not None
    return append_rows(
        rows,
        settings,
        identifier,
        writer_id=derived_writer_id(source.name()[-1]),
        batch_id=sequence_number(source, piece.to_snapshot_id),
        summary=source_summary(source, piece.to_snapshot_id),
        writer_properties=source_properties(source),
    )
