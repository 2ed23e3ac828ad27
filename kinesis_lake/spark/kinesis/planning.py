"""The planning rule of the ``kinesis`` source: the next epoch's read plan from the last.

:func:`plan_next_offset` is the whole policy (resharding, parent-before-child, read limits,
availableNow termination, idle back-off) in one pure function, no Spark, no network, that
tests and the simulation drive with made-up shards and outcomes; the source calls it on the
driver with what the executors recorded of the last epoch.

Invariant: no record is read twice across epochs or skipped silently. A shard resumes after
the last record its read returned, is finished only once a read saw its end, is read only
after every parent it names is finished (so per-key order holds across splits and merges),
and a shard gone before its end fails the query unless ``failOnDataLoss=false``, which
skips it by name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from kinesis_lake.kinesis.shard_reader import ReadOutcome
from kinesis_lake.kinesis.start_positions import StartPosition
from kinesis_lake.kinesis.streams import Shard, shard_lineage_order
from kinesis_lake.spark.kinesis.offsets import ShardCursor, SourceOffset, SourcePlanningError
from kinesis_lake.spark.kinesis.read_limits import epoch_byte_limits, epoch_limits


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
    max_idle_ms: int = 0
    """The longest pause an idle stream's polls back off to (0: always ``idle_ms``)."""
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
      ``idle_ms`` so an idle stream is not polled in a tight loop, and twice as long
      after each further empty epoch, up to ``max_idle_ms`` (:func:`idle_pause`).
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
            f"{others}: whatever records it still held expired (retention) before they "
            "were read (Kinesis does not say whether it held any; an empty shard gives "
            "the same error). "
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
    proposal = replace(proposal, idle_epochs=_idle_epochs(current, given))
    if gone:
        return proposal  # even reading nothing: the epoch that names what it skipped
    if not proposal.shards_to_read():
        return current
    if given.cutoff_ms is None and resting(
        current, given.outcomes, given.now_ms, given.idle_ms, given.max_idle_ms
    ):
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


TRIGGER_SLACK_MS = 500
"""How much earlier than its pause a backed-off idle epoch may be planned: the planning of
the epoch before is stamped up to this long after its trigger began."""


_MAX_IDLE_EPOCHS = 30
"""Where the count of empty epochs in a row stops: the pause stopped doubling long before."""


def resting(
    current: SourceOffset,
    outcomes: Mapping[str, ReadOutcome],
    now_ms: int,
    idle_ms: int,
    max_idle_ms: int = 0,
) -> bool:
    """True when the last epoch read nothing anywhere and was planned less than its
    :func:`idle_pause` ago: the stream is idle and is not polled again yet."""
    if current.epoch == 0 or not outcomes:
        return False
    if any(o.records_read or o.shard_ended for o in outcomes.values()):
        return False
    pause = idle_pause(current.idle_epochs, idle_ms, max_idle_ms)
    if pause > idle_ms:
        # Backing off: a trigger that comes round as the pause ends must not find it a few
        # ms short (the epoch was stamped after its trigger began) and wait a trigger more.
        pause -= min(idle_ms, TRIGGER_SLACK_MS)
    return now_ms - current.planned_ms < pause


def idle_pause(idle_epochs: int, idle_ms: int, max_idle_ms: int) -> int:
    """How long after an empty epoch the next one waits: ``idle_ms``, doubled for each
    empty epoch before it, at most ``max_idle_ms``.

    Every poll of an idle stream is a micro-batch (tasks on executors, a commit): on two
    cores, polls once a second took 0.6-0.7 of a core from the work beside the query
    (a lingering run's downstream refresh, 2026-12-06). A record that arrives after a quiet
    spell waits at most ``max_idle_ms`` more; a stream that keeps giving records never
    backs off.
    """
    if max_idle_ms <= idle_ms:
        return idle_ms
    return min(idle_ms << min(idle_epochs, _MAX_IDLE_EPOCHS), max_idle_ms)


def _idle_epochs(current: SourceOffset, given: PlanningInput) -> int:
    """Empty epochs in a row up to and including ``current``."""
    read_nothing = bool(given.outcomes) and not any(
        o.records_read or o.shard_ended for o in given.outcomes.values()
    )
    return min(current.idle_epochs + 1, _MAX_IDLE_EPOCHS) if read_nothing else 0
