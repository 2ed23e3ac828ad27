"""``kinesis-lake``: the command line over the same code the Dagster assets run.

Every command reads its settings from the environment (see ``kinesis-lake settings``);
``--profile FILE`` first loads a profile such as ``profiles/local.env``, without
overriding variables that are already set.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from kinesis_lake.config import SPARK_CONNECT_PORT, Settings, load_profile, settings_markdown
from kinesis_lake.errors import ConfigurationError, KinesisLakeError, TableError
from kinesis_lake.kinesis.endpoint import LOCAL_ENDPOINT_PORT
from kinesis_lake.spark.runtime.daemon_reaper import REAP_IDLE_DAEMONS_AFTER_S

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

    from kinesis_lake.pipeline.derive import DeriveResult
    from kinesis_lake.pipeline.ingest import BatchReport


def _settings() -> Settings:
    return Settings.from_env()


def _streams(settings: Settings, chosen: str | None, *, one: bool = False) -> list[Settings]:
    """The settings of the streams a command works on: ``--stream``, else every stream the
    declaration names (exactly one, for commands that run one query)."""
    from kinesis_lake.events.declaration import load_declaration
    from kinesis_lake.pipeline.lake import lake_streams
    from kinesis_lake.pipeline.preflight import check_event_schema

    check_event_schema(settings)  # the declaration names the streams: a broken one says so
    streams = lake_streams(settings, load_declaration(settings.event_schema_path))
    names = [stream.stream_name for stream in streams]
    if chosen is not None:
        streams = [stream for stream in streams if stream.stream_name == chosen]
        if not streams:
            raise ConfigurationError(
                f"--stream {chosen}: not a stream of this lake; its streams: {', '.join(names)}"
            )
    if one and len(streams) > 1:
        raise ConfigurationError(
            f"the declaration names {len(streams)} streams: choose one with --stream "
            f"({', '.join(names)})"
        )
    return streams


def _preflight(settings: Settings, *, event_schema: bool) -> None:
    """Fail before Spark starts, in one line naming the setting (see pipeline/preflight.py)."""
    from kinesis_lake.pipeline.preflight import preflight

    preflight(settings, event_schema=event_schema)


def cmd_settings(args: argparse.Namespace) -> None:
    if args.markdown:
        print(settings_markdown(), end="")
        return
    for variable, value, description in _settings().describe():
        print(f"{variable:36} {value or '(unset)':40} {description}")


def cmd_endpoint(args: argparse.Namespace) -> None:
    from kinesis_lake.kinesis.endpoint import LocalKinesisEndpoint

    settings = _settings()
    data_dir = None if args.in_memory else settings.data_dir / "kinesis"
    endpoint = LocalKinesisEndpoint(
        args.kind or settings.endpoint_kind, port=args.port, data_dir=data_dir
    )
    endpoint.start()
    print(f"{endpoint.kind} Kinesis endpoint on {endpoint.url} (Ctrl-C to stop)", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        while not stop.wait(1):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        endpoint.stop()


def cmd_connect_server(args: argparse.Namespace) -> None:
    from kinesis_lake.spark.runtime.connect_server import ConnectServer
    from kinesis_lake.spark.runtime.session import is_connect

    settings = _settings()
    master = args.master or (
        "local[2]" if is_connect(settings.spark_master) else settings.spark_master
    )
    server = ConnectServer(
        port=args.port,
        master=master,
        log_dir=settings.log_dir,
        reap_idle_daemons_after_s=(
            args.reap_idle_daemons_after if args.reap_idle_daemons_after > 0 else None
        ),
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with server:
        print(
            f"Spark Connect server ({master}) on {server.url}: set SPARK_MASTER={server.url} "
            f"(Ctrl-C to stop; log {server.log_file})",
            flush=True,
        )
        with contextlib.suppress(KeyboardInterrupt):
            while not stop.wait(1):
                pass


def cmd_produce(args: argparse.Namespace) -> None:
    from kinesis_lake.kinesis.client import kinesis_client
    from kinesis_lake.kinesis.producer import put_records, sample_events
    from kinesis_lake.kinesis.streams import ensure_stream

    (settings,) = _streams(_settings(), args.stream, one=True)
    client = kinesis_client(settings.endpoint_url, settings.region)
    ensure_stream(client, settings.stream_name, settings.shard_count)
    events = sample_events(
        args.count,
        malformed_every=args.malformed_every,
        unrouted_every=args.unrouted_every,
        seed=int(time.time()) if args.seed is None else args.seed,
    )
    summary = put_records(client, settings.stream_name, events, rate_per_s=args.rate)
    print(
        f"sent {summary.sent} records to {settings.stream_name} in {summary.calls} PutRecords "
        f"calls ({summary.retried_entries} entries retried, {summary.failed} failed)"
    )


def cmd_create_streams(args: argparse.Namespace) -> None:
    """Create the lake's streams that do not exist yet: what ``ingest`` needs before a
    producer of the user's own has sent anything (``produce`` sends the demo's events)."""
    from kinesis_lake.kinesis.client import kinesis_client
    from kinesis_lake.kinesis.streams import StreamNotFoundError, describe_stream, ensure_stream

    for stream in _streams(_settings(), args.stream):
        client = kinesis_client(stream.endpoint_url, stream.region, role=stream.assumed_role)
        try:
            info = describe_stream(client, stream.stream_name)
        except StreamNotFoundError:
            info = ensure_stream(client, stream.stream_name, stream.shard_count)
            print(f"{stream.stream_name}: created with {info.open_shard_count} shards")
        else:  # resharding a live stream is the operator's decision, never a side effect
            print(f"{stream.stream_name}: exists ({info.open_shard_count} shards), left as it is")


def cmd_ingest(args: argparse.Namespace) -> None:
    from kinesis_lake.console import IngestProgress
    from kinesis_lake.pipeline.derive import refresh_downstream
    from kinesis_lake.pipeline.ingest import run_ingestion
    from kinesis_lake.spark.runtime.session import build_spark_session

    settings = _settings()
    streams = _streams(settings, args.stream)
    for stream in streams:
        _preflight(stream, event_schema=args.derive)
    spark = build_spark_session(settings.spark_master, log_dir=settings.log_dir)
    try:
        for stream in streams:
            with IngestProgress() as progress:
                result = run_ingestion(spark, stream, on_batch=progress.batch)
            print(
                f"ingested {result.rows} rows from {stream.stream_name} in {result.batches} "
                f"micro-batches ({result.rows_per_second:,.0f} rows/s); "
                f"{stream.raw_table_name} holds {result.raw_rows_total}"
            )
            for gap in result.skipped_gaps:
                print(
                    f"{stream.stream_name}: skipped a data-loss gap on {gap.shard_id}: {gap.detail}"
                )
        if args.derive:
            print(_derive_summary(refresh_downstream(spark, settings)))
    finally:
        spark.stop()


def _derive_summary(derived: DeriveResult) -> str:
    """Rows written to every table a refresh wrote: the routed ones, then the upsert and
    SQL tables (``derived:``) in declared order, which read what the routed ones got."""
    written = ", ".join(
        f"{refresh.rows_written} to {name}"
        for name, refresh in [*derived.tables.items(), *derived.derived.items()]
    )
    return (
        f"derived: {written}, {derived.quarantine.rows_written} quarantined, "
        f"{derived.windows_recomputed} aggregate windows recomputed"
    )


def cmd_maintain(args: argparse.Namespace) -> None:
    """One upkeep pass over every table that exists (what the hourly schedule runs)."""
    from kinesis_lake.console import steps
    from kinesis_lake.events.declaration import load_declaration
    from kinesis_lake.pipeline.lake import load_table, open_lake
    from kinesis_lake.pipeline.maintain import MaintenancePolicy, consumers, run_maintenance

    settings = _settings()
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


def cmd_stream(args: argparse.Namespace) -> None:
    """Continuous ingestion until SIGTERM/SIGINT; each batch is printed and, when
    $DAGSTER_HOME is set, recorded there as a raw_events materialization."""
    from kinesis_lake.pipeline.ingest import run_continuous
    from kinesis_lake.spark.runtime.session import build_spark_session

    (settings,) = _streams(_settings(), args.stream, one=True)
    _preflight(settings, event_schema=False)
    stop = threading.Event()

    def request_stop(signum: int, frame: object) -> None:
        # The first signal stops after the batch in flight; a second one takes the default
        # (immediate) action, which is safe too: an uncommitted batch is replayed. os.write,
        # not print: print may be mid-write in the main thread (a reentrant-call error).
        name = signal.Signals(signum).name
        os.write(sys.stderr.fileno(), f"{name}: stopping after the batch in flight\n".encode())
        for each in (signal.SIGTERM, signal.SIGINT):
            signal.signal(each, signal.SIG_DFL)
        stop.set()

    with contextlib.ExitStack() as cleanup:
        on_batch = _stream_reporter(settings, cleanup)
        spark = build_spark_session(settings.spark_master, log_dir=settings.log_dir)
        cleanup.callback(spark.stop)
        # Only now: creating the SparkContext installs PySpark's own SIGINT handler, which
        # cancels every running job (the batch in flight) and raises KeyboardInterrupt.
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, request_stop)
        print(
            f"streaming {settings.stream_name} into {settings.raw_table} every {args.trigger}; "
            "SIGTERM or Ctrl-C stops after the batch in flight",
            flush=True,
        )
        result = run_continuous(
            spark, settings, stop=stop, processing_time=args.trigger, on_batch=on_batch
        )
        print(f"stopped cleanly after {result.rows} rows in {result.batches} batches", flush=True)


def _print_batch(batch: BatchReport) -> None:
    print(
        f"batch {batch.batch_id}: {batch.rows} rows, raw table {batch.raw_rows_total} rows, "
        f"max lag {batch.max_millis_behind_latest} ms",
        flush=True,
    )


def _stream_reporter(
    settings: Settings, cleanup: contextlib.ExitStack
) -> Callable[[BatchReport], None]:
    """Print each batch; with $DAGSTER_HOME, record it there too, as
    ``defs.assets.ingest_continuously`` does, so the stream shows in Dagster as raw_events
    updates."""
    from kinesis_lake.defs.assets import raw_batch_reporter

    instance = None
    if os.environ.get("DAGSTER_HOME"):
        import dagster as dg

        instance = cleanup.enter_context(dg.DagsterInstance.get())
        print(
            f"recording each batch as a raw_events materialization in {instance.root_directory}",
            flush=True,
        )
    return raw_batch_reporter(settings, instance, then=_print_batch)


def cmd_query(args: argparse.Namespace) -> None:
    from kinesis_lake.iceberg.query import (
        CELL_WIDTH,
        format_csv,
        format_json_lines,
        format_table,
        run_sql,
    )

    settings = _settings()
    as_of_ms = _as_of_ms(args.as_of) if args.as_of else None
    catalog = _lake_with_tables(settings)
    result = run_sql(
        catalog, settings.namespace, args.sql, snapshot_id=args.snapshot, as_of_ms=as_of_ms
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


def cmd_history(args: argparse.Namespace) -> None:
    import pyarrow as pa

    from kinesis_lake.iceberg.query import format_table, table_history
    from kinesis_lake.pipeline.lake import load_table, table_names

    settings = _settings()
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


def cmd_replay(args: argparse.Namespace) -> None:
    """Move the quarantined records the declaration now takes into their tables."""
    from kinesis_lake.pipeline.preflight import check_directories, check_event_schema
    from kinesis_lake.pipeline.replay import replay_quarantine
    from kinesis_lake.spark.runtime.session import build_spark_session

    settings = _settings()
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


def cmd_acknowledge_loss(args: argparse.Namespace) -> None:
    """After a reported loss was dealt with: no_data_loss then counts only later skips."""
    from kinesis_lake.pipeline.data_loss import acknowledge_loss

    for stream in _streams(_settings(), args.stream):
        report = acknowledge_loss(stream)
        print(
            f"{stream.stream_name}: {report.skipped_ranges} skipped range(s) acknowledged; "
            "the no_data_loss check now counts only skips after this"
        )


def cmd_check(args: argparse.Namespace) -> None:
    from kinesis_lake.check_runner import check_command

    junit = Path(args.junit_xml) if args.junit_xml else None
    sys.exit(
        check_command(
            _settings(),
            args.select,
            junit,
            warnings_fail=args.warnings_fail,
            debug=args.debug,
        )
    )


def cmd_demo(args: argparse.Namespace) -> None:
    from kinesis_lake.demo import run_demo

    sys.exit(run_demo(events=args.events))


def cmd_dev(args: argparse.Namespace) -> None:
    from kinesis_lake.dev import run_dev

    run_dev(port=args.port, endpoint_port=args.endpoint_port, spark_port=args.spark_port)


_DESCRIPTION = (
    "The command line over the same code the Dagster assets run. Every command reads its "
    "settings from the environment (kinesis-lake settings lists them); --profile FILE "
    "loads a profile such as profiles/local.env first, without overriding variables that "
    "are already set."
)


class _FORMATTER(argparse.ArgumentDefaultsHelpFormatter):
    """Defaults shown, except where there is none to show or the help already says it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.default in (None, False, [], argparse.SUPPRESS) or "default" in text:
            return text
        return super()._get_help_string(action) or text


def _command(
    commands: argparse._SubParsersAction,
    name: str,
    summary: str,
    func: Callable[[argparse.Namespace], None],
    description: str | None = None,
) -> argparse.ArgumentParser:
    command = commands.add_parser(
        name, help=summary, description=description or summary, formatter_class=_FORMATTER
    )
    command.set_defaults(func=func)
    return command


def _profile_path(name: str) -> Path:
    """``name`` in the working directory, else in the repository (profiles/local.env from
    anywhere); a missing file fails naming both places."""
    given = Path(name)
    in_repository = Path(__file__).resolve().parent.parent / given
    for candidate in (given, in_repository):
        if candidate.is_file():
            return candidate
    raise ConfigurationError(
        f"--profile {name}: no such file here or in the repository ({in_repository}); "
        "pass the path of an env file such as profiles/local.env"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kinesis-lake", description=_DESCRIPTION, formatter_class=_FORMATTER
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        help="show the full trace of an error instead of its one-line message",
    )
    parser.add_argument(
        "--profile",
        default=os.environ.get("KINESIS_LAKE_PROFILE"),
        help="env file to load first, e.g. profiles/local.env (relative to the working "
        "directory, else the repository); default: $KINESIS_LAKE_PROFILE",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    settings = _command(commands, "settings", "print every setting and its value", cmd_settings)
    settings.add_argument(
        "--markdown", action="store_true", help="print the README's table of settings instead"
    )

    endpoint = _command(commands, "endpoint", "run the local Kinesis endpoint", cmd_endpoint)
    endpoint.add_argument("--port", type=int, default=LOCAL_ENDPOINT_PORT, help="port on 127.0.0.1")
    endpoint.add_argument(
        "--kind",
        choices=["auto", "kinesalite", "moto"],
        default=None,
        help="which endpoint; default: KINESIS_LAKE_ENDPOINT_KIND",
    )
    endpoint.add_argument("--in-memory", action="store_true", help="keep nothing on disk")

    connect = _command(
        commands,
        "connect-server",
        "run a long-lived Spark that commands and runs attach to (SPARK_MASTER=sc://...)",
        cmd_connect_server,
    )
    connect.add_argument("--port", type=int, default=SPARK_CONNECT_PORT, help="port to serve on")
    connect.add_argument(
        "--master", default=None, help="the server's Spark master; default: SPARK_MASTER"
    )
    connect.add_argument(
        "--reap-idle-daemons-after",
        type=float,
        default=REAP_IDLE_DAEMONS_AFTER_S,
        metavar="SECONDS",
        help="stop a run's Python daemons once idle this long (Spark keeps them until it "
        f"stops, SPARK-54055); 0 or less: never; default {REAP_IDLE_DAEMONS_AFTER_S:.0f}",
    )

    produce = _command(commands, "produce", "send generated JSON events", cmd_produce)
    produce.add_argument("--count", type=int, required=True, help="how many records to send")
    produce.add_argument(
        "--stream", default=None, help="the declared stream to send to (when there are several)"
    )
    produce.add_argument(
        "--rate", type=float, default=None, help="records per second; default: as fast as it can"
    )
    produce.add_argument(
        "--malformed-every",
        type=int,
        default=0,
        help="make every Nth record malformed (0: none), to see quarantine at work",
    )
    produce.add_argument(
        "--unrouted-every",
        type=int,
        default=0,
        help="make every Nth record a heartbeat no route takes (0: none)",
    )
    produce.add_argument(
        "--seed", type=int, default=None, help="same seed, same records; default: the time"
    )

    create_streams = _command(
        commands,
        "create-streams",
        "create the lake's streams that do not exist yet (the declaration's streams:, else "
        "KINESIS_STREAM_NAME), with KINESIS_SHARD_COUNT shards; existing ones are left as "
        "they are",
        cmd_create_streams,
    )
    create_streams.add_argument(
        "--stream", default=None, help="only this declared stream; default: every stream"
    )

    ingest = _command(commands, "ingest", "one bounded ingestion run (availableNow)", cmd_ingest)
    ingest.add_argument("--derive", action="store_true", help="refresh derived tables too")
    ingest.add_argument(
        "--stream", default=None, help="only this declared stream; default: every stream"
    )

    maintain = _command(
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

    stream = _command(commands, "stream", "continuous ingestion until SIGTERM/SIGINT", cmd_stream)
    stream.add_argument(
        "--trigger", default="5 seconds", help="processing-time trigger between micro-batches"
    )
    stream.add_argument(
        "--stream", default=None, help="the declared stream to follow (when there are several)"
    )

    query = _command(
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

    history = _command(commands, "history", "list a table's snapshots", cmd_history)
    history.add_argument("table", help="the table, e.g. raw_events")

    _command(
        commands,
        "replay",
        "move quarantined records the fixed declaration now takes into their tables",
        cmd_replay,
    )

    acknowledge = _command(
        commands,
        "acknowledge-loss",
        "clear the no_data_loss check once a reported loss was dealt with (later skips "
        "turn it red again)",
        cmd_acknowledge_loss,
    )
    acknowledge.add_argument(
        "--stream", default=None, help="only this declared stream; default: every stream"
    )

    check = _command(
        commands,
        "check",
        "run the asset checks against the lake (for CI); exit 1 when one fails",
        cmd_check,
        "Run the definitions' asset checks once against the configured lake, without "
        "materializing anything. Prints one line per check; exits 1 when a check fails "
        "with ERROR severity (or with WARN severity too, with --warnings-fail).",
    )
    check.add_argument(
        "--select",
        nargs="+",
        default=[],
        metavar="ASSET|CHECK|ASSET:CHECK",
        help="only these checks, e.g. raw_events events_quarantine:quarantine_ratio; default: all",
    )
    check.add_argument(
        "--junit-xml", metavar="PATH", default=None, help="also write the outcomes as JUnit XML"
    )
    check.add_argument(
        "--warnings-fail",
        action="store_true",
        help="a check failing with WARN severity fails the command too",
    )

    demo = _command(commands, "demo", "the whole pipeline once, end to end", cmd_demo)
    demo.add_argument("--events", type=int, default=2000, help="records to send, in two waves")

    dev = _command(commands, "dev", "local endpoint + dagster dev", cmd_dev)
    dev.add_argument("--port", type=int, default=3000, help="the Dagster UI's port")
    dev.add_argument(
        "--endpoint-port",
        type=int,
        default=LOCAL_ENDPOINT_PORT,
        help="the local Kinesis endpoint's port",
    )
    dev.add_argument(
        "--spark-port",
        type=int,
        default=SPARK_CONNECT_PORT,
        help="the Spark Connect server's port (none starts when SPARK_MASTER is set)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:
        if args.profile:
            load_profile(_profile_path(args.profile))
        args.func(args)
    except Exception as error:
        if args.debug or (message := error_line(error)) is None:
            raise
        log = _spark_log()
        raise SystemExit(
            f"kinesis-lake: {message}" + (f"\n(Spark's log: {log})" if log else "")
        ) from None


def error_line(error: BaseException) -> str | None:
    """The one line to print for ``error`` if it is one of ours, else None (a bug: show its
    trace). Spark hands back what a data source raised on the driver or an executor as a
    Py4J/streaming exception whose text holds the original ``SomeError: message`` line."""
    if isinstance(error, ConfigurationError):
        return f"configuration error: {error}"
    if isinstance(error, KinesisLakeError):
        return str(error)
    ours = {cls.__name__ for cls in _subclasses(KinesisLakeError)}
    for line in reversed(str(error).splitlines()):
        name, _, message = line.strip().partition(": ")
        if name.rsplit(".", 1)[-1] in ours and message:
            return message
    return None


def _subclasses(cls: type) -> set[type]:
    found: set[type] = set(cls.__subclasses__())
    for sub in list(found):
        found |= _subclasses(sub)
    return found


def _spark_log() -> Path | None:
    """The Spark log of this command, when it started Spark and wrote one."""
    if "pyspark" not in sys.modules:
        return None
    from kinesis_lake.spark.runtime.session import spark_log_file

    try:
        log = spark_log_file(Settings.from_env().log_dir)
    except KinesisLakeError:
        return None
    return log if log.exists() else None


if __name__ == "__main__":
    main()
