"""Benchmark 2: ingest throughput and table shape against a hand-written consumer.

The baseline is the simplest pipeline a user would write without this project: one
Python process, for each shard a boto3 GetRecords loop from TRIM_HORIZON, every response
appended to the Iceberg table with pyiceberg ``table.append`` (one commit per response),
until the shard is caught up. It writes the same raw table definition (schema, day
partitioning, table properties) so that only the pipeline differs, and it is given the
easiest job: no pacing, no retries, no exactly-once bookkeeping, no restart story.

Ours is the same ``run_ingestion`` measurement as benchmark 1 (shared, same run).
"""

from __future__ import annotations

import time
from typing import Any

import pyarrow as pa

from benchmarks.context import BenchContext
from benchmarks.ingest_ceiling import ours_ingest
from benchmarks.machine import load_now
from benchmarks.memory import cli_ingest, cli_ingest_over_connect
from benchmarks.stats import ratio, verdict
from benchmarks.streams import kinesis

NAME = "ingest_vs_hand_written"
SPARK_MASTERS = ("local[2]",)
TARGET = 2.0
FILES_TARGET = 0.1
# `kinesis-lake ingest` as a new process (JVM start included) against the same loop.
END_TO_END_TARGET = 1.5


def _response_to_arrow(stream_name: str, shard_id: str, records: list[dict]) -> pa.Table:
    from kinesis_lake.iceberg.raw_table import RAW_ARROW_SCHEMA

    now_us = int(time.time() * 1_000_000)
    count = len(records)
    return pa.Table.from_pydict(
        {
            "stream_name": [stream_name] * count,
            "shard_id": [shard_id] * count,
            "sequence_number": [r["SequenceNumber"] for r in records],
            "sub_sequence_number": [0] * count,
            "partition_key": [r["PartitionKey"] for r in records],
            "approximate_arrival_timestamp": [r["ApproximateArrivalTimestamp"] for r in records],
            "data": [r["Data"] for r in records],
            "aggregated": [False] * count,
            "source_error": [None] * count,
            "ingested_at": [now_us] * count,
            "batch_id": [0] * count,
        },
        schema=RAW_ARROW_SCHEMA,
    )


def hand_written_consumer(
    endpoint_url: str, stream_name: str, ctx: BenchContext, *, limit: int
) -> dict[str, Any]:
    """Drain every shard with GetRecords + ``table.append`` per response; time it."""
    from kinesis_lake.iceberg.catalog import ensure_namespace, open_catalog
    from kinesis_lake.iceberg.raw_table import ensure_raw_table

    catalog = open_catalog("hand_written", data_dir=ctx.scratch("hand-written"))
    ensure_namespace(catalog, "hand")
    table = ensure_raw_table(catalog, "hand.raw_events")
    client = kinesis(endpoint_url)
    shards = [s["ShardId"] for s in client.list_shards(StreamName=stream_name)["Shards"]]
    appends = 0
    append_seconds = 0.0
    started = time.perf_counter()
    for shard_id in shards:
        iterator = client.get_shard_iterator(
            StreamName=stream_name, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        for _ in range(100_000):  # bounded; a shard needs about records / limit calls
            page = client.get_records(ShardIterator=iterator, Limit=limit)
            if not page["Records"]:
                break
            before = time.perf_counter()
            table.append(_response_to_arrow(stream_name, shard_id, page["Records"]))
            append_seconds += time.perf_counter() - before
            appends += 1
            iterator = page.get("NextShardIterator")
            if iterator is None:
                break
    seconds = time.perf_counter() - started
    table.refresh()
    tasks = list(table.scan().plan_files())
    rows = sum(t.file.record_count for t in tasks)
    return {
        "rows": rows,
        "seconds": round(seconds, 3),
        "rows_per_second": round(rows / seconds, 1),
        "appends": appends,
        "append_seconds": round(append_seconds, 3),
        "get_records_limit": limit,
        "table": {
            "data_files": len(tasks),
            "snapshots": len(table.metadata.snapshots),
            "rows": rows,
            "bytes": sum(t.file.file_size_in_bytes for t in tasks),
        },
        "load_average": load_now(),
    }


def run(ctx: BenchContext) -> dict[str, Any]:
    stream = ctx.stream_with(ctx.sizes.backlog)
    ours = ours_ingest(ctx)
    theirs = hand_written_consumer(
        ctx.endpoint_url, stream, ctx, limit=ctx.sizes.hand_written_limit
    )
    if theirs["rows"] != ctx.sizes.backlog:
        raise RuntimeError(f"hand-written consumer committed {theirs['rows']} rows")
    end_to_end = cli_ingest(ctx, ctx.sizes.backlog)
    over_connect = cli_ingest_over_connect(ctx, ctx.sizes.backlog)
    warm = ours["runs"]["warm"]
    headline = ratio(warm["rows_per_second"], theirs["rows_per_second"])
    files_ratio = ratio(warm["table"]["data_files"], theirs["table"]["data_files"])
    return {
        "records": ctx.sizes.backlog,
        "ours": {
            "rows_per_second_warm": warm["rows_per_second"],
            "rows_per_second_end_to_end": end_to_end["run_ingestion_rows_per_second"],
            "rows_per_second_including_jvm_start": end_to_end["process_rows_per_second"],
            "rows_per_second_over_connect": over_connect["process_rows_per_second"],
            "table": warm["table"],
            "batches_with_rows": warm["batches_with_rows"],
        },
        "hand_written": theirs,
        "ratio": headline,
        "ratio_end_to_end": ratio(
            end_to_end["run_ingestion_rows_per_second"], theirs["rows_per_second"]
        ),
        "ratio_including_jvm_start": ratio(
            end_to_end["process_rows_per_second"], theirs["rows_per_second"]
        ),
        "ratio_over_connect": ratio(
            over_connect["process_rows_per_second"], theirs["rows_per_second"]
        ),
        "files_ratio": files_ratio,
        "snapshots_ratio": ratio(warm["table"]["snapshots"], theirs["table"]["snapshots"]),
        "target": f">= {TARGET} (throughput), <= {FILES_TARGET} (data files)",
        "verdict": verdict(headline, TARGET, at_least=True),
        "files_verdict": verdict(files_ratio, FILES_TARGET, at_least=False),
        "end_to_end_target": f">= {END_TO_END_TARGET} (whole process, either deployment)",
        "end_to_end_verdict": verdict(
            ratio(
                max(end_to_end["process_rows_per_second"], over_connect["process_rows_per_second"]),
                theirs["rows_per_second"],
            ),
            END_TO_END_TARGET,
            at_least=True,
        ),
        "notes": (
            "hand-written = one process, shards drained one after another, GetRecords "
            f"Limit={ctx.sizes.hand_written_limit}, one table.append per response, same "
            "raw table definition. ratio uses our warm (steady-state) run; "
            "ratio_over_connect: `kinesis-lake ingest` attached to a warm Spark Connect "
            "server (what make dev runs), whole process."
        ),
    }
