"""The clock proxy behaves as real Kinesis over time, seen through plain boto3 calls."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from kinesis_lake.kinesis.client import KinesisClient, kinesis_client
from kinesis_lake.kinesis.streams import ensure_stream
from kinesis_lake_tests.kinesis.clock_proxy import ITERATOR_TTL_S, ClockProxy

SHARD = "shardId-000000000000"
DAY_S = 24 * 3600


@pytest.fixture
def client(clock: ClockProxy) -> KinesisClient:
    return kinesis_client(clock.url, timeout_s=10)


def put(client: KinesisClient, stream: str, label: str, count: int) -> list[str]:
    response = client.put_records(
        StreamName=stream,
        Records=[{"PartitionKey": f"k{i}", "Data": f"{label}-{i}".encode()} for i in range(count)],
    )
    return [r["SequenceNumber"] for r in response["Records"]]


def read_all(client: KinesisClient, stream: str, shard: str = SHARD, **position) -> list[str]:
    iterator = client.get_shard_iterator(
        StreamName=stream, ShardId=shard, **(position or {"ShardIteratorType": "TRIM_HORIZON"})
    )["ShardIterator"]
    data: list[str] = []
    while iterator:
        response = client.get_records(ShardIterator=iterator, Limit=3)
        data += [r["Data"].decode() for r in response["Records"]]
        if not response["Records"]:
            break
        iterator = response.get("NextShardIterator")
    return data


def test_records_past_retention_leave_trim_horizon(client, clock, new_stream) -> None:
    stream = new_stream(client)
    put(client, stream, "old", 7)
    clock.advance(DAY_S - 60)
    assert len(read_all(client, stream)) == 7  # still within retention
    clock.advance(120)
    put(client, stream, "new", 2)
    # Limit=3 makes the proxy skip over pages holding only expired records.
    assert read_all(client, stream) == ["new-0", "new-1"]
    assert clock.trimmed == {SHARD: 7}


def test_after_a_trimmed_sequence_number_reads_from_the_oldest_retained(
    client, clock, new_stream
) -> None:
    stream = new_stream(client)
    old = put(client, stream, "old", 4)
    clock.advance(DAY_S + 1)
    put(client, stream, "new", 2)
    for kind in ("AT_SEQUENCE_NUMBER", "AFTER_SEQUENCE_NUMBER"):
        data = read_all(client, stream, ShardIteratorType=kind, StartingSequenceNumber=old[1])
        assert data == ["new-0", "new-1"], kind


def test_expired_closed_parent_is_no_longer_listed(client, clock, new_stream) -> None:
    stream = new_stream(client)
    put(client, stream, "parent", 3)
    client.split_shard(StreamName=stream, ShardToSplit=SHARD, NewStartingHashKey=str(2**127))
    ensure_stream(client, stream, 1)

    def listed() -> tuple[list[str], list[str]]:
        shards = [s["ShardId"] for s in client.list_shards(StreamName=stream)["Shards"]]
        described = client.describe_stream(StreamName=stream)["StreamDescription"]["Shards"]
        return shards, [s["ShardId"] for s in described]

    assert all(SHARD in ids for ids in listed())
    clock.advance(DAY_S - 60)
    assert all(SHARD in ids for ids in listed()), "the parent's records are still retained"
    clock.advance(120)
    shards, described = listed()
    assert SHARD not in shards and SHARD not in described
    assert len(shards) == len(described) == 2
    assert clock.hidden_shards == {SHARD}
    with pytest.raises(ClientError, match="ResourceNotFoundException"):
        client.get_shard_iterator(StreamName=stream, ShardId=SHARD, ShardIteratorType="LATEST")


def test_iterators_expire_after_five_simulated_minutes(client, clock, new_stream) -> None:
    stream = new_stream(client)
    put(client, stream, "r", 1)
    iterator = client.get_shard_iterator(
        StreamName=stream, ShardId=SHARD, ShardIteratorType="TRIM_HORIZON"
    )["ShardIterator"]
    clock.advance(ITERATOR_TTL_S - 10)
    response = client.get_records(ShardIterator=iterator)
    assert [r["Data"] for r in response["Records"]] == [b"r-0"]
    clock.advance(ITERATOR_TTL_S + 1)
    with pytest.raises(ClientError, match="ExpiredIteratorException"):
        client.get_records(ShardIterator=iterator)
    # The NextShardIterator was issued later, but has aged past 5 minutes too.
    with pytest.raises(ClientError, match="ExpiredIteratorException"):
        client.get_records(ShardIterator=response["NextShardIterator"])


def test_time_only_moves_forward(clock) -> None:
    with pytest.raises(ValueError):
        clock.advance(-1)
