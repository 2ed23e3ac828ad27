"""Offsets of the ``kinesis`` source and the planning rule that moves them forward.

Why offsets look like this
--------------------------
Kinesis gives a consumer no way to ask "what is the last sequence number of this shard"
without reading it, so the driver cannot know where a micro-batch ends. Each offset is
therefore a *read plan* (an "epoch"): for every shard, the position the epoch's read
starts from and how many Kinesis records (and, with a byte cap, bytes) it may read
(plus, under ``availableNow``, an arrival-time cutoff). Executors carry the plan out and
record where they actually stopped (:mod:`kinesis_lake.spark.kinesis.progress`); the next
plan starts after that. Because the plan lives in Spark's offset log and the recorded
stop lives beside it, a replayed epoch reads exactly the records it read the first time,
so replays are deterministic rather than merely harmless.

This module is pure: no Spark, no network. :func:`plan_next_offset` is the whole policy
(resharding, parent-before-child, read limits, availableNow termination, idle back-off)
in one function that tests can drive with made-up shards and outcomes.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from kinesis_lake.errors import IngestionError
from kinesis_lake.kinesis.shard_reader import ReadOutcome
from kinesis_lake.kinesis.start_positions import StartPosition
from kinesis_lake.kinesis.streams import Shard, shard_lineage_order

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


@dataclass(frozen=True)
class PlanningInput:
    """Everything the driver knows when Spark asks for the next offset.

    ``max_rows`` is Spark's ReadMaxRows limit for the whole epoch (None for
    ReadAllAvailable); ``max_records_per_shard`` bounds each shard's read either way.
    ``max_bytes`` and ``max_bytes_per_shard`` are the same two bounds in bytes (None:
    no byte cap).
    """

    listed_shards: Sequence[Shard]
    outcomes: Mapping[str, ReadOutcome]
    max_records_per_shard: int
    now_ms: int
    max_rows: int | None = None
    cutoff_ms: int | None = None
    idle_ms: int = 1000
    fail_on_data_loss: bool = True
    listed_ms: int | None = None
    """The server's clock before ``listed_shards`` were listed (a DescribeStreamSummary
    answered just before), kept in the plan as its ``listed_ms``."""
    max_bytes_per_shard: int | None = None
    max_bytes: int | None = None


def plan_next_offset(current: SourceOffset, given: PlanningInput) -> SourceOffset:
    """Return the next read plan, or ``current`` itself when there is nothing to read.

    Rules, in the order a reader of Kinesis has to respect them:

    * a shard read in ``current`` continues after the last record it returned;
    * a closed shard is finished, and never read again, once a read reached its end:
      Kinesis returned no next iterator (``shard_ended``), or the shard was already
      closed when the epoch was planned and the read caught up with it: such a read has
      seen every record the shard will ever hold. Waiting for the end marker as well
      would stall on kinesalite, which keeps giving a read that resumes after the last
      record of a shard drained well before it closed a next iterator;
    * a shard that vanished from the listing before it was finished lost its remaining
      records to retention: that fails the query, or with ``failOnDataLoss=false`` is
      dropped and counted in ``skipped_ranges`` (as is a read that found a gap);
    * a shard is read only once every parent it names is finished (or has aged out of
      the stream), so a parent's records always land in an earlier micro-batch than its
      children's and per-partition-key order holds across splits and merges, including
      those that happened before the query started or while it was stopped;
    * under ``availableNow`` (``cutoff_ms`` set) a shard that reached the cutoff sits
      out; when no shard is left to read, ``current`` is returned and Spark ends the run;
    * Spark's ReadMaxRows is split across the shards read, never above
      ``max_records_per_shard`` each, and the epoch's byte cap likewise
      (:func:`epoch_byte_limits`);
    * otherwise, when the last epoch found every shard idle, the next epoch waits
      ``idle_ms`` so an idle stream is not polled in a tight loop.
    """
    listed = {s.shard_id: s for s in given.listed_shards}
    finished = set(current.finished)
    skipped = current.skipped_ranges
    cursors: dict[str, ShardCursor] = {}
    for shard_id, cursor in current.shards.items():
        outcome = _outcome_of(current, shard_id, cursor, given.outcomes)
        if outcome is not None and outcome.data_loss:
            skipped += 1
        if outcome is not None and (outcome.shard_ended or (cursor.closed and outcome.caught_up)):
            finished.add(shard_id)
        else:
            closed = shard_id in listed and listed[shard_id].is_closed
            cursors[shard_id] = _advance(cursor, outcome, current, given, closed)
    # What each shard known to this plan was last read to its tip at, for new children
    # (:func:`inherited_tip`): the epoch just read for shards still open, else the plan's.
    tips = {shard_id: cursor.tip_ms for shard_id, cursor in current.shards.items()}
    tips.update({shard_id: cursor.tip_ms for shard_id, cursor in cursors.items()})

    # A parent no plan saw, of a shard new to this one: created after the last plan
    # listed the stream (it was open when its child was made) and gone before this one,
    # so nothing read it (issue 31 simulation, seed 50318).
    known = set(current.shards) | set(current.finished)
    unseen = {
        parent
        for shard in given.listed_shards
        if shard.shard_id not in known
        for parent in shard.parent_ids
        if parent not in listed and parent not in known
    }
    gone = sorted((set(cursors) - set(listed)) | unseen)
    if gone and given.fail_on_data_loss:
        others = f" (nor were {', '.join(gone[1:])})" if len(gone) > 1 else ""
        raise SourcePlanningError(
            f"Shard {gone[0]} is no longer in the stream but was not read to its end"
            f"{others}: its remaining records expired (retention) before they were read. "
            "To go on without them, set KINESIS_LAKE_FAIL_ON_DATA_LOSS=false (source "
            "option failOnDataLoss=false) for one run, which names each shard it skips; "
            "the no_data_loss check counts them, and kinesis-lake acknowledge-loss clears it."
        )
    for shard_id in gone:
        cursors.pop(shard_id, None)
        skipped += 1

    for shard in shard_lineage_order(list(given.listed_shards)):
        if shard.shard_id not in finished and shard.shard_id not in cursors:
            tips[shard.shard_id] = inherited_tip(shard, tips, current.listed_ms)
            cursors[shard.shard_id] = ShardCursor(
                current.new_shard_start, tip_ms=tips[shard.shard_id]
            )

    eligible = [
        shard_id
        for shard_id, cursor in sorted(cursors.items())
        if not cursor.reached_cutoff and not any(p in cursors for p in listed[shard_id].parent_ids)
    ]
    limits = epoch_limits(
        eligible, given.max_records_per_shard, given.max_rows, rotation=current.epoch
    )
    budgets = epoch_byte_limits(
        [sid for sid in eligible if sid in limits],
        given.max_bytes_per_shard,
        given.max_bytes,
        rotation=current.epoch,
    )
    reads = {sid: limit for sid, limit in limits.items() if budgets[sid] != 0}
    proposal = replace(
        current,
        epoch=current.epoch + 1,
        shards={
            sid: replace(
                cur,
                limit=reads.get(sid, 0),
                max_bytes=budgets[sid] if sid in reads else None,
                closed=listed[sid].is_closed,
            )
            for sid, cur in cursors.items()
        },
        finished=frozenset(finished & set(listed)),
        cutoff_ms=given.cutoff_ms,
        skipped_ranges=skipped,
        planned_ms=given.now_ms,
        listed_ms=given.listed_ms,
        gone_unread=frozenset(gone),
    )
    if gone:
        return proposal  # even reading nothing: the epoch that names what it skipped
    if not proposal.shards_to_read():
        return current
    if given.cutoff_ms is None and resting(current, given.outcomes, given.now_ms, given.idle_ms):
        return current
    return proposal


def inherited_tip(
    shard: Shard, tips: Mapping[str, int | None], listed_before_ms: int | None
) -> int | None:
    """A new child's read-to-tip time: the earliest of its parents' and of the time the
    last plan listed the stream (``listed_before_ms``, the server's clock).

    Without a time of its own, records that arrive on the child and expire in an outage
    before its first read would be skipped silently, as a start from the trim horizon is
    only checked against a known read to the tip (issue 31's simulation, seed 10136). The
    last plan listed every shard there was, so a shard new to this one was created after
    that listing, and every record it ever held arrived later: that time holds whatever
    its parents (two reshards between plans, a parent gone before any plan saw it, a
    parent never read to its tip: seed 40118). A parent's earlier read to its tip while
    open (``tips``, filled in lineage order) makes the check stricter, never wrong. Without
    a listing time (an endpoint that sends no Date header), every parent must have one.
    """
    inherited = [tips.get(parent) for parent in shard.parent_ids]
    known = [tip for tip in inherited if tip is not None]
    if listed_before_ms is not None:
        return min([*known, listed_before_ms])
    if not inherited or len(known) < len(inherited):
        return None
    return min(known)


def epoch_limits(
    shard_ids: Sequence[str], max_records_per_shard: int, max_rows: int | None, *, rotation: int
) -> dict[str, int]:
    """Records each shard may read in one epoch, keeping the total within ``max_rows``.

    ``max_rows`` is split evenly, the remainder going to the first shards in an order
    rotated by ``rotation`` (the epoch), so that with fewer rows than shards every shard
    still gets its turn. No shard exceeds ``max_records_per_shard``.
    """
    shares = _shares(shard_ids, max_records_per_shard, max_rows, rotation)
    return {shard_id: limit for shard_id, limit in shares.items() if limit > 0}


def epoch_byte_limits(
    shard_ids: Sequence[str],
    max_bytes_per_shard: int | None,
    max_bytes: int | None,
    *,
    rotation: int,
) -> dict[str, int | None]:
    """The byte budget of each shard's read in one epoch (None: no byte cap), keeping
    the total within ``max_bytes``; ``shard_ids`` are the shards given a record limit.

    Split as :func:`epoch_limits` splits records. A budget of 0 (fewer bytes than
    shards) means the shard sits this epoch out, as a record limit of 0 does: a read
    always takes at least one record, so every budget that reads must be at least 1.
    """
    if max_bytes is None and max_bytes_per_shard is None:
        return dict.fromkeys(shard_ids)
    cap = max_bytes_per_shard if max_bytes_per_shard is not None else max_bytes
    assert cap is not None
    return dict(_shares(shard_ids, cap, max_bytes, rotation))


def _shares(shard_ids: Sequence[str], cap: int, total: int | None, rotation: int) -> dict[str, int]:
    """``total`` split evenly over ``shard_ids``, each share at most ``cap``, the remainder
    going to the first shards in an order rotated by ``rotation``; ``cap`` each without
    a total."""
    if not shard_ids:
        return {}
    if total is None:
        return dict.fromkeys(shard_ids, cap)
    turn = rotation % len(shard_ids)
    ordered = [*shard_ids[turn:], *shard_ids[:turn]]
    share, remainder = divmod(total, len(ordered))
    return {
        shard_id: min(cap, share + (1 if index < remainder else 0))
        for index, shard_id in enumerate(ordered)
    }


def _outcome_of(
    current: SourceOffset, shard_id: str, cursor: ShardCursor, outcomes: Mapping[str, ReadOutcome]
) -> ReadOutcome | None:
    """The recorded outcome of this shard's read in ``current``, None if it was not read."""
    if not cursor.read:
        return None
    outcome = outcomes.get(shard_id)
    if outcome is None:
        raise SourcePlanningError(
            f"No progress record for shard {shard_id} of epoch {current.epoch} "
            f"(run {current.run_id}). The source's metadataPath must be storage that the "
            "driver and every executor share (a shared folder or an s3:// prefix) and "
            "must not be cleaned or changed while the query's checkpoint exists."
        )
    return outcome


def _advance(
    cursor: ShardCursor,
    outcome: ReadOutcome | None,
    current: SourceOffset,
    given: PlanningInput,
    closed: bool,
) -> ShardCursor:
    """Where a shard that is not finished resumes, and whether it reached the cutoff."""
    if outcome is None:
        # Not read in ``current``: same start; a cutoff reached stays reached for this run.
        return ShardCursor(
            cursor.start,
            reached_cutoff=cursor.reached_cutoff and given.cutoff_ms == current.cutoff_ms,
            tip_ms=cursor.tip_ms,
        )
    start = (
        StartPosition.after(outcome.last_sequence_number)
        if outcome.last_sequence_number is not None
        else cursor.start
    )
    return ShardCursor(
        start,
        reached_cutoff=_reached_cutoff(outcome, current, given, closed),
        tip_ms=outcome.tip_ms if outcome.tip_ms is not None else cursor.tip_ms,
    )


def _reached_cutoff(
    outcome: ReadOutcome, current: SourceOffset, given: PlanningInput, closed: bool
) -> bool:
    """True when the shard holds nothing more that arrived before ``given.cutoff_ms``.

    A read that stopped at a record past the cutoff proves it, provided the cutoff is
    still the one that read used (a restarted availableNow run has a later one). That
    holds for a closed shard too, and then for its children as well: they were created
    when the parent closed, after that record arrived, so all their records are later.
    A read that caught up after the cutoff proves it for a shard that is still open. A
    shard closed since then may have taken more records before it closed, and its
    children may hold records older than the cutoff: it is read again, and finishes.
    """
    if given.cutoff_ms is None:
        return False
    if outcome.stopped_by == "cutoff":
        return given.cutoff_ms == current.cutoff_ms
    return not closed and outcome.caught_up and outcome.read_started_ms >= given.cutoff_ms


def resting(
    current: SourceOffset, outcomes: Mapping[str, ReadOutcome], now_ms: int, idle_ms: int
) -> bool:
    """True when the last epoch read nothing anywhere and was planned under ``idle_ms`` ago:
    the stream is idle and is not polled again yet."""
    if current.epoch == 0 or not outcomes:
        return False
    if any(o.records_read or o.shard_ended for o in outcomes.values()):
        return False
    return now_ms - current.planned_ms < idle_ms


def _compact(data: Mapping) -> dict:
    """Drop None values: Spark offsets hold only integers, strings and booleans."""
    return {k: v for k, v in data.items() if v is not None}
