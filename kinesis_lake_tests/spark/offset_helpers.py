"""Made-up shards and initial offsets for the planning rule's tests."""

from __future__ import annotations

from kinesis_lake.kinesis.start_positions import StartPosition
from kinesis_lake.kinesis.streams import Shard
from kinesis_lake.spark.kinesis.offsets import SourceOffset


def shard(shard_id: str, *parents: str, closed: bool = False) -> Shard:
    return Shard(
        shard_id=shard_id,
        parent_shard_id=parents[0] if parents else None,
        adjacent_parent_shard_id=parents[1] if len(parents) > 1 else None,
        starting_sequence_number="1",
        ending_sequence_number="999" if closed else None,
    )


def initial(*shards: Shard, start: StartPosition | None = None) -> SourceOffset:
    return SourceOffset.initial(
        stream_created_ms=1,
        shards=list(shards),
        start=start or StartPosition.trim_horizon(),
        new_shard_start=StartPosition.trim_horizon(),
    )
