"""Test helpers: read a whole stream back with the production reader."""

from __future__ import annotations

from kinesis_lake.kinesis.client import KinesisClient
from kinesis_lake.kinesis.records import KinesisRecord
from kinesis_lake.kinesis.shard_reader import ShardReader, StartPosition
from kinesis_lake.kinesis.streams import list_shards


def read_shard(
    client: KinesisClient, stream: str, shard_id: str, **read_args
) -> list[KinesisRecord]:
    reader = ShardReader(client, stream, shard_id, min_call_interval_s=0)
    start = read_args.pop("start", StartPosition.trim_horizon())
    read_args.setdefault("max_records", 100_000)
    return [record for page in reader.read(start, **read_args) for record in page]


def read_stream(client: KinesisClient, stream: str) -> dict[str, list[KinesisRecord]]:
    """Every shard from TRIM_HORIZON to the tip, by shard id."""
    return {
        shard.shard_id: read_shard(client, stream, shard.shard_id)
        for shard in list_shards(client, stream)
    }


def put(client: KinesisClient, stream: str, entries: list[tuple[str, bytes]]) -> list[str]:
    """PutRecord one by one (ordered); returns the sequence numbers."""
    return [
        client.put_record(StreamName=stream, PartitionKey=key, Data=data)["SequenceNumber"]
        for key, data in entries
    ]


def entries(count: int, prefix: str = "r", key: str = "k") -> list[tuple[str, bytes]]:
    return [(key, f"{prefix}{i}".encode()) for i in range(count)]
