"""Splits and merges: nothing lost, nothing twice, every partition key in order.

Run on kinesalite: moto keeps writing to a closed parent, which real Kinesis never does.
Checked on the rows a query delivered, each with the micro-batch that held it:

* exactly once: the (shard, sequence number) pairs equal the stream's, read with boto3;
* order: per partition key, rows ordered by ``batch_id`` then sequence number give the
  producer's order, across parents and children;
* parent before child: every child's first batch comes after its parents' last.
"""

from __future__ import annotations

import time
from collections import Counter

from kinesis_lake.pipeline.ingest import run_ingestion
from kinesis_lake_tests.pipeline_helpers import read_stream, table_rows
from kinesis_lake_tests.spark.source_helpers import (
    assert_in_key_order,
    assert_parents_first,
    keyed_events,
    kinesis,
    merge,
    new_stream,
    put,
    source_options,
    split,
    start_source,
    stream_positions,
)

WAIT_S = 600
FIRST = "shardId-000000000000"


def test_split_and_merge_mid_stream_are_followed_without_a_restart(
    spark, kinesalite_endpoint, tmp_path
):
    """One running query; three waves of events, a split after the first has been read
    and a merge of the split's children after the second."""
    url = kinesalite_endpoint.url
    stream = new_stream(url, shards=2)
    client = kinesis(url)
    options = source_options(url, stream, tmp_path / "meta")
    query, rows = start_source(spark, options, tmp_path / "checkpoint")
    sent: list[tuple[str, bytes]] = []
    try:
        for wave, reshard in (
            ("a", lambda: split(client, stream, FIRST)),
            ("b", lambda: merge(client, stream, *_children(client, stream))),
            ("c", None),
        ):
            events = keyed_events(wave, keys=12, per_key=10)
            put(url, stream, events)
            sent += events
            _wait_for_rows(query, rows, len(sent))
            if reshard is not None:
                reshard()
    finally:
        query.stop()
    _assert_exactly_once_in_key_order(url, stream, rows, sent)


def test_a_split_and_a_merge_while_stopped_are_read_parents_first(
    spark, kinesalite_endpoint, settings_factory
):
    """Checked on the raw table the ingestion job (source + Iceberg sink) wrote."""
    url = kinesalite_endpoint.url
    stream = new_stream(url, shards=2)
    settings = settings_factory(kinesalite_endpoint, stream_name=stream, max_records_per_shard=40)
    client = kinesis(url)
    sent = keyed_events("a", keys=12, per_key=5)
    put(url, stream, sent)
    run_ingestion(spark, settings)

    # While stopped: more records for the parent, a split, more, a merge of the children.
    for wave, reshard in (
        ("b", lambda: split(client, stream, FIRST)),
        ("c", lambda: merge(client, stream, *_children(client, stream))),
        ("d", None),
    ):
        events = keyed_events(wave, keys=12, per_key=5)
        put(url, stream, events)
        sent += events
        if reshard is not None:
            reshard()
    run_ingestion(spark, settings)

    columns = ("shard_id", "sequence_number", "partition_key", "data", "batch_id")
    rows = table_rows(settings, settings.raw_table, columns)
    _assert_exactly_once_in_key_order(url, stream, rows, sent)


def test_a_record_put_right_after_a_reshard_has_already_arrived(kinesalite_endpoint):
    """The resharding helpers model real Kinesis, whose arrival times are never ahead of
    its clock. kinesalite dates a new shard one second ahead (splitShard.js and
    mergeShards.js: ``shardCreateTime: now + 1000``) and stamps records put into it with
    that time, so an availableNow run started within the second left them for the next
    run: the stopped-split test above lost them in CI."""
    url = kinesalite_endpoint.url
    stream = new_stream(url, shards=2)
    client = kinesis(url)
    split(client, stream, FIRST)
    merge(client, stream, *_children(client, stream))
    put(url, stream, keyed_events("x", keys=12, per_key=1))
    now_s = time.time()
    arrivals = [r["ApproximateArrivalTimestamp"].timestamp() for r in read_stream(client, stream)]
    assert len(arrivals) == 12
    assert max(arrivals) <= now_s


def _wait_for_rows(query, rows: list[dict], count: int) -> None:
    """Liveness bound only: how long reading takes is never asserted."""
    deadline = time.monotonic() + WAIT_S
    while len(rows) < count:
        assert query.isActive, query.exception()
        assert time.monotonic() < deadline, f"fewer than {count} rows after {WAIT_S} s"
        time.sleep(0.2)


def _children(client, stream: str) -> list[str]:
    shards = client.describe_stream(StreamName=stream)["StreamDescription"]["Shards"]
    return sorted(s["ShardId"] for s in shards if s.get("ParentShardId") == FIRST)


def _assert_exactly_once_in_key_order(
    url: str, stream: str, rows: list[dict], sent: list[tuple[str, bytes]]
) -> None:
    positions = Counter((r["shard_id"], r["sequence_number"]) for r in rows)
    assert max(positions.values()) == 1, "no record twice"
    assert set(positions) == stream_positions(url, stream), "no record lost"

    assert_in_key_order(rows, sent)
    shards = kinesis(url).describe_stream(StreamName=stream)["StreamDescription"]["Shards"]
    assert len(shards) == 5, "the split and the merge both happened"
    assert_parents_first(rows, shards)
