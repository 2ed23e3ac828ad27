"""What an ingestion run did, in numbers a dashboard can plot, read from where they are kept.

Spark's progress says which micro-batches moved rows; the rows, the snapshot and the lag come
from the raw table's snapshot summaries and the status the ``kinesis`` source publishes
(:mod:`kinesis_lake.spark.kinesis.progress`), the same records the checks and sensors read.

Invariant: a report describes the state a batch or a run left, never a later one: a batch's
row count is taken from the snapshot that committed it, a run's rows and skipped gaps are
what changed since :class:`RunStart` (Spark keeps only recent progress entries, so counts are
never summed from them), and a report that fails is logged, never raised: the batch it
describes is already committed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyiceberg.table.snapshots import ancestors_of
from pyspark.sql.streaming import StreamingQuery

from kinesis_lake.config import Settings
from kinesis_lake.iceberg.row_deletes import live_records
from kinesis_lake.iceberg.summary import BATCH_ID, WRITER_ID
from kinesis_lake.pipeline.ingest_query import prepare_raw_table, source_metadata_path
from kinesis_lake.pipeline.lake import open_lake
from kinesis_lake.spark.kinesis.offsets import SourceOffset
from kinesis_lake.spark.kinesis.progress import ShardProgressStore
from kinesis_lake.spark.spark_version import progress_offset

logger = logging.getLogger(__name__)


@dataclass
class BatchReport:
    """One committed micro-batch, as the continuous mode reports it.

    ``raw_rows_total`` and ``snapshot_id`` describe the raw table as this batch left it
    (not as it is when the report is made: later batches may have committed since), so a
    plot of reported row counts is exact. ``skipped_ranges`` is the source's running count
    of data-loss gaps, as in ``IngestResult``, so the data-loss check can rely on it.
    """

    batch_id: int
    rows: int
    seconds: float
    raw_rows_total: int
    snapshot_id: int | None
    max_millis_behind_latest: int
    skipped_ranges: int
    millis_behind_latest: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class SkippedGap:
    """A range a run skipped as data loss (failOnDataLoss=false), and why.

    The error of the run that failed on it names only the shard whose task failed first;
    when several shards lost records in one batch, the others are named only here, and an
    operator needs each of them to re-send what was lost.
    """

    shard_id: str
    epoch: int
    detail: str


@dataclass
class IngestResult:
    """What a run did, in numbers a dashboard can plot; ``skipped_gaps`` are the data-loss
    gaps this run skipped (``skipped_ranges`` counts those of the checkpoint's life)."""

    batches: int
    rows: int
    seconds: float
    raw_rows_total: int
    snapshot_id: int | None
    max_millis_behind_latest: int
    millis_behind_latest: dict[str, int]
    skipped_ranges: int
    shards_read: int
    skipped_gaps: list[SkippedGap] = field(default_factory=list)

    @property
    def rows_per_second(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True)
class RunStart:
    """What a run finds as it starts (the raw table created first), so that its result
    counts what it did: ``monotonic`` is ``time.monotonic()`` then."""

    monotonic: float
    raw_rows: int
    source_status: Mapping[str, Any]

    @classmethod
    def now(cls, settings: Settings) -> RunStart:
        started = time.monotonic()
        return cls(started, _raw_rows(settings), _status_before(settings))


class BatchFollower:
    """Reports each committed micro-batch of ``query`` that moved rows, once, and since
    when none has (``quiet_since``: monotonic, None before the query's first trigger).

    A report that fails (the catalog read behind it, or ``on_batch`` itself: Dagster's
    event log) is logged and skipped, never raised: the batch is already committed, and
    ending the query over its report would stop ingestion on a flaky event store.
    """

    def __init__(
        self,
        settings: Settings,
        query: StreamingQuery,
        on_batch: Callable[[BatchReport], None] | None,
    ) -> None:
        self._settings, self._query, self._on_batch = settings, query, on_batch
        self._reported = -1
        self.batches = 0
        self.quiet_since: float | None = None

    def poll(self) -> None:
        progresses = self._query.recentProgress
        if progresses and self.quiet_since is None:
            self.quiet_since = time.monotonic()
        for progress in progresses:
            if progress["batchId"] > self._reported and input_rows(progress) > 0:
                self._reported = progress["batchId"]
                self.batches += 1
                self.quiet_since = time.monotonic()
                if self._on_batch is not None:
                    self._report(self._on_batch, progress)

    def _report(self, on_batch: Callable[[BatchReport], None], progress: dict) -> None:
        try:
            on_batch(_batch_report(self._settings, progress))
        except Exception as error:
            logger.warning(
                "Micro-batch %s committed %d rows but could not be reported (%s: %s); "
                "ingestion goes on, and the run's summary counts it. If this repeats, check "
                "the catalog, the Dagster instance storage and any on_batch callback.",
                progress["batchId"],
                input_rows(progress),
                type(error).__name__,
                error,
                exc_info=True,
            )


def read_source_status(settings: Settings, progress: dict) -> dict:
    """The status the source published (:func:`~kinesis_lake.spark.kinesis.progress.source_status`)
    for the epoch that ended ``progress``'s batch; {} before it published one."""
    end_offset = progress["sources"][0].get("endOffset") if progress.get("sources") else None
    if not end_offset:
        return {}
    offset = SourceOffset.from_dict(progress_offset(end_offset))
    return ShardProgressStore(source_metadata_path(settings)).read_status(offset.run_id) or {}


def _lag_by_shard(status: dict) -> dict[str, int]:
    return {
        shard: int(outcome.get("millis_behind_latest") or 0)
        for shard, outcome in status.get("shards", {}).items()
    }


def _batch_report(settings: Settings, progress: dict) -> BatchReport:
    status = read_source_status(settings, progress)
    lags = _lag_by_shard(status)
    total, snapshot_id = _raw_table_state(
        settings, writer_id=progress["id"], batch_id=progress["batchId"]
    )
    return BatchReport(
        batch_id=progress["batchId"],
        rows=input_rows(progress),
        seconds=progress.get("durationMs", {}).get("triggerExecution", 0) / 1000,
        raw_rows_total=total,
        snapshot_id=snapshot_id,
        max_millis_behind_latest=max(lags.values(), default=0),
        skipped_ranges=int(status.get("skippedRanges", 0)),
        millis_behind_latest=lags,
    )


def _raw_table_state(
    settings: Settings, *, writer_id: str | None = None, batch_id: int | None = None
) -> tuple[int, int | None]:
    """(rows, snapshot id) of the raw table now, or as of the snapshot that committed
    ``batch_id`` of ``writer_id`` (the streaming query id; the sink stamps both).

    Only snapshot summaries are read, newest first; a batch is reported right after its
    commit, so the walk stops after a few snapshots. A batch without a snapshot of its
    own (a replay the sink skipped) falls back to the current state.
    """
    table = open_lake(settings).load_table(settings.raw_table)
    snapshot = table.current_snapshot()
    if snapshot is not None and batch_id is not None:
        wanted = {WRITER_ID: writer_id, BATCH_ID: str(batch_id)}
        snapshot = next(
            (
                s
                for s in ancestors_of(snapshot, table.metadata)
                if s.summary is not None
                and all(s.summary.additional_properties.get(k) == v for k, v in wanted.items())
            ),
            snapshot,
        )
    if snapshot is None or snapshot.summary is None:
        return 0, None
    return live_records(snapshot.summary), snapshot.snapshot_id


def _raw_rows(settings: Settings) -> int:
    prepare_raw_table(settings)
    return _raw_table_state(settings)[0]


def input_rows(progress: Mapping[str, Any]) -> int:
    """A micro-batch's input rows: over Spark Connect the progress leaves the total unset
    and counts them per source only."""
    total = progress.get("numInputRows")
    if total is None:
        total = sum(source.get("numInputRows") or 0 for source in progress.get("sources") or ())
    return int(total)


def _status_before(settings: Settings) -> Mapping[str, Any]:
    """The source's status as a run finds it: the gaps it names after this are the run's."""
    return ShardProgressStore(source_metadata_path(settings)).latest_status() or {}


def _gaps_since(status: Mapping[str, Any], before: Mapping[str, Any]) -> list[SkippedGap]:
    """The gaps ``status`` names that ``before`` did not: those of later epochs of the
    same checkpoint, or all of a new one's. A gap is named by the run that publishes its
    epoch's status, which is the next run when one dies right after the epoch."""
    same_run = status.get("runId") == before.get("runId")
    published = int(before.get("epoch", 0)) if same_run else -1
    return [
        SkippedGap(gap["shard"], int(gap["epoch"]), gap["detail"])
        for gap in status.get("skippedGaps", [])
        if int(gap["epoch"]) > published
    ]


def summarise(
    settings: Settings,
    start: RunStart,
    progresses: Sequence[dict],
    *,
    batches: int | None = None,
) -> IngestResult:
    """What the run did since ``start``. Rows come from the table itself: Spark keeps only
    recent progress entries (100 by default), which is also why a long continuous run
    passes the ``batches`` it counted."""
    seconds = time.monotonic() - start.monotonic
    moving = [p for p in progresses if input_rows(p) > 0]
    status = read_source_status(settings, progresses[-1]) if progresses else {}
    lags = _lag_by_shard(status)
    total, snapshot_id = _raw_table_state(settings)
    return IngestResult(
        batches=len(moving) if batches is None else batches,
        rows=total - start.raw_rows,
        seconds=seconds,
        raw_rows_total=total,
        snapshot_id=snapshot_id,
        max_millis_behind_latest=max(lags.values(), default=0),
        millis_behind_latest=lags,
        skipped_ranges=int(status.get("skippedRanges", 0)),
        shards_read=len(lags),
        skipped_gaps=_gaps_since(status, start.source_status),
    )
