"""Offsets of the ``kinesis`` source: an epoch's read plan as Spark's offset log keeps it.

Why offsets look like this
--------------------------
Kinesis gives a consumer no way to ask "what is the last sequence number of this shard"
without reading it, so the driver cannot know where a micro-batch ends. Each offset is
therefore a *read plan* (an "epoch"): for every shard, the position the epoch's read
starts from and how many Kinesis records (and, with a byte cap, bytes) it may read
(plus, under ``availableNow``, an arrival-time cutoff). Executors carry the plan out and
record where they actually stopped (:mod:`kinesis_lake.spark.kinesis.progress`); the next
plan starts after that (:mod:`kinesis_lake.spark.kinesis.planning`). Because the plan lives
in Spark's offset log and the recorded stop lives beside it, a replayed epoch reads exactly
the records it read the first time, so replays are deterministic rather than merely
harmless.

Invariant: what ``to_dict`` writes, ``from_dict`` reads back as the same plan, for as long
as ``OFFSET_VERSION`` stands; a checkpoint of another version is refused with the way out,
never read as something else. Pure data: no Spark, no network.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kinesis_lake.errors import IngestionError
from kinesis_lake.kinesis.start_positions import StartPosition
from kinesis_lake.kinesis.streams import Shard

OFFSET_VERSION = 1
"""Bumped whenever the offset layout changes, so an old checkpoint is refused clearly."""


class SourcePlanningError(IngestionError, RuntimeError):
    """The stream no longer matches the checkpoint in a way that would lose or invent data."""


@dataclass(frozen=True)
class ShardCursor:
    """One shard's place in an epoch's plan.

    ``limit`` is how many Kinesis records the epoch reads from ``start`` (an aggregate
    counts once); 0 means the shard sits this epoch out: it waits for a parent, it
    reached the availableNow cutoff (``reached_cutoff``), or Spark's read limit was
    smaller than the number of shards. ``closed`` says the shard was already closed when
    the epoch was planned, i.e. before its read began. ``tip_ms`` is the server time of
    the latest read that found the shard caught up (see ``ReadOutcome.tip_ms``): when the
    record ``start`` resumes after has aged out, it tells a quiet shard from records that
    expired unread. ``max_bytes`` is the read's byte budget (None: none), kept in the
    plan, as ``limit`` is, so that a read the first attempt never finished is repeated
    under the same budget; an offset logged before byte budgets existed has none.
    """

    start: StartPosition
    limit: int = 0
    reached_cutoff: bool = False
    closed: bool = False
    tip_ms: int | None = None
    max_bytes: int | None = None

    @property
    def read(self) -> bool:
        return self.limit > 0

    def to_dict(self) -> dict:
        data: dict = {"start": _compact(self.start.to_dict()), "limit": self.limit}
        if self.reached_cutoff:
            data["reachedCutoff"] = True
        if self.closed:
            data["closed"] = True
        if self.tip_ms is not None:
            data["tipMs"] = self.tip_ms
        if self.max_bytes is not None:
            data["maxBytes"] = self.max_bytes
        return data

    @classmethod
    def from_dict(cls, data: Mapping) -> ShardCursor:
        return cls(
            start=StartPosition.from_dict(data["start"]),
            limit=int(data["limit"]),
            reached_cutoff=bool(data.get("reachedCutoff", False)),
            closed=bool(data.get("closed", False)),
            tip_ms=data.get("tipMs"),
            max_bytes=data.get("maxBytes"),
        )


@dataclass(frozen=True)
class SourceOffset:
    """One entry of Spark's offset log for the ``kinesis`` source: an epoch's read plan.

    ``run_id`` names the query's lineage of epochs so that two queries over one stream
    never read each other's progress records. ``epoch`` 0 is the initial offset, which
    reads nothing; each new plan is the previous epoch + 1. ``shards`` holds every shard
    that is neither finished nor gone, including those waiting for their parents;
    ``finished`` the closed shards read to their end. ``listed_ms`` is the server's
    clock just before this offset's shards were listed, ``started_ms`` the initial
    offset's (see :meth:`quiet_since`), both None where the endpoint sends no Date.
    ``gone_unread`` names the shards this plan dropped, gone from the stream before
    their end (``failOnDataLoss=false``), for the status to name as skipped gaps.
    """

    run_id: str
    epoch: int
    stream_created_ms: int
    new_shard_start: StartPosition
    shards: dict[str, ShardCursor]
    finished: frozenset[str] = frozenset()
    cutoff_ms: int | None = None
    skipped_ranges: int = 0
    planned_ms: int = 0
    started_ms: int | None = None
    listed_ms: int | None = None
    gone_unread: frozenset[str] = frozenset()
    idle_epochs: int = 0
    """Epochs in a row before this one that read nothing anywhere: an idle stream's
    polls back off with it (:func:`~.planning.idle_pause`)."""

    @classmethod
    def initial(
        cls,
        *,
        stream_created_ms: int,
        shards: Sequence[Shard],
        start: StartPosition,
        new_shard_start: StartPosition,
        per_shard_start: Mapping[str, StartPosition] | None = None,
        started_ms: int | None = None,
    ) -> SourceOffset:
        """Epoch 0: every shard listed now, at its starting position, nothing read yet."""
        per_shard_start = per_shard_start or {}
        return cls(
            run_id=uuid.uuid4().hex,
            epoch=0,
            stream_created_ms=stream_created_ms,
            new_shard_start=new_shard_start,
            shards={
                s.shard_id: ShardCursor(per_shard_start.get(s.shard_id, start)) for s in shards
            },
            started_ms=started_ms,
            listed_ms=started_ms,
        )

    def to_dict(self) -> dict:
        data = {
            "version": OFFSET_VERSION,
            "runId": self.run_id,
            "epoch": self.epoch,
            "streamCreatedMs": self.stream_created_ms,
            "newShardStart": _compact(self.new_shard_start.to_dict()),
            "shards": {sid: cur.to_dict() for sid, cur in sorted(self.shards.items())},
            "finished": {sid: True for sid in sorted(self.finished)},
            "skippedRanges": self.skipped_ranges,
            "plannedMs": self.planned_ms,
        }
        if self.cutoff_ms is not None:
            data["cutoffMs"] = self.cutoff_ms
        if self.started_ms is not None:
            data["startedMs"] = self.started_ms
        if self.listed_ms is not None:
            data["listedMs"] = self.listed_ms
        if self.gone_unread:
            data["goneUnread"] = {sid: True for sid in sorted(self.gone_unread)}
        if self.idle_epochs:
            data["idleEpochs"] = self.idle_epochs
        return data

    @classmethod
    def from_dict(cls, data: Mapping) -> SourceOffset:
        if data.get("version") != OFFSET_VERSION:
            raise SourcePlanningError(
                f"The checkpoint holds a kinesis source offset of version "
                f"{data.get('version')!r}, but this source reads version {OFFSET_VERSION}. "
                "Start the query with a new checkpointLocation (and a startingPosition that "
                "continues where the old query stopped)."
            )
        return cls(
            run_id=data["runId"],
            epoch=int(data["epoch"]),
            stream_created_ms=int(data["streamCreatedMs"]),
            new_shard_start=StartPosition.from_dict(data["newShardStart"]),
            shards={sid: ShardCursor.from_dict(c) for sid, c in data["shards"].items()},
            finished=frozenset(data.get("finished", {})),
            cutoff_ms=data.get("cutoffMs"),
            skipped_ranges=int(data.get("skippedRanges", 0)),
            planned_ms=int(data.get("plannedMs", 0)),
            started_ms=data.get("startedMs"),
            listed_ms=data.get("listedMs"),
            gone_unread=frozenset(data.get("goneUnread", {})),
            idle_epochs=int(data.get("idleEpochs", 0)),
        )

    def quiet_since(self, shard_id: str) -> int | None:
        """Since when the shard's read may count records that expired unread as loss:
        its last read to the tip, or, for a start not after a known record, the query's
        start when no read found the tip yet.

        A query is answerable for every record that arrives once it started, read or not:
        a first batch that failed, then an outage longer than retention, and its replay
        from the trim horizon took what was left for all there was (issue 31 simulation,
        seed 40299). Not a read to the tip, so never carried into ``tip_ms``: a resume
        record's gap check must not take records before the start for read.
        """
        cursor = self.shards[shard_id]
        if cursor.tip_ms is not None or cursor.start.kind == "AFTER_SEQUENCE_NUMBER":
            return cursor.tip_ms
        return self.started_ms

    def shards_to_read(self) -> list[str]:
        return sorted(sid for sid, cur in self.shards.items() if cur.read)


def _compact(data: Mapping) -> dict:
    """Drop None values: Spark offsets hold only integers, strings and booleans."""
    return {k: v for k, v in data.items() if v is not None}
