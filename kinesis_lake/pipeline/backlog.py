"""The lake's backlog: what the stream holds that ingestion would read and has not.

The probe (:func:`kinesis_lake.kinesis.backlog.probe_backlog`) looks past the raw table's
committed positions; a shard without one must be probed from where ingestion starts
reading it, or records before a configured start count as a backlog that no run will
ever commit (runs that commit nothing, ``ingestion_advances`` and freshness failing
until those records expire):

* ``trim_horizon``: the shard's oldest record, as the source reads it;
* ``at_timestamp``: ``KINESIS_STARTING_TIMESTAMP``, as the source reads it;
* ``latest``: the source pins "arrived at or after the first run's start" in its
  checkpoint. Once a run has read a shard to its tip without finding anything there
  (its status says when), nothing before that time is waiting; before the first run
  every record counts, so the first run is launched and pins the start. Shards that
  appear later (split or merge children) are read from their first record.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kinesis_lake.config import Settings
from kinesis_lake.kinesis.freshness import StreamFreshness, stream_freshness
from kinesis_lake.kinesis.start_positions import StartPosition, parse_timestamp_ms
from kinesis_lake.pipeline.ingest_query import source_metadata_path
from kinesis_lake.spark.kinesis.progress import ShardProgressStore


def lake_freshness(client, settings: Settings, positions: Mapping[str, str]) -> StreamFreshness:
    """The stream's backlog past ``positions`` and its age, probed from where ingestion
    would start reading the shards without a position."""
    return stream_freshness(
        client,
        settings.stream_name,
        positions,
        max_lag_minutes=settings.freshness_minutes,
        starts=probe_starts(settings),
    )


def probe_starts(settings: Settings) -> dict[str, dict[str, Any]]:
    """GetShardIterator arguments per shard id (``"*"``: any other shard) for shards
    without a committed position."""
    if settings.starting_position == "at_timestamp" and settings.starting_timestamp:
        at_ms = parse_timestamp_ms(settings.starting_timestamp)
        return {"*": StartPosition.at_timestamp(at_ms).iterator_args()}
    if settings.starting_position != "latest":
        return {}
    status = ShardProgressStore(source_metadata_path(settings)).latest_status() or {}
    return {
        shard_id: StartPosition.at_timestamp(int(entry["tip_ms"])).iterator_args()
        for shard_id, entry in _read_to_tip_empty(status).items()
    }


def _read_to_tip_empty(status: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """Shards whose latest read reached the tip without returning a record."""
    return {
        shard_id: entry
        for shard_id, entry in status.get("shards", {}).items()
        if entry.get("tip_ms") is not None and entry.get("last_sequence_number") is None
    }
