"""What a query started without checkpoint learns from the runs before it (issue 31).

Spark's checkpoint holds a query's plans: which shards it listed and when, when it
started, when it last read each shard to its tip. Lose the checkpoint (a deleted
folder, a new machine, the runbook's answer to an overlap) and the table's positions
say where to resume, but not what expired on a shard no record of which was ever
committed: that takes knowing since when the deployment has been reading it. The
source's metadataPath outlives checkpoints, so the start reads it there, in three
layers, each filling only what the one before left unknown:

* the latest ``status.json`` (or, with none, the reads of runs that never published
  one): the shards earlier runs left unfinished and their reads to the tip;
* the latest run's last plan (``plan.json``, :meth:`ShardProgressStore.write_plan`):
  its reads to the tip, when it listed the stream (so a shard it never saw was created
  later, and every record the shard holds arrived after that listing) and since when
  the deployment has been answerable for what arrives (its ``started_ms``, carried
  from run to run).

and, from the raw table (the ``earlierReads`` option, which kinesis-lake's ingestion
fills from what it records after each run: :mod:`kinesis_lake.pipeline.earlier_reads`),
what a second machine with a folder of its own cannot find in its folder: each shard's
latest read to the tip and the deployment's start.

A plan or status of a deleted stream of the same name (read before the stream's
creation) is ignored.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from kinesis_lake.kinesis.start_positions import StartPosition
from kinesis_lake.kinesis.streams import Shard, shard_lineage_order
from kinesis_lake.spark.kinesis.offsets import ShardCursor, SourceOffset
from kinesis_lake.spark.kinesis.options import EarlierReads, KinesisSourceOptions
from kinesis_lake.spark.kinesis.planning import inherited_tip
from kinesis_lake.spark.kinesis.progress import ShardProgressStore


def with_earlier_runs(
    offset: SourceOffset,
    store: ShardProgressStore,
    options: KinesisSourceOptions,
    listed: Sequence[Shard],
) -> SourceOffset:
    """``offset`` (a new query's first) with what earlier runs of ``store`` knew, and
    what the ``earlierReads`` option says they read."""
    per_shard_start = options.per_shard_start
    committed = {
        shard_id: start.sequence_number
        for shard_id, start in per_shard_start.items()
        if start.sequence_number is not None
    }
    status = store.latest_status() or store.unpublished_status(committed)
    offset = with_gone_unfinished(offset, status, per_shard_start)
    offset = with_earlier_tips(offset, status, listed)
    offset = with_earlier_plan(offset, store.latest_plan(), listed)
    offset = with_earlier_reads(offset, options.earlier_reads)
    return with_earlier_start(offset, options.starting_position)


def with_earlier_start(offset: SourceOffset, starting_position: StartPosition) -> SourceOffset:
    """``offset`` with each ``latest`` shard that no committed record resumes starting where
    the deployment's reading of it stands: its last read to the tip, else the deployment's
    start (:meth:`SourceOffset.quiet_since`), when earlier than this query's "now".

    ``latest`` means "what arrives once the deployment reads the stream", pinned as
    "arrived at or after now" by a new query. A query started without checkpoint (a lost
    folder, a second machine) skipped, without a word, what arrived on a shard with no
    committed record since the deployment last read it to its tip: such a read found the
    shard empty up to then, so starting at that time reads every record once. A user's
    ``at_timestamp`` instant is the user's, and a committed record's position wins.
    """
    if starting_position.kind != "LATEST":
        return offset
    shards = dict(offset.shards)
    for shard_id, cursor in offset.shards.items():
        since = offset.quiet_since(shard_id)
        pinned = cursor.start.timestamp_ms
        if cursor.start.kind == "AT_TIMESTAMP" and since is not None and since < (pinned or 0):
            shards[shard_id] = replace(cursor, start=StartPosition.at_timestamp(since))
    return replace(offset, shards=shards)


def with_earlier_reads(offset: SourceOffset, reads: EarlierReads) -> SourceOffset:
    """``offset`` with what the table records of earlier reads (the ``earlierReads``
    option): a later read to the tip of a shard not after a committed record, and an
    earlier start.

    The progress folder lives beside the checkpoint by default, and a volume lost with
    both left a second machine knowing nothing: a shard read to its tip while empty,
    records that then expired, and the new query read it from its trim horizon past them
    without a word (issue 31 simulation, seed 30023). Each read to the tip is a fact of
    the stream, whichever query made it; the latest is the strictest true one. Times
    before the stream's creation belong to a deleted stream of the same name.
    """
    created = offset.stream_created_ms
    started_ms = offset.started_ms
    if reads.since_ms is not None and reads.since_ms >= created:
        started_ms = reads.since_ms if started_ms is None else min(started_ms, reads.since_ms)
    shards = dict(offset.shards)
    for shard_id, cursor in offset.shards.items():
        tip_ms = reads.tip_ms.get(shard_id)
        if (
            tip_ms is not None
            and tip_ms >= created
            and cursor.start.kind != "AFTER_SEQUENCE_NUMBER"
            and (cursor.tip_ms is None or cursor.tip_ms < tip_ms)
        ):
            shards[shard_id] = replace(cursor, tip_ms=tip_ms)
    return replace(offset, shards=shards, started_ms=started_ms)


def with_earlier_plan(
    offset: SourceOffset, plan: SourceOffset | None, listed: Sequence[Shard]
) -> SourceOffset:
    """``offset`` with the earlier run's last ``plan``: its start, and a read-to-tip time
    for each shard not after a committed record that still has none.

    A shard the plan read takes the plan's tip; one it never saw takes the time its
    parents were last read to the tip or the plan's listing time, the earlier
    (:func:`~kinesis_lake.spark.kinesis.planning.inherited_tip`: the child was created
    after that listing). A shard the plan finished takes its listing time too
    (:func:`finished_tips`). The plan's start (the first run's, carried on) is when the
    deployment became answerable for every record that arrives: a first batch that failed
    before reading anything, then an outage longer than retention, lost records all the
    same (issue 31 simulation, seed 40299).
    """
    if plan is None or plan.stream_created_ms != offset.stream_created_ms:
        return offset
    started_ms = offset.started_ms
    if plan.started_ms is not None and (started_ms is None or plan.started_ms < started_ms):
        started_ms = plan.started_ms
    known = set(plan.shards) | set(plan.finished)
    tips = {shard_id: cursor.tip_ms for shard_id, cursor in plan.shards.items()}
    tips.update(finished_tips(plan))
    shards = dict(offset.shards)
    for shard in shard_lineage_order(list(listed)):
        if shard.shard_id not in known:
            tips[shard.shard_id] = inherited_tip(shard, tips, plan.listed_ms)
        cursor = shards.get(shard.shard_id)
        tip_ms = tips.get(shard.shard_id)
        if (
            cursor is not None
            and cursor.start.kind != "AFTER_SEQUENCE_NUMBER"
            and cursor.tip_ms is None
            and tip_ms is not None
        ):
            shards[shard.shard_id] = replace(cursor, tip_ms=tip_ms)
    return replace(offset, shards=shards, started_ms=started_ms)


def finished_tips(plan: SourceOffset) -> dict[str, int]:
    """A read-to-tip time for each shard ``plan`` finished: the time it listed the stream.

    A closed shard read to its end has no read to the tip of its own (the read ended the
    shard), yet it is the strongest proof there is: every record the shard will ever hold
    was read, and the plan that finished it listed the stream after that read. Without a
    time, a query that lost its checkpoint re-reads the shard from its trim horizon,
    finds nothing, and can only take it for quiet since the deployment's start, days
    before the shard existed: a false loss (issue 31 simulation, seed 110139). A shard
    still listed closed less than retention ago, and so after that listing's read: the
    time never makes a check report what did not happen.
    """
    if plan.listed_ms is None:
        return {}
    return dict.fromkeys(plan.finished, plan.listed_ms)


def with_gone_unfinished(
    offset: SourceOffset, status: Mapping | None, per_shard_start: Mapping[str, StartPosition]
) -> SourceOffset:
    """``offset`` (a new query's first) with a cursor for each shard the stream no longer
    lists that an earlier query of this metadataPath left unfinished (issue 31).

    A closed shard leaves the listing once its records are past retention; the table
    keeps the position of its last committed record, if any. Whether the shard was read
    to its end, only the query that read it knew: its status entry (live, neither ended
    nor finished) says it was not, so records after that position (or, with none, after
    that query's last read to its tip: seed 50389) may have expired unread.
    Planned like any shard gone before its end, the first plan reports it (or, with
    failOnDataLoss=false, skips and counts it) instead of moving on to its children
    without a word. With no such entry, nothing says so and the shard is taken as
    finished, as before: the table names a gone shard for ever, and a start that knows
    nothing of it must not raise the alarm each time. An entry read before the stream's
    creation belongs to a deleted stream of the same name, and is ignored.
    """
    earlier = (status or {}).get("shards", {})
    done = set((status or {}).get("finishedShards", []))
    gone = {
        shard_id: ShardCursor(per_shard_start.get(shard_id, offset.new_shard_start))
        for shard_id, entry in earlier.items()
        if shard_id not in offset.shards
        and shard_id not in done
        and not entry.get("shard_ended")
        and int(entry.get("read_started_ms") or 0) >= offset.stream_created_ms
    }
    return replace(offset, shards={**offset.shards, **gone}) if gone else offset


def with_earlier_tips(
    offset: SourceOffset, status: Mapping | None, listed: Sequence[Shard] = ()
) -> SourceOffset:
    """``offset`` (a new query's first) with what an earlier query of this metadataPath
    recorded of shards it read to their tip without a record (issue 31).

    A shard that starts from its trim horizon or a timestamp, not after a committed
    record, was empty for that query: records that arrived after its last read to the tip
    and expired before this query reads them are loss, and without that read's time a
    query started without checkpoint would skip them silently. Shards that start after a
    committed record keep the limit the README states (no read to the tip on record: an
    aged-out resume record is reported as possible loss). A tip from before the stream's
    creation belongs to a deleted stream of the same name, and is ignored.

    A shard the earlier query never read (a split's or a merge's child created after its
    last read) takes its parents' tip time, the earliest of them, when every parent was
    read to its tip while still open (its entry is in the status, not ended or finished):
    the child was created when its parents closed, after those reads, so every record it
    ever held arrived after them. (kinesalite reports a drained closed shard as caught
    up, not ended: such a read's tip may postdate the child's creation. On AWS the read
    ends the shard, and an ended shard leaves the status.)
    """
    earlier = (status or {}).get("shards", {})
    done = set((status or {}).get("finishedShards", []))
    parents = {shard.shard_id: shard.parent_ids for shard in listed}
    shards = dict(offset.shards)
    for shard_id, cursor in offset.shards.items():
        tip_ms = earlier.get(shard_id, {}).get("tip_ms")
        if tip_ms is None and shard_id not in earlier:
            tip_ms = _parents_tip(parents.get(shard_id, ()), earlier, done)
        if (
            cursor.start.kind != "AFTER_SEQUENCE_NUMBER"
            and cursor.tip_ms is None
            and tip_ms is not None
            and int(tip_ms) >= offset.stream_created_ms
        ):
            shards[shard_id] = replace(cursor, tip_ms=int(tip_ms))
    return replace(offset, shards=shards)


def _parents_tip(parent_ids: Sequence[str], earlier: Mapping, done: set[str]) -> int | None:
    """The earliest tip time of ``parent_ids``, each read to its tip while open, else None."""
    tips = []
    for parent_id in parent_ids:
        entry = earlier.get(parent_id, {})
        if entry.get("tip_ms") is None or entry.get("shard_ended") or parent_id in done:
            return None
        tips.append(int(entry["tip_ms"]))
    return min(tips, default=None)
