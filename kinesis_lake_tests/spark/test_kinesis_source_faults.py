"""Faults injected over real HTTP, so the retry code runs inside Spark's executors.

Every query here points ``endpointUrl`` at a ``FaultProxy`` in front of kinesalite. The
proxy answers chosen calls with throttling, 5xx or expired-iterator errors; the executors'
own boto3 clients receive them and ``ShardReader`` has to cope.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator

import pytest
from pyspark.errors import StreamingQueryException

from kinesis_lake_tests.kinesis.fault_proxy import FaultProxy
from kinesis_lake_tests.spark.source_helpers import (
    keyed_events,
    kinesis,
    new_stream,
    payloads,
    progress_records,
    put,
    run_source,
    source_options,
    status,
)


@pytest.fixture
def proxy(kinesalite_endpoint) -> Iterator[FaultProxy]:
    fault_proxy = FaultProxy(kinesalite_endpoint.url).start()
    yield fault_proxy
    fault_proxy.stop()


def test_throttling_5xx_partial_failures_and_expired_iterators_lose_and_duplicate_nothing(
    spark, kinesalite_endpoint, proxy, tmp_path
):
    """Written through partially failing PutRecords calls, then read through throttling,
    LimitExceeded, 5xx and expired iterators: every event arrives exactly once."""
    stream = new_stream(kinesalite_endpoint.url, shards=2)
    events = keyed_events("e", keys=8, per_key=8)
    proxy.inject("PutRecords", "partial_put", 2)
    put(proxy.url, stream, events)
    assert proxy.counts[("PutRecords", "partial_put")] == 2

    retryable = {
        ("GetShardIterator", "server_error"): 2,
        ("GetRecords", "throttle"): 2,
        ("GetRecords", "limit"): 1,
        ("GetRecords", "server_error"): 1,
    }
    for (operation, kind), times in retryable.items():
        proxy.inject(operation, kind, times)
    proxy.inject("GetRecords", "expired_iterator", 2)
    metadata = tmp_path / "meta"
    rows = run_source(
        spark,
        source_options(proxy.url, stream, metadata, maxRecordsPerShard="10"),
        tmp_path / "checkpoint",
    )

    assert sorted(payloads(rows)) == sorted(d.decode() for _, d in events)
    assert {key: proxy.counts[key] for key in retryable} == retryable
    assert proxy.counts[("GetRecords", "expired_iterator")] == 2
    records = progress_records(metadata)
    assert sum(r["retries"] for r in records) == sum(retryable.values())
    assert sum(r["iterator_renewals"] for r in records) == 2


def test_exhausted_retries_fail_the_query_naming_shard_operation_and_cause(
    spark, kinesalite_endpoint, proxy, tmp_path
):
    stream = new_stream(kinesalite_endpoint.url, shards=1)
    put(kinesalite_endpoint.url, stream, keyed_events("e", keys=1, per_key=3))
    proxy.inject("GetRecords", "throttle", 50)
    options = source_options(proxy.url, stream, tmp_path / "meta", maxRetries="2")
    with pytest.raises(StreamingQueryException) as raised:
        run_source(spark, options, tmp_path / "checkpoint")
    message = str(raised.value)
    for part in (
        "GetRecords on shard shardId-000000000000",
        repr(stream),
        "3 attempt(s)",
        "ProvisionedThroughputExceededException",
    ):
        assert part in message
    assert proxy.counts[("GetRecords", "throttle")] == 3


@pytest.fixture
def trimmed_start(kinesalite_endpoint) -> tuple[str, str, list[str]]:
    """A stream and a resume position whose record is gone, as after retention trimmed it.

    kinesalite never trims records, so the trim is met the way a consumer meets it: its
    checkpointed sequence number no longer leads to its record. The shard's starting
    sequence number is a valid number of that shard that holds no record; resuming after
    it, the reader finds another record first, cannot prove that nothing lay in between,
    and reports the range as lost, exactly as for a position past retention.
    """
    url = kinesalite_endpoint.url
    stream = new_stream(url, shards=1)
    events = keyed_events("kept", keys=1, per_key=4)
    put(url, stream, events)
    (shard,) = kinesis(url).describe_stream(StreamName=stream)["StreamDescription"]["Shards"]
    gone = shard["SequenceNumberRange"]["StartingSequenceNumber"]
    start = json.dumps({shard["ShardId"]: gone})
    return stream, start, [d.decode() for _, d in events]


def test_data_loss_fails_the_query_by_default(spark, kinesalite_endpoint, trimmed_start, tmp_path):
    stream, start, _ = trimmed_start
    options = source_options(
        kinesalite_endpoint.url, stream, tmp_path / "meta", startingPosition=start
    )
    with pytest.raises(StreamingQueryException) as raised:
        run_source(spark, options, tmp_path / "checkpoint")
    message = str(raised.value)
    assert f"Data loss on stream {stream!r}, shard shardId-000000000000" in message
    assert "no longer retained" in message and "failOnDataLoss=false" in message


def test_without_fail_on_data_loss_reading_goes_on_and_counts_the_skipped_range(
    spark, kinesalite_endpoint, trimmed_start, tmp_path
):
    stream, start, kept = trimmed_start
    metadata = tmp_path / "meta"
    options = source_options(
        kinesalite_endpoint.url,
        stream,
        metadata,
        startingPosition=start,
        failOnDataLoss="false",
    )
    rows = run_source(spark, options, tmp_path / "checkpoint")
    assert Counter(payloads(rows)) == Counter(kept), "from the oldest record still there"
    source = status(metadata)
    assert source["skippedRanges"] == 1
    losses = [r["data_loss"] for r in progress_records(metadata) if r["data_loss"]]
    assert len(losses) == 1 and "no longer retained" in losses[0]
