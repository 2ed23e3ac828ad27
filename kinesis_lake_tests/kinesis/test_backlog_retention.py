"""The backlog probe when the committed position has aged out (issue 10 defect 3)."""

from __future__ import annotations

from kinesis_lake.kinesis.backlog import probe_backlog
from kinesis_lake.kinesis.client import kinesis_client

SHARD = "shardId-000000000000"


def test_probe_of_a_quiet_shard_whose_position_aged_out(clock, new_stream) -> None:
    client = kinesis_client(clock.url, timeout_s=10)
    stream = new_stream(client)
    committed = client.put_record(StreamName=stream, PartitionKey="k", Data=b"old")
    positions = {SHARD: committed["SequenceNumber"]}
    clock.advance(25 * 3600)

    assert not probe_backlog(client, stream, positions).has_backlog
    # Kinesis may also refuse a sequence number it no longer retains.
    clock.inject("GetShardIterator", "invalid_argument")
    assert not probe_backlog(client, stream, positions).has_backlog

    new = client.put_record(StreamName=stream, PartitionKey="k", Data=b"new")
    clock.inject("GetShardIterator", "invalid_argument")
    probe = probe_backlog(client, stream, positions)
    assert probe.first_unconsumed == {SHARD: new["SequenceNumber"]}
