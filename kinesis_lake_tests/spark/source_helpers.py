"""Shared helpers of the ``test_kinesis_source_*`` tests (this module holds no tests).

Queries run the real ``kinesis`` source in the session's Spark against real endpoints
over HTTP. ``run_source`` sinks into ``foreachBatch``, which runs in this test process,
so a test sees every row together with the micro-batch that delivered it. Streams are
written and inspected with plain boto3 calls, never with the code under test.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path

import boto3
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from kinesis_lake.kinesis.producer import put_records
from kinesis_lake.spark.kinesis.available_now import AvailableNow
from kinesis_lake_tests.pipeline_helpers import read_stream

REGION = "us-east-1"
QUERY_TIMEOUT_S = 600
ACTIVE_TIMEOUT_S = 60
NEW_SHARD_LEAD_S = 1.0
"""kinesalite dates a shard made by a split or merge this far ahead of its clock and
stamps records put into it with that date (``shardCreateTime: now + 1000``); real Kinesis
stamps arrival with its own clock."""


def kinesis(endpoint_url: str):
    """A bare boto3 client (botocore's own retries), independent of the code under test."""
    return boto3.client("kinesis", endpoint_url=endpoint_url, region_name=REGION)


def new_stream(endpoint_url: str, shards: int = 2) -> str:
    name = f"src-{uuid.uuid4().hex[:10]}"
    client = kinesis(endpoint_url)
    client.create_stream(StreamName=name, ShardCount=shards)
    wait_active(client, name)
    return name


def wait_active(client, stream: str) -> None:
    """After CreateStream, SplitShard or MergeShards: writes before ACTIVE may go astray."""
    client.get_waiter("stream_exists").wait(
        StreamName=stream, WaiterConfig={"Delay": 0.2, "MaxAttempts": ACTIVE_TIMEOUT_S * 5}
    )


def shard_ids(client, stream: str) -> list[str]:
    shards = client.describe_stream(StreamName=stream)["StreamDescription"]["Shards"]
    return sorted(s["ShardId"] for s in shards)


def split(client, stream: str, shard_id: str) -> None:
    """Split a shard of the initial even layout in the middle of its hash range."""
    shard = next(
        s
        for s in client.describe_stream(StreamName=stream)["StreamDescription"]["Shards"]
        if s["ShardId"] == shard_id
    )
    low = int(shard["HashKeyRange"]["StartingHashKey"])
    high = int(shard["HashKeyRange"]["EndingHashKey"])
    client.split_shard(
        StreamName=stream, ShardToSplit=shard_id, NewStartingHashKey=str((low + high + 1) // 2)
    )
    _wait_for_new_shards(client, stream)


def merge(client, stream: str, shard_id: str, adjacent_id: str) -> None:
    client.merge_shards(StreamName=stream, ShardToMerge=shard_id, AdjacentShardToMerge=adjacent_id)
    _wait_for_new_shards(client, stream)


def _wait_for_new_shards(client, stream: str) -> None:
    """Return once the reshard is done and, as on real Kinesis, a record put now arrives
    now: otherwise an availableNow run started within kinesalite's lead leaves it out."""
    wait_active(client, stream)
    time.sleep(NEW_SHARD_LEAD_S)


def keyed_events(wave: str, keys: int, per_key: int) -> list[tuple[str, bytes]]:
    """``per_key`` events for each of ``keys`` partition keys, interleaved; the payload
    ``key:wave:i`` says where the event stands in its key's order."""
    return [
        (f"key-{k}", f"key-{k}:{wave}:{i:04d}".encode())
        for i in range(per_key)
        for k in range(keys)
    ]


def put(endpoint_url: str, stream: str, entries: Iterable[tuple[str, bytes]]) -> None:
    """PutRecords in order, re-sending only failed entries (the project's producer)."""
    put_records(kinesis(endpoint_url), stream, list(entries))


def source_options(endpoint_url: str, stream: str, metadata: Path, **extra: str) -> dict:
    options = {
        "streamName": stream,
        "endpointUrl": endpoint_url,
        "regionName": REGION,
        "startingPosition": "trim_horizon",
        "metadataPath": str(metadata),
    }
    options.update(extra)
    return options


def start_source(
    spark: SparkSession, options: dict, checkpoint: Path, *, bounded: AvailableNow | None = None
) -> tuple[StreamingQuery, list[dict]]:
    """Start a query (``bounded``'s, else on the default trigger); rows are appended as
    dicts with the ``batch_id`` that held them."""
    rows: list[dict] = []

    def collect(batch: DataFrame, batch_id: int) -> None:
        rows.extend({**row.asDict(), "batch_id": batch_id} for row in batch.collect())

    writer = (
        spark.readStream.format("kinesis")
        .options(**options, **(bounded.source_options() if bounded is not None else {}))
        .load()
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
    )
    if bounded is not None:
        writer = bounded.trigger(writer)
    return writer.start(), rows


def run_into(
    spark: SparkSession,
    options: dict,
    checkpoint: Path,
    sink: Callable[[DataFrame, int], None],
    timeout_s: float | None = None,
) -> None:
    """Run one availableNow query to its end (or for ``timeout_s``), each batch handed to
    ``sink`` (foreachBatch): for sinks that keep no rows, or that fail the query.

    Raises ``StreamingQueryException`` when the query fails.
    """
    query = (
        spark.readStream.format("kinesis")
        .options(**options)
        .load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(timeout_s)


def run_source(spark: SparkSession, options: dict, checkpoint: Path) -> list[dict]:
    """Run one bounded query (``AvailableNow``, what ingestion runs) to its end and return
    its rows.

    Raises ``StreamingQueryException`` when the query fails.
    """
    bounded = AvailableNow.on(spark)
    query, rows = start_source(spark, options, checkpoint, bounded=bounded)
    try:
        finished = bounded.wait(query, QUERY_TIMEOUT_S)
    finally:
        query.stop()
    assert finished, f"the query did not finish within {QUERY_TIMEOUT_S} s"
    return rows


def payloads(rows: Iterable[dict]) -> list[str]:
    return [bytes(r["data"]).decode() for r in rows]


def record_keys(rows: Iterable[dict]) -> list[tuple[str, str, int]]:
    return [(r["shard_id"], r["sequence_number"], r["sub_sequence_number"]) for r in rows]


def stream_positions(endpoint_url: str, stream: str) -> set[tuple[str, str]]:
    """Every (shard id, sequence number) the stream holds (the ground-truth reader)."""
    return {(r["ShardId"], r["SequenceNumber"]) for r in read_stream(kinesis(endpoint_url), stream)}


def progress_records(metadata: Path) -> list[dict]:
    """Every shard progress record the executors wrote, with its epoch."""
    found = []
    for path in sorted(metadata.glob("*/*/*.json")):
        found.append({**json.loads(path.read_text()), "epoch": int(path.parent.name)})
    return found


def status(metadata: Path) -> dict:
    """The source status of the (single) run recorded under ``metadata``."""
    (path,) = metadata.glob("*/status.json")
    return json.loads(path.read_text())


def assert_in_key_order(rows: Iterable[dict], sent: Iterable[tuple[str, bytes]]) -> None:
    """Per partition key, rows ordered by batch then sequence number are what was sent."""
    expected: dict[str, list[bytes]] = defaultdict(list)
    for key, data in sent:
        expected[key].append(data)
    by_key: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        by_key[row["partition_key"]].append(row)
    assert set(by_key) == set(expected), "every key delivered, no other"
    for key, key_rows in by_key.items():
        ordered = sorted(key_rows, key=lambda r: (r["batch_id"], int(r["sequence_number"])))
        assert [bytes(r["data"]) for r in ordered] == expected[key], key


def assert_parents_first(rows: Iterable[dict], shards: Iterable[dict]) -> None:
    """Every child shard's first batch comes after its parents' last (DescribeStream's
    shards)."""
    batches: dict[str, list[int]] = defaultdict(list)
    for row in rows:
        batches[row["shard_id"]].append(row["batch_id"])
    for shard in shards:
        for parent in (shard.get("ParentShardId"), shard.get("AdjacentParentShardId")):
            if parent and batches[parent] and batches[shard["ShardId"]]:
                assert max(batches[parent]) < min(batches[shard["ShardId"]]), shard["ShardId"]
