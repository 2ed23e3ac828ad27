"""The ``kinesis`` source with ``consumerType=efo``, on kinesis-mock (the local endpoint
that serves SubscribeToShard): the polling reader's guarantees, checked the same way.

* exactly once: the (shard, sequence number) pairs delivered equal the stream's, read
  with bare boto3, across a split and across a restart from the checkpoint;
* order: per partition key, rows ordered by batch then sequence number give the
  producer's order, and every child's first batch comes after its parent's last;
* the consumer the query registered is deregistered when it stops.
"""

from __future__ import annotations

import time
from collections import Counter

from kinesis_lake.pipeline.ingest import run_ingestion
from kinesis_lake.spark.kinesis.options import default_consumer_name
from kinesis_lake.spark.kinesis.source import release_consumer
from kinesis_lake_tests.pipeline_helpers import table_rows
from kinesis_lake_tests.spark.source_helpers import (
    assert_in_key_order,
    assert_parents_first,
    keyed_events,
    kinesis,
    new_stream,
    put,
    run_source,
    source_options,
    split,
    stream_positions,
)

FIRST = "shardId-000000000000"


def test_efo_reads_across_a_split_and_a_restart_exactly_once_in_order(
    spark, kinesis_mock_endpoint, tmp_path
):
    url = kinesis_mock_endpoint.url
    stream = new_stream(url, shards=2)
    client = kinesis(url)
    options = source_options(url, stream, tmp_path / "meta", consumerType="efo")
    checkpoint = tmp_path / "checkpoint"

    sent = keyed_events("a", keys=6, per_key=4)
    put(url, stream, sent)
    split(client, stream, FIRST)
    after_split = keyed_events("b", keys=6, per_key=4)
    put(url, stream, after_split)
    rows = run_source(spark, options, checkpoint)
    assert len(rows) == len(sent + after_split)

    more = keyed_events("c", keys=6, per_key=2)
    put(url, stream, more)
    restarted = run_source(spark, options, checkpoint)
    assert sorted(bytes(r["data"]) for r in restarted) == sorted(data for _, data in more)
    last_batch = max(r["batch_id"] for r in rows)
    assert min(r["batch_id"] for r in restarted) > last_batch

    everything = rows + restarted
    positions = Counter((r["shard_id"], r["sequence_number"]) for r in everything)
    assert max(positions.values()) == 1, "no record twice"
    assert set(positions) == stream_positions(url, stream), "no record lost"
    assert_in_key_order(everything, sent + after_split + more)
    shards = client.describe_stream(StreamName=stream)["StreamDescription"]["Shards"]
    children = {s["ShardId"] for s in shards if s.get("ParentShardId") == FIRST}
    delivered = {r["shard_id"] for r in everything}
    assert len(children) == 2 and children | {FIRST} <= delivered, "parent and children read"
    assert_parents_first(everything, shards)

    ours = default_consumer_name(str(tmp_path / "meta"))
    assert _consumers(client, stream) == {ours}, "the query read as its own consumer"
    release_consumer(options)
    assert_deregistered(client, stream)


def test_an_efo_ingestion_run_fills_the_raw_table_and_leaves_no_consumer(
    spark, kinesis_mock_endpoint, settings_factory
):
    """The lake setting end to end: source, Iceberg sink, and the run's own clean-up."""
    url = kinesis_mock_endpoint.url
    stream = new_stream(url, shards=2)
    settings = settings_factory(kinesis_mock_endpoint, stream_name=stream, consumer_type="efo")
    put(url, stream, keyed_events("a", keys=4, per_key=5))

    result = run_ingestion(spark, settings)

    rows = table_rows(settings, settings.raw_table)
    assert result.rows == len(rows) == 20
    assert {(r["shard_id"], r["sequence_number"]) for r in rows} == stream_positions(url, stream)
    assert_deregistered(kinesis(url), stream)


def _consumers(client, stream: str) -> set[str]:
    arn = client.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]["StreamARN"]
    return {c["ConsumerName"] for c in client.list_stream_consumers(StreamARN=arn)["Consumers"]}


def assert_deregistered(client, stream: str) -> None:
    """DeregisterStreamConsumer answers at once; the consumer goes after DELETING."""
    deadline = time.monotonic() + 30
    while _consumers(client, stream) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _consumers(client, stream) == set()
