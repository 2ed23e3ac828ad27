"""Work packed into Spark tasks by its bytes, by the rule Spark's file sources use.

A task costs more than its data when the data is small: a task and a Python worker's
hand-over each, and in a sink one data file per task. Spark's own file sources therefore
pack small files into one read task (``spark.sql.files.maxPartitionBytes``, counting
``spark.sql.files.openCostInBytes`` per file). Our Python data sources get no such
packing from Spark, so they pack here: the Kinesis source its shards
(:mod:`kinesis_lake.spark.kinesis.task_groups`), the Iceberg files reader its data files
(:mod:`kinesis_lake.spark.iceberg.files_reader`).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping

from pyspark.sql import SparkSession

MIN_TASK_BYTES = 4 * 1024 * 1024
"""Bytes below which work is not split further to use more cores, and what opening one
more file costs a task: Spark's ``spark.sql.files.openCostInBytes``, the same trade (a
task and a file cost more than reading that much)."""

MAX_TASK_BYTES = 128 * 1024 * 1024
"""A read task's bytes when nothing else sets them: Spark's
``spark.sql.files.maxPartitionBytes``."""


def pack_by_bytes(
    estimates: Mapping[str, int], bytes_per_task: int, min_tasks: int = 1
) -> list[list[str]]:
    """Ids packed into tasks of about ``bytes_per_task`` bytes, at most one task per id;
    ``bytes_per_task`` 0 gives every id its own task.

    Spark's rule for file splits (``maxSplitBytes``) sets a task's bytes: the target,
    unless the work spread over ``min_tasks`` tasks (the cores there are to use) gives
    each less, but never under :data:`MIN_TASK_BYTES`. So a large batch keeps every core
    busy, and a small one is a single task, whatever the count of ids. Largest estimate
    first into the lightest task (the LPT rule), so tasks end close to equal and an id
    larger than the target gets a task of its own. Deterministic: ties go by id, and each
    task lists its ids in order.
    """
    ids = sorted(estimates)
    if not ids:
        return []
    if bytes_per_task <= 0:
        return [[one] for one in ids]
    total = sum(estimates.values())
    per_task = min(bytes_per_task, max(MIN_TASK_BYTES, math.ceil(total / max(min_tasks, 1))))
    count = min(len(ids), max(math.ceil(total / per_task), 1))
    tasks: list[list[str]] = [[] for _ in range(count)]
    lightest = [(0, index) for index in range(count)]
    for one in sorted(ids, key=lambda i: (-estimates[i], i)):
        load, index = heapq.heappop(lightest)
        tasks[index].append(one)
        heapq.heappush(lightest, (load + estimates[one], index))
    return [sorted(task) for task in tasks if task]


def known_cores(spark: SparkSession) -> int:
    """The cores known now: a local master's, else a configured
    ``spark.default.parallelism`` (a cluster's executors register later, none at all yet
    under dynamic allocation); 0 when none are."""
    if isinstance(spark, SparkSession) and _is_local(spark.sparkContext.master or ""):
        return spark.sparkContext.defaultParallelism
    # Over Spark Connect (no SparkContext here) or on a cluster: the configured value.
    return int(spark.conf.get("spark.default.parallelism", "0") or 0)


def _is_local(master: str) -> bool:
    """``local`` or ``local[N]``: one JVM whose cores are known at once (``local-cluster``
    starts executor processes that register later, like a real cluster)."""
    return master == "local" or master.startswith("local[")
