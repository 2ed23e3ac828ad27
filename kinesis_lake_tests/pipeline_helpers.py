"""Helpers of the pipeline tests (and of the Dagster, CLI and simulation tests that run the
same jobs): put records, run ingestion and derive, crash a job at a chosen commit, and
ground truth taken independently of the code under test.

``stream_truth`` reads the stream with plain boto3 GetRecords loops (not our ShardReader),
so a test compares what the pipeline committed with what Kinesis actually holds.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import boto3
import psutil

from kinesis_lake.config import Settings
from kinesis_lake.iceberg.catalog import open_catalog
from kinesis_lake.kinesis.client import kinesis_client
from kinesis_lake.kinesis.producer import PutSummary, put_records, sample_events
from kinesis_lake.kinesis.streams import ensure_stream
from kinesis_lake.pipeline.derive import DeriveResult, refresh_downstream
from kinesis_lake.pipeline.ingest import run_ingestion
from kinesis_lake.pipeline.lake import open_lake
from kinesis_lake.pipeline.reconcile import RoutedReconciliation, reconcile_routed
from kinesis_lake_tests.ambiguous_catalog import (
    RAISES_BEFORE,
    arm,
    arm_race,
    catalog_environment,
)
from kinesis_lake_tests.kinesis.helpers import put as put_entries

REPO = Path(__file__).resolve().parents[1]


def produce(
    settings: Settings, count: int, *, malformed_every: int = 0, seed: int = 0
) -> PutSummary:
    client = kinesis_client(settings.endpoint_url, settings.region)
    ensure_stream(client, settings.stream_name, settings.shard_count)
    events = sample_events(count, malformed_every=malformed_every, seed=seed)
    return put_records(client, settings.stream_name, events)


def put(
    settings: Settings, *payloads: bytes | dict[str, Any], keys: Sequence[str] = ("p",)
) -> list[str]:
    """Put records one by one (a dict as JSON), each on the next of ``keys`` in turn: on one
    key they keep the order given; on several, every shard gets some. Returns their
    sequence numbers."""
    client = kinesis_client(settings.endpoint_url, settings.region)
    ensure_stream(client, settings.stream_name, settings.shard_count)
    entries = [
        (keys[index % len(keys)], data if isinstance(data, bytes) else json.dumps(data).encode())
        for index, data in enumerate(payloads)
    ]
    return put_entries(client, settings.stream_name, entries)


def read_stream(client: Any, stream_name: str) -> list[dict[str, Any]]:
    """Every record the stream holds, from TRIM_HORIZON, read with bare boto3 calls and
    nothing of ours: the ground truth the pipeline is checked against. Each record also
    carries its ``ShardId``."""
    found: list[dict[str, Any]] = []
    for shard in client.list_shards(StreamName=stream_name)["Shards"]:
        iterator = client.get_shard_iterator(
            StreamName=stream_name, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        while iterator:
            page = client.get_records(ShardIterator=iterator, Limit=10_000)
            found += [{**record, "ShardId": shard["ShardId"]} for record in page["Records"]]
            if not page["Records"]:
                break
            iterator = page.get("NextShardIterator")
    return found


def stream_truth(settings: Settings) -> set[tuple[str, str]]:
    """Every (shard id, sequence number) in the stream (see :func:`read_stream`)."""
    client = boto3.client(
        "kinesis", endpoint_url=settings.endpoint_url, region_name=settings.region
    )
    return {(r["ShardId"], r["SequenceNumber"]) for r in read_stream(client, settings.stream_name)}


def table_rows(settings: Settings, table: str, columns: tuple[str, ...] = ()) -> list[dict]:
    catalog = open_catalog(settings.catalog_name, data_dir=settings.data_dir)
    scan = catalog.load_table(table).scan(selected_fields=columns or ("*",))
    return scan.to_arrow().to_pylist()


def raw_keys(settings: Settings) -> list[tuple[str, str, int]]:
    rows = table_rows(
        settings, settings.raw_table, ("shard_id", "sequence_number", "sub_sequence_number")
    )
    return [(r["shard_id"], r["sequence_number"], r["sub_sequence_number"]) for r in rows]


def raw_rows(settings: Settings) -> int:
    return len(raw_keys(settings))


def table_ids(settings: Settings, table: str) -> list[str]:
    """The ``id`` column of a table of the declaration, sorted."""
    return sorted(r["id"] for r in table_rows(settings, settings.table_identifier(table)))


def settings_env(settings: Settings) -> dict[str, str]:
    """The environment that makes Settings.from_env() equal ``settings`` in a subprocess."""
    return {**os.environ, **settings.to_env()}


def run_cli(settings: Settings, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run ``kinesis-lake`` in a new process: a new JVM, a new Spark session."""
    return run_cli_with(settings_env(settings), *args, timeout=timeout)


def run_cli_with(
    env: dict[str, str], *args: str, timeout: float = 600
) -> subprocess.CompletedProcess:
    """``run_cli`` in exactly the environment ``env`` (settings a Settings cannot hold)."""
    return subprocess.run(
        [sys.executable, "-m", "kinesis_lake.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    """The one line a failed command printed on stderr; a second line fails the test."""
    assert done.returncode != 0, done.stdout
    (line,) = done.stderr.strip().splitlines()
    return line


def reconciliation(settings: Settings, tables: Sequence[str]) -> RoutedReconciliation:
    """The reconciles_with_raw check's own computation over the declared ``tables``: is
    every raw row of ``settings``' stream in the tables its routes name or in quarantine,
    once."""
    catalog = open_lake(settings)
    return reconcile_routed(
        catalog.load_table(settings.raw_table),
        {name: catalog.load_table(settings.table_identifier(name)) for name in tables},
        catalog.load_table(settings.quarantine_table),
        routes_everything=False,
    )


def assert_reconciled(settings: Settings, tables: Sequence[str]) -> None:
    report = reconciliation(settings, tables)
    assert report.passed, report


def event(event_id: str, when: str) -> dict[str, Any]:
    """An event of the demo schema (``events``, the aggregate)."""
    return {"event_id": event_id, "event_type": "t", "event_time": when}


def ingest_and_derive(spark, settings: Settings, *payloads: bytes | dict[str, Any]) -> DeriveResult:
    """Put ``payloads`` (in order), ingest them and refresh every derived table."""
    put(settings, *payloads)
    run_ingestion(spark, settings)
    return refresh_downstream(spark, settings)


def assert_accounted(settings: Settings) -> tuple[list[dict], list[dict]]:
    """Of the demo schema's lake: parsed + quarantined == raw, each raw record once, and
    the aggregate is a recount. Returns the parsed and the quarantined rows."""
    identity = ("shard_id", "sequence_number", "sub_sequence_number")
    raw = [tuple(r[c] for c in identity) for r in table_rows(settings, settings.raw_table)]
    parsed = table_rows(settings, settings.table_identifier("events"))
    quarantined = table_rows(settings, settings.quarantine_table)
    derived = [tuple(r[c] for c in identity) for r in [*parsed, *quarantined]]
    assert Counter(derived) == Counter(raw), "every raw record parsed or quarantined once"
    counts = table_rows(settings, settings.aggregate_table)
    recount = Counter(
        (r["event_timestamp"].replace(second=0, microsecond=0), r["event_type"]) for r in parsed
    )
    assert {(r["window_start"], r["event_type"]): r["event_count"] for r in counts} == recount
    return parsed, quarantined


_JOB = (
    "from kinesis_lake.config import Settings\n"
    "from kinesis_lake.pipeline.{module} import {function}\n"
    "from kinesis_lake.spark.runtime.session import build_spark_session\n"
    "{function}(build_spark_session('local[1]', app_name='crash'), Settings.from_env())\n"
)


def derive_with_a_failing_commit(
    settings: Settings,
    table: str,
    job: str = "derive.refresh_downstream",
    mode: str = RAISES_BEFORE,
) -> subprocess.CompletedProcess:
    """Run ``job`` (a pipeline function of Spark and settings; the refresh by default) in a
    new process whose catalog (the same SQLite database) fails the next commit of
    ``table`` (refuses it, or with ``LANDS_THEN_RAISES`` applies it and then raises), so
    the job dies right after that commit's predecessors."""
    faults = settings.data_dir.parent / "catalog-faults.json"
    arm(faults, mode, error="generic", table=table)
    return run_job_with_faults(settings, job, faults)


def derive_raced_inside_a_commit(
    settings: Settings, table: str, call: str, argument: str
) -> subprocess.CompletedProcess:
    """The refresh in a new process in which ``call(argument)`` (another writer: a
    maintenance pass, say) runs inside the next commit of ``table``, before it lands."""
    faults = settings.data_dir.parent / "catalog-faults.json"
    arm_race(faults, call, argument, table=table)
    return run_job_with_faults(settings, "derive.refresh_downstream", faults)


def run_job_with_faults(settings: Settings, job: str, faults: Path) -> subprocess.CompletedProcess:
    """``job`` (``module.function`` of kinesis_lake.pipeline) in a new process whose
    catalog is the ambiguous one over the same SQLite database, obeying ``faults``."""
    module, function = job.split(".")
    env = {
        **settings_env(settings),
        **catalog_environment(settings.data_dir, faults, settings.catalog_name),
        "PYTHONPATH": str(REPO),
    }
    return subprocess.run(
        [sys.executable, "-c", _JOB.format(module=module, function=function)],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def processes_with_data_dir(data_dir: Path) -> list[psutil.Process]:
    """Every live process with ``data_dir`` as its ``KINESIS_LAKE_DATA_DIR``: whatever a
    command started, directly or not, inherits it (orphans and new sessions too)."""
    found = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if process.environ().get("KINESIS_LAKE_DATA_DIR") == str(data_dir) and (
                process.status() != psutil.STATUS_ZOMBIE
            ):
                found.append(process)
    return found
