"""How many tasks read an epoch, and which shards each reads: by bytes, not by shard count.

Every read task of the ``kinesis`` source feeds one write task of the sink (the plan is
narrow), and each write task writes its own data file per partition value. With one task
per shard, a 500-shard stream committed ~500 small files per micro-batch however little
it held (benchmark 9), and a commit's cost and the table's file count followed the shard
count. So the source packs shards into tasks of about ``bytesPerTask`` bytes, as Spark's
file sources pack small files into one task (:func:`kinesis_lake.spark.packing.
pack_by_bytes`), and a batch's files follow its bytes.

Why here, and not elsewhere in the plan: only the source knows, before anything is read,
what an epoch will hold. Kinesis does not say how many records wait in a shard, but the
previous epoch's progress records say how many bytes each shard gave last time, and the
plan says what caps this read (:func:`estimated_bytes`). A ``coalesce(n)`` on the query
is fixed when the query starts, for every batch, and on a cluster nobody knows a good n
then; a ``repartition`` shuffles every record; and Spark's adaptive coalescing does not
run on a streaming write of a Python data source.

Which tasks read which shard never matters for exactly-once: each shard's read is pinned
by its own progress record (:mod:`.read_task`), so a replay grouped otherwise (another
guess, another process) reads the same records. A task reads its shards concurrently
(:func:`read_group`), so packing costs files, not read parallelism: GetRecords waits on
the network and on Kinesis' 5 calls/s per shard far more than on the task's CPU.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import cast

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from kinesis_lake.kinesis.shard_reader import ReadOutcome
from kinesis_lake.spark.kinesis.offsets import ShardCursor
from kinesis_lake.spark.kinesis.read_task import ShardReadTask, read_shard
from kinesis_lake.spark.worker_process import freeze_imported_objects

UNKNOWN_RECORD_BYTES = 1024
"""The size assumed per record of a shard no earlier read describes, when no shard of the
last epoch does either (a query's first epoch): 1 KiB, above the typical Kinesis record,
so a first guess errs towards more tasks (at most one per shard, as before), never
towards one task holding a backlog of many shards."""

READ_THREADS = 8
"""Shards one task reads at once: each read keeps one call in flight, and botocore's
connection pool (10 per client, shared by the process) then never runs out."""

_QUEUED_BATCHES = 16
"""Arrow batches read ahead of the writer per task: bounds the task's memory."""


@dataclass(frozen=True)
class ShardGroupTask(InputPartition):
    """One read task's shards of one epoch: several :class:`ShardReadTask` read together."""

    shards: tuple[ShardReadTask, ...]


def estimated_bytes(
    cursors: Mapping[str, ShardCursor], last_reads: Mapping[str, ReadOutcome]
) -> dict[str, int]:
    """Bytes each shard's read of ``cursors`` is expected to return.

    A shard's last read is the best guess of its next: a shard behind hits its caps again,
    a shard at its tip gets about what arrived in one trigger interval again. A shard the
    last epoch did not read takes the mean of those it did, or, with none, its record
    limit at :data:`UNKNOWN_RECORD_BYTES`; a byte budget in the plan caps every guess.
    """
    known = [last_reads[sid].bytes_read for sid in cursors if sid in last_reads]
    mean = sum(known) // len(known) if known else None
    guesses = {}
    for shard_id, cursor in cursors.items():
        last = last_reads.get(shard_id)
        if last is not None:
            guess = last.bytes_read
        elif mean is not None:
            guess = mean
        else:
            guess = cursor.limit * UNKNOWN_RECORD_BYTES
        if cursor.max_bytes is not None:
            guess = min(guess, cursor.max_bytes)
        guesses[shard_id] = guess
    return guesses


def grouped_partitions(
    reads: Sequence[ShardReadTask], groups: Sequence[Sequence[str]]
) -> list[InputPartition]:
    """The epoch's input partitions: a lone shard as itself, others as a group."""
    by_id = {read.shard_id: read for read in reads}
    return [
        by_id[group[0]] if len(group) == 1 else ShardGroupTask(tuple(by_id[s] for s in group))
        for group in groups
    ]


def read_group(group: ShardGroupTask) -> Iterator[pa.RecordBatch]:
    """Read every shard of ``group`` on this executor, :data:`READ_THREADS` at a time,
    yielding Arrow batches as they come (each shard's in its order).

    Each shard's read saves its progress record when it has read its whole range, as a
    task of its own would (:func:`read_shard`). An error in any shard fails the task, and
    with it the micro-batch; the other reads are then abandoned (closed, unrecorded).
    """
    freeze_imported_objects()
    results: queue.Queue[object] = queue.Queue(maxsize=_QUEUED_BATCHES)
    stop = threading.Event()
    done = object()

    def put(item: object) -> bool:
        while not stop.is_set():
            with contextlib.suppress(queue.Full):
                results.put(item, timeout=0.1)
                return True
        return False

    def run(task: ShardReadTask) -> None:
        try:
            if stop.is_set():
                return
            with contextlib.closing(read_shard(task)) as batches:
                for batch in batches:
                    if not put(batch):
                        return
            put(done)
        except BaseException as error:  # handed to the task's thread, which raises it
            put(error)

    with ThreadPoolExecutor(min(READ_THREADS, len(group.shards)), "shard-read") as pool:
        for task in group.shards:
            pool.submit(run, task)
        try:
            remaining = len(group.shards)
            while remaining:
                item = results.get()
                if item is done:
                    remaining -= 1
                elif isinstance(item, BaseException):
                    raise item
                else:
                    yield cast(pa.RecordBatch, item)
        finally:
            stop.set()
