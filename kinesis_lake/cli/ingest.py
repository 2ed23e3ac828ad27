"""Ingestion: ``ingest`` (one bounded run, then the downstream tables with ``--derive``),
``stream`` (continuous, until SIGTERM or SIGINT) and ``acknowledge-loss`` (after a
reported loss was dealt with)."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from kinesis_lake.cli.common import (
    Commands,
    add_command,
    chosen_streams,
    current_settings,
)
from kinesis_lake.config import Settings

if TYPE_CHECKING:
    from kinesis_lake.pipeline.derive import DeriveResult
    from kinesis_lake.pipeline.ingest_report import BatchReport


def cmd_ingest(args: argparse.Namespace) -> None:
    from kinesis_lake.console import IngestProgress
    from kinesis_lake.pipeline.derive import refresh_downstream
    from kinesis_lake.pipeline.ingest import run_ingestion
    from kinesis_lake.pipeline.preflight import preflight
    from kinesis_lake.spark.runtime.session import build_spark_session

    settings = current_settings()
    streams = chosen_streams(settings, args.stream)
    for stream in streams:
        preflight(stream, event_schema=args.derive)
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


def add_ingest(commands: Commands) -> None:
    ingest = add_command(commands, "ingest", "one bounded ingestion run (availableNow)", cmd_ingest)
    ingest.add_argument("--derive", action="store_true", help="refresh derived tables too")
    ingest.add_argument(
        "--stream", default=None, help="only this declared stream; default: every stream"
    )


def cmd_stream(args: argparse.Namespace) -> None:
    """Continuous ingestion until SIGTERM/SIGINT; each batch is printed and, when
    $DAGSTER_HOME is set, recorded there as a raw_events materialization."""
    from kinesis_lake.pipeline.ingest import run_continuous
    from kinesis_lake.pipeline.preflight import preflight
    from kinesis_lake.spark.runtime.session import build_spark_session

    (settings,) = chosen_streams(current_settings(), args.stream, one=True)
    preflight(settings, event_schema=False)
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
    ``defs.raw_assets.ingest_continuously`` does, so the stream shows in Dagster as raw_events
    updates."""
    from kinesis_lake.defs.raw_assets import raw_batch_reporter

    instance = None
    if os.environ.get("DAGSTER_HOME"):
        import dagster as dg

        instance = cleanup.enter_context(dg.DagsterInstance.get())
        print(
            f"recording each batch as a raw_events materialization in {instance.root_directory}",
            flush=True,
        )
    return raw_batch_reporter(settings, instance, then=_print_batch)


def add_stream(commands: Commands) -> None:
    stream = add_command(
        commands, "stream", "continuous ingestion until SIGTERM/SIGINT", cmd_stream
    )
    stream.add_argument(
        "--trigger", default="5 seconds", help="processing-time trigger between micro-batches"
    )
    stream.add_argument(
        "--stream", default=None, help="the declared stream to follow (when there are several)"
    )


def cmd_acknowledge_loss(args: argparse.Namespace) -> None:
    """After a reported loss was dealt with: no_data_loss then counts only later skips."""
    from kinesis_lake.pipeline.data_loss import acknowledge_loss

    for stream in chosen_streams(current_settings(), args.stream):
        report = acknowledge_loss(stream)
        print(
            f"{stream.stream_name}: {report.skipped_ranges} skipped range(s) acknowledged; "
            "the no_data_loss check now counts only skips after this"
        )


def add_acknowledge_loss(commands: Commands) -> None:
    acknowledge = add_command(
        commands,
        "acknowledge-loss",
        "clear the no_data_loss check once a reported loss was dealt with (later skips "
        "turn it red again)",
        cmd_acknowledge_loss,
    )
    acknowledge.add_argument(
        "--stream", default=None, help="only this declared stream; default: every stream"
    )
