"""Spark's control flow around the real source and sink, on the simulation's clock.

Spark is not in the loop: what it contributes to the protocol is control flow, and this
module replicates exactly that, nothing more:

* a **checkpoint** (:class:`Checkpoint`): the query id (the sink's writer id), the offset
  log (batch b's end offset, written before the batch runs) and the commit log (batches
  whose sink commit Spark recorded);
* a **restart**: with a checkpoint, a batch in the offset log but not in the commit log is
  run again with the same start and end (the replay); without one, a new query id and the
  starting position ``pipeline/ingest_query.py`` gives (after the table's committed positions);
* a **micro-batch**: plan (the source's ``latestOffset``), log, one task per shard read,
  the sink's ``write`` per task and ``commit`` on the driver, ``abort`` when the commit
  raised, then the commit log and the source's ``commit``.

Everything else is the real code: :class:`KinesisStreamReader` plans the initial offset
and the partitions, :func:`plan_next_offset` the epochs, :class:`ShardReader` reads,
:class:`ShardProgressStore` pins what was read, the sink's ``IcebergStreamWriter`` writes
and commits through ``iceberg/commit.py``. Two pieces of glue are replicated because the
real ones build their own boto3 client and read the wall clock: ``latestOffset`` (here
:func:`latest_offset`, with the virtual clock as ``now``) and the executor's ``read``
(here :func:`read_shard`, the same rules in the same order; a difference between the two
is a bug of this module).
"""

from __future__ import annotations

import copy
import inspect
import json
import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pyarrow as pa

from kinesis_lake.config import Settings
from kinesis_lake.iceberg.summary import committed_positions
from kinesis_lake.kinesis.retry import RetryPolicy
from kinesis_lake.kinesis.shard_reader import ShardReader
from kinesis_lake.kinesis.streams import list_shards
from kinesis_lake.pipeline.earlier_reads import earlier_reads
from kinesis_lake.spark.iceberg.writer import DataFilesWritten
from kinesis_lake.spark.kinesis.arrow import records_to_arrow
from kinesis_lake.spark.kinesis.offsets import SourceOffset
from kinesis_lake.spark.kinesis.options import EarlierReads, KinesisSourceOptions
from kinesis_lake.spark.kinesis.planning import PlanningInput, plan_next_offset, resting
from kinesis_lake.spark.kinesis.progress import ShardProgressStore
from kinesis_lake.spark.kinesis.read_task import ShardReadTask, read_task
from kinesis_lake.spark.kinesis.source import KinesisStreamReader
from kinesis_lake.spark.kinesis.task_groups import ShardGroupTask
from kinesis_lake_tests.simulation.kinesis import SimulatedKinesis
from kinesis_lake_tests.simulation.lake import Lake

# Where a batch can die (Spark's driver killed, or the executor's task failing).
BEFORE_COMMIT = "before-commit"  # tasks wrote their files; the sink never committed
AFTER_COMMIT = "after-commit"  # the sink committed; Spark's commit log never recorded it
DURING_ABORT = "during-abort"  # the sink's commit raised; the driver died before abort
CRASH_POINTS = (BEFORE_COMMIT, AFTER_COMMIT, DURING_ABORT)


class Crash(Exception):
    """The simulated driver process died at a crash point."""


@dataclass
class Checkpoint:
    """What Spark keeps in ``checkpointLocation``, and the source's progress records
    beside it (``metadataPath``, which moves with the checkpoint: a machine that keeps an
    old checkpoint keeps its progress records too)."""

    query_id: str
    progress: Path
    initial: dict[str, Any] | None = None
    offsets: list[dict[str, Any]] = field(default_factory=list)
    committed: int = 0
    """Batches recorded in the commit log: batch ``committed`` is the next to finish."""

    def copy(self) -> Checkpoint:
        """A copy as it is now, progress records included, in a folder of its own."""
        copied = copy.deepcopy(self)
        copied.progress = self.progress.with_name(uuid.uuid4().hex)
        if self.progress.exists():
            shutil.copytree(self.progress, copied.progress)
        return copied


@dataclass
class BatchResult:
    batch_id: int | None
    rows: int = 0
    replay: bool = False
    loss: dict[str, str] = field(default_factory=dict)
    """Shard -> what a read reported as lost (data_loss outcomes, skipped under
    failOnDataLoss=false)."""


class Query:
    """One streaming query of the ingestion job: a checkpoint, a writer, a source."""

    def __init__(
        self,
        kinesis: SimulatedKinesis,
        lake: Lake,
        checkpoint: Checkpoint | None,
        *,
        progress: Path,
        now_ms: Callable[[], int],
        fail_on_data_loss: bool = True,
        max_records_per_shard: int = 50,
        available_now: bool = False,
    ) -> None:
        self.kinesis = kinesis
        self.lake = lake
        self.now_ms = now_ms
        self.checkpoint = checkpoint or Checkpoint(query_id=uuid.uuid4().hex, progress=progress)
        options: dict[str, str] = {
            "streamName": kinesis.stream_name,
            "regionName": "us-east-1",
            "metadataPath": str(self.checkpoint.progress),
            "failOnDataLoss": str(fail_on_data_loss).lower(),
            "maxRecordsPerShard": str(max_records_per_shard),
            "maxRetries": "3",
        }
        if not available_now:  # a continuous query backs off on an idle stream, as ours do
            options["maxIdleTimeBetweenReadsMs"] = str(Settings().idle_backoff_ms)
        # pipeline/ingest_query.py passes the table's positions whenever it has some: a query
        # without checkpoint resumes after them, and a replay of a range they cover
        # reads nothing (Spark ignores startingPosition when a checkpoint exists, but
        # the source still sees the option).
        reads = earlier_reads(lake.table())
        if reads != EarlierReads():
            options["earlierReads"] = reads.to_option()  # as pipeline/ingest_query.py passes
        resume_after = committed_positions(lake.table())
        options["startingPosition"] = (
            json.dumps(resume_after, sort_keys=True) if resume_after else "trim_horizon"
        )
        self.options = KinesisSourceOptions.parse(options)
        self.source = KinesisStreamReader(self.options)
        self.source._client = kinesis  # the simulated AWS
        self.store = ShardProgressStore(self.options.metadata_path)
        self.replaying = False
        self.reported_loss: dict[str, str] = {}
        """Shard -> loss its reads recorded, for the caller to take (``take_reports``)."""
        # prepareForTriggerAvailableNow: "everything that arrived before the run started".
        self.cutoff_ms = now_ms() if available_now else None

    # ------------------------------------------------------------------ one micro-batch

    def run_batch(self, crash_at: str | None = None) -> BatchResult:
        """Run the next micro-batch (a replay first, if one is pending).

        Returns ``BatchResult(None)`` when the source has nothing new (Spark runs no
        batch). Raises what the real code raised, or :class:`Crash`.
        """
        cp = self.checkpoint
        if cp.initial is None:
            cp.initial = self.source.initialOffset()
        replay = len(cp.offsets) > cp.committed
        self.replaying = replay
        batch_id = cp.committed
        start = cp.offsets[batch_id - 1] if batch_id else cp.initial
        if replay:
            end = cp.offsets[batch_id]
        else:
            end = latest_offset(self.source, self.kinesis, start, self.now_ms(), self.cutoff_ms)
            if end == start:
                return BatchResult(None)
            cp.offsets.append(end)
            for shard_id in end.get("goneUnread", {}):
                # Skipped by the plan (failOnDataLoss=false), which names it: the status
                # lists it among the skipped gaps once the epoch completes.
                self.reported_loss[shard_id] = "gone from the stream before its end"
        result = BatchResult(batch_id, replay=replay)
        writer = self.lake.writer(cp.query_id, batch_id)
        messages = []
        for partition in self.source.partitions(start, end):
            # A task packed with several shards (task_groups.py) reads each in turn here.
            tasks = (
                partition.shards
                if isinstance(partition, ShardGroupTask)
                else (cast(ShardReadTask, partition),)
            )
            batches = []
            for task in tasks:
                read, loss = read_shard(task, self.kinesis, self.store)
                batches.extend(read)
                if loss:
                    # Reported once its progress record is saved (failOnDataLoss=false),
                    # from which the next plan counts it, whether or not this batch commits.
                    result.loss[task.shard_id] = loss
                    self.reported_loss[task.shard_id] = loss
            message: DataFilesWritten = writer.write(iter(batches))
            result.rows += message.rows
            messages.append(message)
        if crash_at == BEFORE_COMMIT:
            raise Crash(crash_at)
        try:
            writer.commit(messages, batch_id)
        except Exception:
            if crash_at == DURING_ABORT:
                raise Crash(crash_at) from None
            writer.abort(messages, batch_id)
            raise
        if crash_at == AFTER_COMMIT:
            raise Crash(crash_at)
        cp.committed += 1
        self.source.commit(end)
        return result


def latest_offset(
    source: KinesisStreamReader,
    kinesis: SimulatedKinesis,
    start: dict[str, Any],
    now_ms: int,
    cutoff_ms: int | None,
) -> dict[str, Any]:
    """``KinesisStreamReader.latestOffset`` under ``ReadAllAvailable``, at ``now_ms``
    (``cutoff_ms``: the availableNow run's start, None for a lingering query)."""
    current = SourceOffset.from_dict(start)
    records = source._completed_epoch(current)
    source._publish_status(current, records)  # status.json: what the sensor reads
    outcomes = {shard_id: r.outcome for shard_id, r in records.items()}
    options = source.options
    if cutoff_ms is None and resting(
        current, outcomes, now_ms, options.idle_ms, options.max_idle_ms
    ):
        return start
    stream = source._check_stream_identity(current)
    planned = plan_next_offset(
        current,
        PlanningInput(
            listed_shards=list_shards(kinesis, options.stream_name),
            outcomes=outcomes,
            max_records_per_shard=options.max_records_per_shard,
            now_ms=now_ms,
            cutoff_ms=cutoff_ms,
            idle_ms=options.idle_ms,
            max_idle_ms=options.max_idle_ms,
            fail_on_data_loss=options.fail_on_data_loss,
            listed_ms=stream.server_ms,
        ),
    )
    return source._record_plan(planned)


def read_shard(
    task: ShardReadTask,
    kinesis: SimulatedKinesis,
    store: ShardProgressStore,
) -> tuple[list[pa.RecordBatch], str | None]:
    """The source's executor read of one task (``read_task``), with the simulated client
    and clock.

    Returns the task's Arrow batches and the data loss its read reported (only when
    ``failOnDataLoss=false``; otherwise that raises ``DataLossError`` as the task does).
    """

    def open_reader() -> ShardReader:
        return ShardReader(
            kinesis,
            task.stream_name,
            task.shard_id,
            retry=RetryPolicy(max_retries=task.max_retries),
            min_call_interval_s=task.min_call_interval_s,
            sleep=lambda _seconds: None,
            clock=lambda: kinesis_seconds(kinesis),
            **_virtual_read_start(kinesis),
        )

    # pipeline/ingest_query.py adds ingested_at (Spark's current_timestamp) to every row.
    ingested_at = pa.scalar(kinesis.now_ms() * 1000, pa.timestamp("us", tz="UTC"))
    read = read_task(task, store, open_reader, {"simulated": True})
    batches = []
    while True:
        try:
            records = next(read)
        except StopIteration as done:
            outcome = done.value
            return batches, outcome.data_loss if outcome is not None else None
        arrow = records_to_arrow(task.stream_name, task.shard_id, records)
        batches.append(_with_ingested_at(arrow, ingested_at))


def _with_ingested_at(batch: pa.RecordBatch, at: pa.Scalar) -> pa.RecordBatch:
    return batch.append_column("ingested_at", pa.array([at] * batch.num_rows, at.type))


VIRTUAL_READ_START = "now_ms" in inspect.signature(ShardReader).parameters
"""Whether the reader takes the epoch-ms clock of its ``read_started_ms`` (since 72093fa).
Older code reads the wall clock, which availableNow's cutoff rule compares with the
virtual one: the simulation then runs the sensor's runs as lingering ones."""


def _virtual_read_start(kinesis: SimulatedKinesis) -> dict[str, Any]:
    return {"now_ms": kinesis.now_ms} if VIRTUAL_READ_START else {}


def kinesis_seconds(kinesis: SimulatedKinesis) -> float:
    return kinesis.now_ms() / 1000
