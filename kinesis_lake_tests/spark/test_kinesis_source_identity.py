"""A checkpoint taken from a stream that was deleted and re-created is refused."""

from __future__ import annotations

import time

import pytest
from pyspark.errors import StreamingQueryException

from kinesis_lake_tests.spark.source_helpers import (
    keyed_events,
    kinesis,
    new_stream,
    payloads,
    put,
    run_source,
    source_options,
    wait_active,
)


def test_a_checkpoint_of_a_deleted_and_recreated_stream_is_refused(
    spark, kinesalite_endpoint, tmp_path
):
    """Same name, new stream: its sequence numbers have nothing to do with the checkpoint's,
    so continuing would skip or re-read records silently."""
    url = kinesalite_endpoint.url
    client = kinesis(url)
    stream = new_stream(url, shards=1)
    events = keyed_events("old", keys=2, per_key=2)
    put(url, stream, events)
    options = source_options(url, stream, tmp_path / "meta")
    first = run_source(spark, options, tmp_path / "checkpoint")
    assert sorted(payloads(first)) == sorted(d.decode() for _, d in events)

    created = client.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"][
        "StreamCreationTimestamp"
    ]
    client.delete_stream(StreamName=stream)
    client.get_waiter("stream_not_exists").wait(
        StreamName=stream, WaiterConfig={"Delay": 0.2, "MaxAttempts": 300}
    )
    while int(time.time()) <= int(created.timestamp()):  # kinesalite stamps whole seconds
        time.sleep(0.05)
    client.create_stream(StreamName=stream, ShardCount=1)
    wait_active(client, stream)
    put(url, stream, keyed_events("new", keys=2, per_key=2))

    with pytest.raises(StreamingQueryException) as raised:
        run_source(spark, options, tmp_path / "checkpoint")
    message = str(raised.value)
    assert "deleted and re-created" in message and "new checkpointLocation" in message
