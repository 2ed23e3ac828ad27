"""How far behind the stream a consumer is, judged by the age of what it has not read.

Cheap enough for a sensor tick (metadata calls and one-record reads per shard), and free of
Dagster and of the tables: the caller passes the committed positions.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kinesis_lake.kinesis.backlog import BacklogProbe, probe_backlog


@dataclass(frozen=True)
class StreamFreshness:
    """How far behind the stream the raw table is, judged by the data's age.

    ``oldest_unconsumed_age_seconds`` is the age of the oldest record past the committed
    positions (None when nothing is waiting): the raw table is stale only when that is
    older than the allowed lag, so a quiet stream never makes it stale.
    """

    probe: BacklogProbe
    positions: dict[str, str]
    oldest_unconsumed_age_seconds: float | None
    max_lag_seconds: float

    @property
    def passed(self) -> bool:
        age = self.oldest_unconsumed_age_seconds
        return age is None or age <= self.max_lag_seconds

    @property
    def retention_used(self) -> float:
        """Share of the stream's retention the oldest unconsumed record has used up: at 1.0
        it expires unread (data loss)."""
        age = self.oldest_unconsumed_age_seconds or 0.0
        retention = self.probe.retention_hours * 3600
        return age / retention if retention else 0.0


def stream_freshness(
    client,
    stream_name: str,
    positions: Mapping[str, str],
    *,
    max_lag_minutes: float,
    now_ms: int | None = None,
    starts: Mapping[str, Mapping[str, Any]] | None = None,
) -> StreamFreshness:
    """Cost: DescribeStreamSummary + ListShards + 2 cheap calls per shard (probe_backlog,
    which takes ``starts``: where shards without a committed position are read from)."""
    probe = probe_backlog(client, stream_name, dict(positions), starts)
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    oldest = probe.oldest_unconsumed_arrival_ms
    return StreamFreshness(
        probe=probe,
        positions=dict(positions),
        oldest_unconsumed_age_seconds=None if oldest is None else max(0, now_ms - oldest) / 1000,
        max_lag_seconds=max_lag_minutes * 60,
    )


def shards_label(shards: Sequence[str]) -> str:
    return ", ".join(shards) if shards else "none"
