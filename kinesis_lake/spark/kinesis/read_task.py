"""The executor half of the ``kinesis`` source: one shard's read in one epoch.

The driver (:mod:`.source`) plans an epoch and hands each shard's share to an executor as
a :class:`ShardReadTask`, which carries everything the read needs, so the executor asks
the driver nothing. Here that task is read: the wait that keeps GetRecords within its
per-shard rate across epochs, the :class:`~kinesis_lake.kinesis.shard_reader.ShardReader`
run, the Arrow batches yielded as records arrive, and the progress record saved at the end.

Invariant: A RETRIED OR REPLAYED TASK READS EXACTLY THE RANGE ITS FIRST ATTEMPT RECORDED.
The first attempt saves its outcome in the
:class:`~kinesis_lake.spark.kinesis.progress.ShardProgressStore` only once it has read
the whole range; a later attempt that finds that record reads from the same start up to
the recorded last sequence number, and Kinesis records are immutable, so a batch a sink
may have committed replays with the same records (see :mod:`.source` for the protocol).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import InputPartition

from kinesis_lake.errors import IngestionError
from kinesis_lake.kinesis.client import AssumedRole, kinesis_client
from kinesis_lake.kinesis.records import KinesisRecord
from kinesis_lake.kinesis.retry import RetryPolicy
from kinesis_lake.kinesis.shard_reader import ReadOutcome, ShardReader
from kinesis_lake.kinesis.start_positions import StartPosition
from kinesis_lake.spark.kinesis.arrow import records_to_arrow
from kinesis_lake.spark.kinesis.progress import ProgressRecord, ShardProgressStore
from kinesis_lake.spark.worker_process import freeze_imported_objects


@dataclass(frozen=True)
class ShardReadTask(InputPartition):
    """One shard's share of one epoch: everything an executor needs, nothing it must ask."""

    stream_name: str
    shard_id: str
    region_name: str | None
    endpoint_url: str | None
    role: AssumedRole | None
    run_id: str
    epoch: int
    start: dict
    limit: int
    cutoff_ms: int | None
    quiet_since_ms: int | None
    retention_ms: int
    processed_through: str | None
    not_before_ms: int
    metadata_path: str
    fail_on_data_loss: bool
    min_call_interval_s: float
    max_retries: int
    consumer_arn: str | None
    max_bytes: int | None = None
    listed_open: bool = False
    """The shard was open when the epoch was planned (``ShardReader.read``'s
    ``listed_open``: a quiet shard is caught up in one GetRecords call)."""


class DataLossError(IngestionError, RuntimeError):
    """Records the query still had to read have expired from the stream."""


def read_shard(task: ShardReadTask) -> Generator[pa.RecordBatch, None, None]:
    """Read ``task`` on this executor, as Arrow batches of the source's columns."""
    freeze_imported_objects()

    def open_reader() -> ShardReader:
        _wait_until(task.not_before_ms)
        return ShardReader(
            kinesis_client(task.endpoint_url, task.region_name, role=task.role),
            task.stream_name,
            task.shard_id,
            retry=RetryPolicy(max_retries=task.max_retries),
            min_call_interval_s=task.min_call_interval_s,
            consumer_arn=task.consumer_arn,
        )

    store = ShardProgressStore(task.metadata_path)
    for records in read_task(task, store, open_reader, _reader_identity()):
        yield records_to_arrow(task.stream_name, task.shard_id, records)


def read_task(
    task: ShardReadTask,
    store: ShardProgressStore,
    open_reader: Callable[[], ShardReader],
    reader_identity: Mapping[str, Any],
) -> Generator[list[KinesisRecord], None, ReadOutcome | None]:
    """One task's read, the executor half of the protocol; returns its outcome (None when
    there was nothing to read). ``open_reader`` builds the reader (an executor's boto3
    client and clock; the simulator's) once the read is due.

    A retried or replayed task reads exactly the range its first attempt recorded; the
    first attempt records what it read once it has read it all.
    """
    pinned = store.load(task.run_id, task.epoch, task.shard_id)
    end = pinned.outcome.last_sequence_number if pinned is not None else None
    if pinned is not None and end is None:
        return None  # the first attempt found nothing; the replay must find nothing too
    if end is not None and _already_processed(task.processed_through, end):
        # A replay of a range the sink already holds: Spark died after the sink's
        # commit and before its own. The sink skips the batch, so re-reading it is
        # pointless, and after an outage longer than retention it is impossible.
        return None
    reader = open_reader()
    yield from reader.read(
        StartPosition.from_dict(task.start),
        max_records=task.limit,
        end_sequence_number=end,
        arrival_cutoff_ms=None if pinned is not None else task.cutoff_ms,
        quiet_since_ms=task.quiet_since_ms,
        retention_ms=task.retention_ms,
        pinned_records=pinned.outcome.records_read if pinned is not None else None,
        max_bytes=task.max_bytes,
        listed_open=task.listed_open,
    )
    outcome = reader.outcome
    assert outcome is not None  # set once the generator is exhausted
    # Failing here fails the task, and with it the micro-batch: rows already yielded
    # by this attempt are never committed.
    if outcome.data_loss and task.fail_on_data_loss:
        raise _data_loss(task, outcome.data_loss)
    if pinned is None:
        store.save(task.run_id, task.epoch, ProgressRecord(outcome, dict(reader_identity)))
    elif outcome.data_loss:
        # A replay that lost part of its range (skipped, failOnDataLoss=false): the
        # first attempt's record stands; the loss is recorded beside it, to be counted.
        store.save_replay_loss(task.run_id, task.epoch, outcome)
    return outcome


def _already_processed(processed_through: str | None, end: str) -> bool:
    return processed_through is not None and int(processed_through) >= int(end)


def _wait_until(epoch_ms: int) -> None:
    """Keep GetRecords at <= 5/s per shard across epochs, not only within one task.

    Every call of the previous epoch happened before this epoch was planned, so waiting
    until one call interval after planning spaces the first call of this epoch from the
    last of the previous one. Usually Spark's own scheduling has taken longer already.
    """
    delay_s = epoch_ms / 1000 - time.time()
    if delay_s > 0:
        time.sleep(delay_s)


def _reader_identity() -> dict:
    """Which process read the shard: for operators (and the proof that executors read)."""
    context = TaskContext.get()
    return {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "sparkTaskAttemptId": context.taskAttemptId() if context is not None else None,
    }


def _data_loss(task: ShardReadTask, detail: str) -> DataLossError:
    return DataLossError(
        f"Data loss on stream {task.stream_name!r}, shard {task.shard_id}: {detail}. "
        "The records after the last committed position expired (retention) before they "
        "were read, or cannot be shown not to have (nothing read the shard to its tip "
        "within the retention period). To go on from the oldest record still available, "
        "set KINESIS_LAKE_FAIL_ON_DATA_LOSS=false (source option failOnDataLoss=false) for "
        "one run, which names every range it skips (other shards may have lost records "
        "too); the no_data_loss check counts them, and kinesis-lake acknowledge-loss "
        "clears it."
    )
