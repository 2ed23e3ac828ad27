"""Spark SQL tables of the declaration, refreshed in one of three modes.

The query reads declared tables by their short names: each is registered as a temporary
view holding exactly the rows the mode needs, so the same SQL serves every mode.

* ``rows``: the view holds the input's rows appended since the last refresh; the result
  is appended (through the Iceberg sink, written on executors) under the derived-table
  watermark, so a rerun after a crash appends nothing twice. Right for row-wise SQL
  (projections, filters, ``explode``): the union of its results over slices is its
  result over the whole input.
* ``windowed``: the windows (``window.column`` truncated to ``window.size``) that new rows
  fall in are recomputed from every input row in those windows, late rows included, and
  replace the old rows of those windows (``window.output``) in one commit.
* ``full``: when any input is in another state than the one the table was computed
  from (a new snapshot, or a re-created or rolled-back table: see ``iceberg.lineage``),
  the whole result replaces the table. Collected on the driver: meant for small tables
  (dimensions, summaries).

A ``rows`` or ``windowed`` table whose source was re-created or rolled back since it last
read it holds rows of a history the source no longer has: it is emptied and rebuilt from
the whole source, as on its first refresh.

The table's columns are the query's: created from the first result and evolved (new
columns, allowed widenings) after.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from functools import partial

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.expressions import AlwaysTrue, And, GreaterThanOrEqual, In, LessThan
from pyiceberg.table import Table
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema

from kinesis_lake.config import Settings
from kinesis_lake.errors import TableError
from kinesis_lake.events.derived_tables import DerivedTable, WindowSpec
from kinesis_lake.iceberg.arrow_schema import table_arrow_schema
from kinesis_lake.iceberg.commit import commit_arrow
from kinesis_lake.iceberg.incremental import SOURCE_SNAPSHOT_PROPERTY
from kinesis_lake.iceberg.lineage import (
    full_refresh_batch,
    rebuild_if_source_moved_back,
    record_inputs,
    source_properties,
    source_summary,
    table_state,
)
from kinesis_lake.iceberg.row_deletes import live_rows
from kinesis_lake.iceberg.summary import derived_writer_id, full_writer_id
from kinesis_lake.iceberg.tables import SchemaEvolutionError, ensure_table_for_arrow
from kinesis_lake.pipeline.lake import load_table
from kinesis_lake.pipeline.refresh import (
    TableRefresh,
    append_rows,
    from_micros,
    iso,
    pending_slice,
    sequence_number,
)
from kinesis_lake.spark.iceberg.files_reader import read_planned_files, read_table_files

_WINDOW_STEP = {"minute": 60_000_000, "hour": 3_600_000_000, "day": 86_400_000_000}


class SqlTableError(TableError, ValueError):
    """A declared SQL table's query produced something its refresh mode cannot store."""


VIEWS = threading.Lock()
"""Held from registering a query's views to its result: the views are the session's, by
the tables' short names, and tables refreshed side by side (``derive.py``) may read the
same table through different views (a slice, some windows, the whole)."""


def refresh_sql(
    spark: SparkSession,
    catalog: Catalog,
    settings: Settings,
    spec: DerivedTable,
    inputs: dict[str, Table],
) -> TableRefresh:
    """Bring the SQL table ``spec`` up to date with its inputs (the tables it reads)."""
    identifier = settings.table_identifier(spec.name)
    table = load_table(catalog, identifier)
    if spec.refresh == "full":
        return _refresh_full(spark, catalog, identifier, spec, inputs, table)
    if spec.refresh == "windowed":
        refresh, _ = refresh_windowed(
            spark,
            spec,
            inputs[spec.source],
            table,
            create=lambda columns: _table_for(catalog, identifier, spec, columns),
        )
        return replace(refresh, table=identifier)
    source = inputs[spec.source]
    rebuild_if_source_moved_back(source, table)
    piece = pending_slice(source, table)
    if not piece.files:
        return TableRefresh(identifier, 0, 0, 0, piece.to_snapshot_id, False)
    with VIEWS:
        read_table_files(spark, source, piece.files).createOrReplaceTempView(spec.source)
        result = spark.sql(_query(spec))
        _table_for(catalog, identifier, spec, to_arrow_schema(result.schema))
        written = append_rows(
            result,
            settings,
            identifier,
            writer_id=derived_writer_id(spec.source),
            batch_id=sequence_number(source, piece.to_snapshot_id),
            summary=source_summary(source, piece.to_snapshot_id),
            writer_properties=source_properties(source),
        )
    return TableRefresh(
        identifier, len(piece.files), piece.rows, written, piece.to_snapshot_id, True
    )


def refresh_windowed(
    spark: SparkSession,
    spec: DerivedTable,
    source: Table,
    table: Table | None,
    *,
    create: Callable[[pa.Schema], Table],
) -> tuple[TableRefresh, int]:
    """Recompute the windows the source rows appended since the last refresh fall in, and
    replace them in ``table``; the refresh and the number of windows recomputed.

    ``create`` gives the table that holds a result: made from the first one, evolved by the
    next ones (new columns, widenings), as ``full`` tables are, or a value the query now
    gives in a wider type would not fit and stop every later refresh.
    """
    window = spec.window
    assert window is not None, f"{spec.name} is not a windowed table"
    name = ".".join(table.name()) if table is not None else spec.name
    rebuild_if_source_moved_back(source, table)
    piece = pending_slice(source, table)
    if not piece.files:
        return TableRefresh(name, 0, 0, 0, piece.to_snapshot_id, False), 0
    commit = partial(
        commit_arrow,
        writer_id=derived_writer_id(spec.source),
        batch_id=sequence_number(source, piece.to_snapshot_id),
        summary=source_summary(source, piece.to_snapshot_id),
        writer_properties=source_properties(source),
    )
    window_micros = _windows(read_table_files(spark, source, piece.files), window)
    if not window_micros:  # no new row has a time: nothing to recompute, the place moves on
        if table is not None:  # a new table waits for rows with a time to get its columns
            commit(table, table_arrow_schema(table.schema()).empty_table())
        return TableRefresh(name, len(piece.files), piece.rows, 0, piece.to_snapshot_id, True), 0
    with VIEWS:
        _window_rows(spark, source, window, window_micros).createOrReplaceTempView(spec.source)
        data = spark.sql(_query(spec)).toArrow()
    _check_windows(spec, window, data, window_micros)
    table = create(data.schema)
    outcome = commit(
        table,
        _fitted(spec, table, data),
        overwrite_filter=In(window.output, [iso(from_micros(m)) for m in window_micros]),
    )
    refresh = TableRefresh(
        name, len(piece.files), piece.rows, data.num_rows, piece.to_snapshot_id, outcome.committed
    )
    return refresh, len(window_micros)


def _refresh_full(
    spark: SparkSession,
    catalog: Catalog,
    identifier: str,
    spec: DerivedTable,
    inputs: dict[str, Table],
    table: Table | None,
) -> TableRefresh:
    snapshots = {name: inputs[name].current_snapshot() for name in spec.inputs}
    state = {name: table_state(inputs[name]) for name in spec.inputs}  # as of `snapshots`
    writer_id = full_writer_id(spec.name)
    batch_id = full_refresh_batch(table, writer_id, state)
    if batch_id is None:
        return TableRefresh(identifier, 0, 0, 0, None, False)
    files = rows = 0
    with VIEWS:
        for name in spec.inputs:
            snapshot = snapshots[name]  # the ones batch_id counts, even if an input moved
            scan = inputs[name].scan(snapshot_id=snapshot.snapshot_id) if snapshot else None
            tasks = list(scan.plan_files()) if scan is not None else []
            # Planned tasks carry their delete files (merge-on-read upsert inputs).
            read_planned_files(spark, inputs[name], tasks).createOrReplaceTempView(name)
            files += len(tasks)
            rows += live_rows(inputs[name].io, tasks)
        data = spark.sql(_query(spec)).toArrow()
    table = _table_for(catalog, identifier, spec, data.schema)
    outcome = commit_arrow(
        table,
        _fitted(spec, table, data),
        writer_id=writer_id,
        batch_id=batch_id,
        summary={
            f"{SOURCE_SNAPSHOT_PROPERTY}.{name}": str(s.snapshot_id)
            for name, s in snapshots.items()
            if s is not None
        },
        overwrite_filter=AlwaysTrue(),
    )
    if outcome.committed:
        record_inputs(table, writer_id, batch_id, state)
    return TableRefresh(identifier, files, rows, data.num_rows, None, outcome.committed)


def _table_for(catalog: Catalog, identifier: str, spec: DerivedTable, columns: pa.Schema) -> Table:
    """The table holding ``spec``'s results, created or evolved (new columns, widenings) to
    hold one with ``columns``; a result Iceberg cannot evolve the table to names the table,
    the column and the way out, in one line."""
    try:
        return ensure_table_for_arrow(catalog, identifier, columns)
    except SchemaEvolutionError as error:
        problems = " ".join(line.removeprefix("- ") for line in str(error).splitlines()[1:])
        raise SqlTableError(
            f"derived table {spec.name!r} ({identifier}) cannot hold its SQL's result: "
            f"{problems} Or drop {identifier}: the next refresh recomputes it from its inputs."
        ) from None


def _fitted(spec: DerivedTable, table: Table, data: pa.Table) -> pa.Table:
    """``data`` in ``table``'s column types; a value that does not fit names its column.

    Columns are matched by name, as the table was evolved by name: an edited SQL may list
    them in another order, or no longer give an optional one (null in the new rows)."""
    target = table_arrow_schema(table.schema())
    data = pa.table(
        [
            data.column(field.name)
            if field.name in data.column_names
            else pa.nulls(data.num_rows, field.type)
            for field in target
        ],
        names=target.names,
    )
    try:
        return data.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError):
        for field in target:
            if field.name not in data.column_names:
                continue
            try:
                data.column(field.name).cast(field.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:
                raise SqlTableError(
                    f"derived table {spec.name!r} ({'.'.join(table.name())}): column "
                    f"{field.name!r} of its SQL's result does not fit the table's "
                    f"{field.type}: {str(error).splitlines()[0]}. Make the SQL give a "
                    f"{field.type}, or drop the table to recompute it with the new type."
                ) from None
        raise


def _query(spec: DerivedTable) -> str:
    assert spec.sql is not None, f"{spec.name} is not a SQL table"
    return spec.sql


def _windows(new_rows: DataFrame, window: WindowSpec) -> list[int]:
    """The windows new rows fall in, as epoch microseconds (collecting Spark timestamps
    would convert them to the Python process's time zone)."""
    start = F.unix_micros(F.date_trunc(window.size, window.column))
    found = new_rows.select(start).distinct().collect()
    return sorted(row[0] for row in found if row[0] is not None)


def _window_rows(
    spark: SparkSession, source: Table, window: WindowSpec, window_micros: list[int]
) -> DataFrame:
    """Every row of ``source`` in those windows: late rows land beside the earlier ones."""
    low = from_micros(window_micros[0])
    high = from_micros(window_micros[-1] + _WINDOW_STEP[window.size])
    in_range = And(GreaterThanOrEqual(window.column, iso(low)), LessThan(window.column, iso(high)))
    files = [task.file.file_path for task in source.scan(row_filter=in_range).plan_files()]
    rows = read_table_files(spark, source, files)
    start = F.unix_micros(F.date_trunc(window.size, window.column))
    return rows.where(start.isin(window_micros))


def _check_windows(
    spec: DerivedTable, window: WindowSpec, data: pa.Table, window_micros: list[int]
) -> None:
    """The result must say which window each row belongs to, or replacing windows would
    leave stale rows or delete others."""
    if window.output not in data.column_names:
        raise SqlTableError(
            f"derived table {spec.name!r}: the SQL's result has no column {window.output!r} "
            f"(window.output); select date_trunc('{window.size}', {window.column}) AS "
            f"{window.output}"
        )
    column = data.column(window.output)
    if not pa.types.is_timestamp(column.type):
        raise SqlTableError(
            f"derived table {spec.name!r}: window.output {window.output!r} must be a "
            f"timestamp, the SQL gives {column.type}"
        )
    micros = column.cast(pa.timestamp("us", tz="UTC")).cast(pa.int64()).to_pylist()
    stray = sorted(set(micros) - set(window_micros))
    if stray:
        raise SqlTableError(
            f"derived table {spec.name!r}: the SQL gives {window.output} "
            f"{from_micros(stray[0]).isoformat()}, which is not the start of a "
            f"{window.size} window of the new rows; select date_trunc('{window.size}', "
            f"{window.column}) AS {window.output} and group by it"
        )
