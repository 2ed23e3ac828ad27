"""Test helpers of the Kinesis layer: read a whole stream back with the production reader,
put ordered records, encode KPL protobuf by hand, make up a read's outcome or just its
counters (for a page source read alone)."""

from __future__ import annotations

from dataclasses import dataclass

from kinesis_lake.kinesis.client import KinesisClient
from kinesis_lake.kinesis.records import KinesisRecord
from kinesis_lake.kinesis.shard_reader import ReadOutcome, ShardReader
from kinesis_lake.kinesis.start_positions import StartPosition
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


def varint(value: int) -> bytes:
    """A protobuf base-128 varint, written from the spec (no protobuf library)."""
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def protobuf_field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (wire type 2)."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def outcome(
    shard_id: str,
    last: str | None,
    *,
    stopped_by: str = "limit",
    records: int = 1,
    ended: bool = False,
    caught_up: bool = False,
    started_ms: int = 0,
    data_loss: str | None = None,
) -> ReadOutcome:
    """A made-up read of ``shard_id`` that ended at ``last`` (what an executor reports)."""
    return ReadOutcome(
        shard_id=shard_id,
        records_read=records,
        user_records=records,
        last_sequence_number=last,
        last_arrival_ms=None,
        shard_ended=ended,
        caught_up=caught_up,
        millis_behind_latest=0,
        stopped_by=stopped_by,
        calls=1,
        retries=0,
        iterator_renewals=0,
        data_loss=data_loss,
        read_started_ms=started_ms,
    )


@dataclass
class Counts:
    """The counters of a read's outcome that a page source keeps, and nothing else
    (``ReadCounts``): for a page source read without the read loop."""

    calls: int = 0
    retries: int = 0
    iterator_renewals: int = 0
    records_read: int = 0
