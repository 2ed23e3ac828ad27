"""What the raw table records of the source's reads, so that a query started with neither
its checkpoint nor its progress folder still knows what expired unread (issue 31).

The progress folder lives beside the checkpoint by default; a volume lost with both, or
a second machine with a folder of its own, leaves a new query nothing but the table. Its
positions say where to resume a shard with a committed record. For a shard without one,
what tells a quiet shard from records that expired unread is when it was last read to
its tip, and since when the deployment has been reading the stream (issue 31 simulation,
seed 30023: a shard read while empty, six records expired, and the second machine read
the two after them without a word). After each run, the times the source's status holds
are merged into two table properties, which the next query's ``earlierReads`` option
carries (:func:`kinesis_lake.spark.kinesis.earlier_runs.with_earlier_reads`).

Kept apart from the data commits on purpose: both are facts of the stream, true whoever
read it, so a late write or a lost one only makes the next check stricter (older tip
times), never blind. Tips only move forward and the start only back.
"""

from __future__ import annotations

import json

from pyiceberg.table import Table

from kinesis_lake.iceberg.summary import committed_positions
from kinesis_lake.spark.kinesis.earlier_runs import finished_tips
from kinesis_lake.spark.kinesis.options import EarlierReads
from kinesis_lake.spark.kinesis.progress import ShardProgressStore

READ_TO_TIP = "kinesis-lake.read-to-tip"
"""Table property: JSON {shard id: server time in ms of its latest read to the tip}."""

READING_SINCE = "kinesis-lake.reading-since-ms"
"""Table property: server time in ms since which the deployment reads the stream."""

ATTEMPTS = 5


def earlier_reads(table: Table) -> EarlierReads:
    """What ``table`` records of earlier reads of its stream."""
    since = table.properties.get(READING_SINCE)
    return EarlierReads(
        since_ms=int(since) if since else None,
        tip_ms={
            shard: int(ms)
            for shard, ms in json.loads(table.properties.get(READ_TO_TIP, "{}")).items()
        },
    )


def record_earlier_reads(table: Table, store: ShardProgressStore) -> None:
    """Merge into ``table`` what the runs of ``store`` (a source's metadataPath) read.

    The latest status, or, if no epoch completed, the reads to the tip of a first batch
    that failed (a failed run records too: seed 90006 of the simulation, a second
    machine's first commit failed ambiguously), and the shards the latest plan finished;
    the start is the latest plan's, which carries the first run's. A commit that fails,
    even ambiguously, is tried again: the merge is idempotent.
    """
    status = store.latest_status() or store.unpublished_status(committed_positions(table)) or {}
    plan = store.latest_plan()
    starts = [int(t) for t in (status.get("startedMs"), plan and plan.started_ms) if t]
    tips = {
        shard: int(entry["tip_ms"])
        for shard, entry in status.get("shards", {}).items()
        if entry.get("tip_ms") is not None
    }
    if plan is not None:  # the shards it finished: read to their end (seed 110139)
        tips.update(finished_tips(plan))
    found = EarlierReads(since_ms=min(starts, default=None), tip_ms=tips)
    for attempt in range(1, ATTEMPTS + 1):
        known = earlier_reads(table)
        merged = _merged(known, found)
        if merged == known:
            return
        try:
            with table.transaction() as transaction:
                transaction.set_properties(
                    {
                        READ_TO_TIP: json.dumps(merged.tip_ms, sort_keys=True),
                        **({READING_SINCE: str(merged.since_ms)} if merged.since_ms else {}),
                    }
                )
            return
        except Exception:
            if attempt == ATTEMPTS:
                raise
            table.refresh()


def _merged(known: EarlierReads, found: EarlierReads) -> EarlierReads:
    tips = dict(known.tip_ms)
    for shard, tip in found.tip_ms.items():
        tips[shard] = max(tip, tips.get(shard, tip))
    starts = [t for t in (known.since_ms, found.since_ms) if t is not None]
    return EarlierReads(since_ms=min(starts, default=None), tip_ms=tips)
