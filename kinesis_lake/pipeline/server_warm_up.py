"""Warm a Spark Connect server that has just started by running the whole path once, on
a stream and a lake of its own.

A Connect server's first run pays for what every later run finds ready: the JVM's classes
and compiled code for the queries, and the Python daemons and workers of each data-source
runner (planner, reader, writer, committer, routing). Measured on 2 cores (2026-12-06,
``kinesis-lake ingest --derive`` of 1,000 records into a new lake): 45 s on a server's
first run, 12 s on its second, whose lake was new too, so the cost is the server's, not
the lake's. In ``make dev`` that first run was the first burst's, whose downstream tables
landed 58-77 s after the put instead of about 25 s (benchmark 13's first burst).

Invariant: nothing of the user's is read or changed. The stream is this module's own on
the local endpoint (deleted afterwards), the lake is a scratch directory whose catalog
name nobody configures (removed afterwards), and the declaration is the shipped
``schemas/clickstream.yaml``, which routes, quarantines, aggregates, upserts and runs SQL:
every kind of refresh a user's declaration can ask for.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import NamedTuple

from kinesis_lake.config import Settings
from kinesis_lake.kinesis.client import kinesis_client
from kinesis_lake.kinesis.producer import put_records, sample_events
from kinesis_lake.kinesis.streams import ensure_stream

WARM_UP_STREAM = "kinesis-lake-warm-up"
WARM_UP_CATALOG = "kinesis_lake_warm_up"
WARM_UP_RECORDS = 200
DECLARATION = Path(__file__).resolve().parents[2] / "schemas" / "clickstream.yaml"


def warm_up_settings(spark_master: str, endpoint_url: str, scratch_dir: Path) -> Settings:
    """The scratch lake's settings: built from nothing of the environment's, so that no
    catalog, namespace, table or stream of the user's can be named by them."""
    return Settings.from_env(
        {
            "SPARK_MASTER": spark_master,
            "KINESIS_ENDPOINT_URL": endpoint_url,
            "KINESIS_STREAM_NAME": WARM_UP_STREAM,
            "KINESIS_SHARD_COUNT": "1",
            "KINESIS_STARTING_POSITION": "trim_horizon",
            "KINESIS_LAKE_DATA_DIR": str(scratch_dir),
            "KINESIS_LAKE_CATALOG": WARM_UP_CATALOG,
            "KINESIS_LAKE_EVENT_SCHEMA": str(DECLARATION),
        }
    )


class WarmUp(NamedTuple):
    seconds: float
    rows_ingested: int
    tables_written: int
    """Downstream tables the refresh committed rows to: each kind of refresh ran."""


def warm_up_server(spark_master: str, endpoint_url: str, scratch_dir: Path) -> WarmUp:
    """Ingest and derive ``WARM_UP_RECORDS`` records through the server at
    ``spark_master``. The stream and ``scratch_dir`` are gone afterwards."""
    from kinesis_lake.pipeline.derive import refresh_downstream
    from kinesis_lake.pipeline.ingest import run_ingestion
    from kinesis_lake.spark.runtime.session import build_spark_session

    started = time.monotonic()
    shutil.rmtree(scratch_dir, ignore_errors=True)  # what a killed warm-up left
    settings = warm_up_settings(spark_master, endpoint_url, scratch_dir)
    client = kinesis_client(endpoint_url, settings.region)
    try:
        ensure_stream(client, WARM_UP_STREAM, settings.shard_count)
        put_records(client, WARM_UP_STREAM, sample_events(WARM_UP_RECORDS, malformed_every=50))
        spark = build_spark_session(spark_master, log_dir=scratch_dir / "logs")
        try:
            ingested = run_ingestion(spark, settings)
            derived = refresh_downstream(spark, settings)
        finally:
            spark.stop()
    finally:
        with contextlib.suppress(Exception):  # the endpoint may be stopping with dev
            client.delete_stream(StreamName=WARM_UP_STREAM, EnforceConsumerDeletion=True)
        shutil.rmtree(scratch_dir, ignore_errors=True)
    refreshes = [
        *derived.tables.values(),
        derived.quarantine,
        derived.aggregate,
        *derived.derived.values(),
    ]
    written = sum(refresh.rows_written > 0 for refresh in refreshes)
    return WarmUp(time.monotonic() - started, ingested.rows, written)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spark_master")
    parser.add_argument("endpoint_url")
    parser.add_argument("scratch_dir", type=Path)
    args = parser.parse_args()
    # Stopped (dev's exit), it still deletes its stream and scratch lake on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    try:
        done = warm_up_server(args.spark_master, args.endpoint_url, args.scratch_dir)
    except KeyboardInterrupt:  # Ctrl-C reaches dev's whole process group: dev is stopping
        raise SystemExit(130) from None
    except Exception as error:
        first_line = next(iter(str(error).splitlines()), "")
        print(
            f"Spark Connect server warm-up failed ({type(error).__name__}: {first_line}); the "
            "first run will start it up instead, which takes about 30 s longer.",
            flush=True,
        )
        raise SystemExit(1) from error
    print(
        f"Spark Connect server warmed up in {done.seconds:.0f} s ({done.rows_ingested} "
        f"records ingested into a scratch lake, {done.tables_written} downstream tables "
        "written): runs start warm.",
        flush=True,
    )


if __name__ == "__main__":
    main()
