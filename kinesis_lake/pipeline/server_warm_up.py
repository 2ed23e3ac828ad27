"""Warm a Spark Connect server that has just started by running the whole path once, on
an endpoint, a stream and a lake of its own.

A Connect server's first run pays for what every later run finds ready: the JVM's classes
and compiled code for the queries, and the Python daemons and workers of each data-source
runner (planner, reader, writer, committer, routing). Measured on 2 cores (2026-12-06,
``kinesis-lake ingest --derive`` of 1,000 records into a new lake): 45 s on a server's
first run, 12 s on its second, whose lake was new too, so the cost is the server's, not
the lake's. In ``make dev`` that first run was the first burst's, whose downstream tables
landed 58-77 s after the put instead of about 25 s (benchmark 13's first burst).

Invariant: nothing of the user's is read or changed. The Kinesis endpoint is a local one
started here in memory (no stream of the user's can share its name; it keeps nothing when
stopped), the lake is a scratch directory whose catalog name is refused if configured (and
is removed afterwards), and the declaration is the shipped ``schemas/clickstream.yaml``
(JSON records routed, quarantined, aggregated, upserted and selected by SQL: the refreshes
every lake runs; other payload formats and a second stream stay cold).
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import time
import traceback
from pathlib import Path
from types import FrameType
from typing import NamedTuple

from kinesis_lake.config import Settings
from kinesis_lake.errors import ConfigurationError
from kinesis_lake.iceberg.catalog import configured_catalog_properties
from kinesis_lake.kinesis.client import kinesis_client
from kinesis_lake.kinesis.endpoint import LocalKinesisEndpoint
from kinesis_lake.kinesis.producer import put_records, sample_events
from kinesis_lake.kinesis.streams import ensure_stream

WARM_UP_STREAM = "kinesis-lake-warm-up"
WARM_UP_CATALOG = "kinesis_lake_warm_up"
WARM_UP_RECORDS = 200
WARM_UP_REGION = "us-east-1"
"""Any region will do for an endpoint of its own; without one boto3 refuses to start."""
DECLARATION = Path(__file__).resolve().parents[2] / "schemas" / "clickstream.yaml"


class WarmUp(NamedTuple):
    seconds: float
    rows_ingested: int
    tables_written: int
    """Downstream tables the refresh committed rows to: each kind of refresh ran."""


def warm_up_settings(spark_master: str, endpoint_url: str, scratch_dir: Path) -> Settings:
    """The scratch lake's settings, built from none of the environment's settings, so that
    none of them can name a catalog, namespace, table or checkpoint of the user's."""
    if configured_catalog_properties(WARM_UP_CATALOG) is not None:
        raise ConfigurationError(
            f"A pyiceberg catalog named {WARM_UP_CATALOG} is configured; the Connect server's "
            "warm-up keeps its scratch lake under that name: rename that catalog."
        )
    return Settings.from_env(
        {
            "SPARK_MASTER": spark_master,
            "KINESIS_ENDPOINT_URL": endpoint_url,
            "AWS_REGION": WARM_UP_REGION,
            "KINESIS_STREAM_NAME": WARM_UP_STREAM,
            "KINESIS_SHARD_COUNT": "1",
            "KINESIS_STARTING_POSITION": "trim_horizon",
            "KINESIS_LAKE_DATA_DIR": str(scratch_dir),
            "KINESIS_LAKE_CATALOG": WARM_UP_CATALOG,
            "KINESIS_LAKE_EVENT_SCHEMA": str(DECLARATION),
        }
    )


def warm_up_server(spark_master: str, scratch_dir: Path) -> WarmUp:
    """Ingest and derive ``WARM_UP_RECORDS`` records through the server at
    ``spark_master``. ``scratch_dir`` is gone afterwards, whatever happened."""
    from kinesis_lake.pipeline.derive import refresh_downstream
    from kinesis_lake.pipeline.ingest import run_ingestion
    from kinesis_lake.spark.runtime.session import build_spark_session

    started = time.monotonic()
    shutil.rmtree(scratch_dir, ignore_errors=True)  # what a killed warm-up left
    try:
        with LocalKinesisEndpoint() as endpoint:
            settings = warm_up_settings(spark_master, endpoint.url, scratch_dir)
            client = kinesis_client(endpoint.url, settings.region)
            ensure_stream(client, WARM_UP_STREAM, settings.shard_count)
            events = sample_events(WARM_UP_RECORDS, malformed_every=50)
            put_records(client, WARM_UP_STREAM, events)
            spark = build_spark_session(spark_master)
            try:
                ingested = run_ingestion(spark, settings)
                derived = refresh_downstream(spark, settings)
            finally:
                spark.stop()
    finally:
        shutil.rmtree(scratch_dir, ignore_errors=True)
    refreshes = [
        *derived.tables.values(),
        derived.quarantine,
        derived.aggregate,
        *derived.derived.values(),
    ]
    written = sum(refresh.rows_written > 0 for refresh in refreshes)
    return WarmUp(time.monotonic() - started, ingested.rows, written)


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _stop_once(signum: int, frame: FrameType | None) -> None:
    """The first stop signal ends the warm-up by unwinding, so that its endpoint stops and
    its scratch lake is removed; later ones would cut that short, and are ignored."""
    for each in STOP_SIGNALS:
        signal.signal(each, signal.SIG_IGN)
    raise SystemExit(128 + signum)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spark_master")
    parser.add_argument("scratch_dir", type=Path)
    parser.add_argument("--log", default="stderr", help="where stderr goes, for the message")
    args = parser.parse_args()
    for each in STOP_SIGNALS:
        signal.signal(each, _stop_once)
    try:
        done = warm_up_server(args.spark_master, args.scratch_dir)
    except Exception as error:
        traceback.print_exc()
        first_line = next(iter(str(error).splitlines()), "")
        print(
            f"Spark Connect server warm-up failed ({type(error).__name__}: {first_line}; "
            f"traceback in {args.log}): the first run starts the server's processes "
            "instead, about 30 s more.",
            flush=True,
        )
        sys.exit(1)
    print(
        f"Spark Connect server warmed up in {done.seconds:.0f} s ({done.rows_ingested} "
        f"records ingested into a scratch lake, {done.tables_written} downstream tables "
        "written): runs start warm.",
        flush=True,
    )


if __name__ == "__main__":
    main()
