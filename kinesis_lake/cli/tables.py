"""The lake's tables: ``query`` (SQL, now or as of a snapshot or a time), ``history`` (a
table's snapshots), ``maintain`` (one upkeep pass) and ``replay`` (quarantined records
the fixed declaration now takes)."""

from __future__ import annotations

import argparse
import shutil
import sys
from typing import TYPE_CHECKING

from kinesis_lake.cli.common import Commands, add_command, current_settings
from kinesis_lake.config import Settings
from kinesis_lake.errors import ConfigurationError, TableError

if TYPE_CHECKING:
    from collections.abc import Callable

    import pyarrow as pa
    from pyiceberg.catalog import Catalog


def cmd_maintain(args: argparse.Namespace) -> None:
    """One upkeep pass over every table that exists (what the hourly schedule runs)."""
    from kinesis_lake.console import steps
    from kinesis_lake.events.declaration_file import load_declaration
    from kinesis_lake.pipeline.lake import load_table, open_lake
    from kinesis_lake.pipeline.maintain import MaintenancePolicy, consumers, run_maintenance

    settings = current_settings()
    catalog = open_lake(settings)
    lake = consumers(load_declaration(settings.event_schema_path), settings.raw_table_name)
    tables = [t for t in lake if load_table(catalog, settings.table_identifier(t)) is not None]
    if not tables:
        print("no tables yet: nothing to maintain")
        return
    policy = MaintenancePolicy(snapshot_max_age_hours=args.snapshot_max_age_hours)
    with steps("maintaining", len(tables)) as progress:
        task = progress.add_task("maintain", total=len(tables))
        for name in tables:
            done = run_maintenance(settings, name, policy)
            progress.console.print(
                f"{done.table}: files {done.files_before} -> {done.files_after}, snapshots "
                f"{done.snapshots_before} -> {done.snapshots_after}, "
                f"{done.orphans_removed} orphan files removed",
                highlight=False,
                soft_wrap=True,
            )
            progress.advance(task)


def add_maintain(commands: Commands) -> None:
    maintain = add_command(
        commands,
        "maintain",
        "compact, expire snapshots and remove orphans on every table",
        cmd_maintain,
    )
    maintain.add_argument(
        "--snapshot-max-age-hours",
        type=float,
        default=None,
        help="expire snapshots older than this (never one a derived table still needs); "
        "default: each table's history.expire.max-snapshot-age-ms (raw: 1 h), else 24 h",
    )


def cmd_query(args: argparse.Namespace) -> None:
    from kinesis_lake.iceberg.query import (
        CELL_WIDTH,
        format_csv,
        format_json_lines,
        format_table,
        run_sql,
    )

    settings = current_settings()
    as_of_ms = _as_of_ms(args.as_of) if args.as_of else None
    catalog = _lake_with_tables(settings)
    result = run_sql(
        catalog,
        settings.namespace,
        args.sql,
        snapshot_id=args.snapshot,
        as_of_ms=as_of_ms,
        read=_fresh_reader(settings, args) if args.fresh else None,
    )
    if args.format == "csv":
        sys.stdout.write(format_csv(result))
    elif args.format == "json":
        sys.stdout.write(format_json_lines(result))
    else:
        width = args.max_width
        if width is None:
            # Spark's 20 characters off a terminal; in one, its width shared by the columns.
            columns = max(1, result.num_columns)
            terminal = shutil.get_terminal_size((0, 0)).columns if sys.stdout.isatty() else 0
            width = max(CELL_WIDTH, terminal // columns - 1)
        print(format_table(result, max_rows=args.max_rows, max_width=width))


def _fresh_reader(settings: Settings, args: argparse.Namespace) -> Callable[[str], pa.Table]:
    """Each table the query names read fresh, and what each read took said on stderr (the
    rows go to stdout, for scripts)."""
    from kinesis_lake.pipeline.fresh_read import TailLimits, fresh_read

    try:
        limits = TailLimits(
            max_records=args.fresh_max_records,
            max_age_s=args.fresh_max_age,
            max_bytes=args.fresh_max_bytes,
        )
    except ValueError as error:
        raise ConfigurationError(
            f"--fresh-max-records/--fresh-max-bytes/--fresh-max-age: {error}"
        ) from None

    def read(name: str) -> pa.Table:
        fresh = fresh_read(settings, name, limits=limits)
        rows = fresh.table  # read before it is described, so the line counts its rows
        print(f"fresh {fresh.describe(name)}", file=sys.stderr)
        for warning in fresh.warnings:
            print(f"fresh {name}: {warning}", file=sys.stderr)
        return rows

    return read


def _lake_with_tables(settings: Settings) -> Catalog:
    """The lake, for commands that read its tables: one whose catalog exists but whose
    namespace no run has created yet (``make dev``'s sensors and checks open the catalog
    before the first run writes) holds no table to read, and says so in one line."""
    from kinesis_lake.pipeline.lake import open_existing_lake

    catalog = open_existing_lake(settings)
    if not catalog.namespace_exists(settings.namespace):
        raise TableError(
            f"No table in {settings.namespace} at KINESIS_LAKE_DATA_DIR={settings.data_dir} "
            "yet: kinesis-lake ingest (or make dev's first run) creates them; with make dev, "
            "send records and wait for its run."
        )
    return catalog


def _as_of_ms(text: str) -> int:
    from kinesis_lake.kinesis.start_positions import parse_timestamp_ms

    try:
        return parse_timestamp_ms(text)
    except ValueError:
        raise ConfigurationError(
            f"--as-of {text!r} is neither ISO-8601 (2026-11-24T10:00:00Z) nor epoch milliseconds"
        ) from None


def add_query(commands: Commands) -> None:
    query = add_command(
        commands,
        "query",
        "run SQL over the Iceberg tables (DuckDB)",
        cmd_query,
        "Run DuckDB SQL over the lake's tables, named by their short names (events, "
        "raw_events, ...), now or as of a snapshot or a time.",
    )
    query.add_argument("sql", help='the query, e.g. "SELECT count(*) FROM events"')
    query.add_argument("--snapshot", type=int, default=None, help="read as of snapshot id")
    query.add_argument(
        "--as-of", default=None, help="read as of a time: ISO-8601 (2026-11-24T10:00:00Z) or ms"
    )
    query.add_argument(
        "--fresh",
        action="store_true",
        help="read raw, routed and upsert tables with what their stream holds past the last "
        "commit (read from Kinesis, parsed by the declaration); other tables are refused",
    )
    query.add_argument(
        "--fresh-max-records",
        type=int,
        default=100_000,
        help="with --fresh: Kinesis records read at most, all shards together; shards left "
        "out are named on stderr",
    )
    query.add_argument(
        "--fresh-max-bytes",
        type=int,
        default=None,
        help="with --fresh: bytes of Kinesis records read at most (data and partition key, "
        "as Kinesis counts them), all shards together; shards left out are named on stderr; "
        "default: no limit",
    )
    query.add_argument(
        "--fresh-max-age",
        type=float,
        default=None,
        help="with --fresh: leave out (and name) a shard whose oldest uncommitted record "
        "is older than this many seconds; default: no limit",
    )
    query.add_argument("--max-rows", type=int, default=20, help="rows shown in table format")
    query.add_argument(
        "--format",
        choices=["table", "csv", "json"],
        default="table",
        help="table for people; csv, or json (one object per line), for scripts",
    )
    query.add_argument(
        "--max-width",
        type=int,
        default=None,
        help="cut table cells at this many characters; default: the terminal's width shared "
        "by the columns (20, Spark's, off a terminal)",
    )


def cmd_history(args: argparse.Namespace) -> None:
    import pyarrow as pa

    from kinesis_lake.iceberg.query import format_table, table_history
    from kinesis_lake.pipeline.lake import load_table, table_names

    settings = current_settings()
    catalog = _lake_with_tables(settings)
    name = args.table if "." in args.table else f"{settings.namespace}.{args.table}"
    table = load_table(catalog, name)
    if table is None:
        tables = ", ".join(table_names(catalog, settings.namespace)) or "none yet"
        raise TableError(f"No table {name}; the tables in {settings.namespace} are: {tables}")
    rows = table_history(table)
    columns = [
        "snapshot_id",
        "timestamp",
        "operation",
        "added_records",
        "rewritten_records",
        "writer_id",
        "batch_id",
    ]
    shown = pa.Table.from_pylist([{c: row[c] for c in columns} for row in rows])
    print(format_table(shown.select(columns), max_rows=max(1, len(rows)), max_width=40))


def add_history(commands: Commands) -> None:
    history = add_command(commands, "history", "list a table's snapshots", cmd_history)
    history.add_argument("table", help="the table, e.g. raw_events")


def cmd_replay(args: argparse.Namespace) -> None:
    """Move the quarantined records the declaration now takes into their tables."""
    from kinesis_lake.pipeline.preflight import check_directories, check_event_schema
    from kinesis_lake.pipeline.replay import replay_quarantine
    from kinesis_lake.spark.runtime.session import build_spark_session

    settings = current_settings()
    check_directories(settings)  # no stream needed: the payloads are in quarantine
    check_event_schema(settings)
    spark = build_spark_session(settings.spark_master, log_dir=settings.log_dir)
    try:
        result = replay_quarantine(spark, settings)
    finally:
        spark.stop()
    for name in sorted(result.written.keys() | result.caught_up.keys()):
        replayed, caught_up = result.written.get(name, 0), result.caught_up.get(name, 0)
        if replayed or caught_up:  # what the replay_quarantine job reports as materialized
            print(
                f"{name}: {replayed + caught_up} rows added ({replayed} replayed, "
                f"{caught_up} caught up from raw first)"
            )
    moved = ", ".join(f"{rows} to {name}" for name, rows in result.written.items() if rows)
    print(
        f"replayed {result.candidates} quarantined records: {result.resolved} resolved"
        f"{f' ({moved})' if moved else ''}, {result.still_quarantined} still quarantined"
    )


def add_replay(commands: Commands) -> None:
    add_command(
        commands,
        "replay",
        "move quarantined records the fixed declaration now takes into their tables",
        cmd_replay,
    )
