"""Shards packed into read tasks by bytes (task_groups.py): the rule, and a packed task's
read of real shards on kinesalite (no Spark: the executor half runs as a task would)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from kinesis_lake.kinesis.shard_reader import ReadOutcome
from kinesis_lake.kinesis.start_positions import StartPosition
from kinesis_lake.spark.kinesis.offsets import ShardCursor
from kinesis_lake.spark.kinesis.progress import ShardProgressStore
from kinesis_lake.spark.kinesis.read_task import ShardReadTask
from kinesis_lake.spark.kinesis.task_groups import (
    UNKNOWN_RECORD_BYTES,
    ShardGroupTask,
    estimated_bytes,
    grouped_partitions,
    read_group,
)
from kinesis_lake.spark.packing import MIN_TASK_BYTES, pack_by_bytes
from kinesis_lake_tests.spark.source_helpers import REGION, keyed_events, new_stream, put

MIB = 1024 * 1024


def _shards(count: int) -> list[str]:
    return [f"shardId-{i:012d}" for i in range(count)]


def test_a_small_batch_over_many_shards_is_one_task_whatever_the_cores() -> None:
    """500 shards of 2 KB each: one task, so one file per partition value per commit."""
    groups = pack_by_bytes(dict.fromkeys(_shards(500), 2_000), 128 * MIB, min_tasks=8)

    assert len(groups) == 1
    assert sorted(groups[0]) == _shards(500)


def test_tasks_follow_the_bytes_and_each_shard_is_read_once() -> None:
    estimates = {sid: (i % 7 + 1) * 10 * MIB for i, sid in enumerate(_shards(500))}
    total = sum(estimates.values())

    groups = pack_by_bytes(estimates, 128 * MIB)

    assert len(groups) == -(-total // (128 * MIB))  # ceil: 157 tasks for 500 shards
    assert sorted(s for group in groups for s in group) == _shards(500)
    loads = [sum(estimates[s] for s in group) for group in groups]
    assert max(loads) - min(loads) <= 70 * MIB  # balanced within the largest shard


def test_a_large_batch_spreads_over_the_cores_but_not_below_the_open_cost() -> None:
    """Spark's file-split rule: a task's bytes are the target, or the batch over the
    cores when that is smaller, but never under 4 MiB."""
    big = dict.fromkeys(_shards(40), 5 * MIB)  # 200 MiB
    small = dict.fromkeys(_shards(40), MIN_TASK_BYTES // 10)  # 16 MiB in all

    assert len(pack_by_bytes(big, 512 * MIB, min_tasks=8)) == 8
    assert len(pack_by_bytes(small, 512 * MIB, min_tasks=8)) == 4
    assert len(pack_by_bytes(big, 512 * MIB, min_tasks=400)) == 40  # one per shard at most


def test_zero_bytes_per_task_keeps_a_task_per_shard_and_lone_shards_stay_plain() -> None:
    assert pack_by_bytes(dict.fromkeys(_shards(3), 10), 0) == [[s] for s in _shards(3)]
    reads = [_task(sid, Path("/unused")) for sid in _shards(3)]

    partitions = grouped_partitions(reads, [[_shards(3)[0]], _shards(3)[1:]])

    assert partitions[0] == reads[0]
    assert partitions[1] == ShardGroupTask((reads[1], reads[2]))


def _outcome(shard_id: str, bytes_read: int) -> ReadOutcome:
    return ReadOutcome(
        shard_id, 1, 1, "1", None, False, True, 0, "caught_up", 1, 0, 0, None, 0, None, bytes_read
    )


def test_a_shard_is_expected_to_give_what_its_last_read_gave() -> None:
    """Last read's bytes; a shard the last epoch did not read, their mean; with no last
    read at all (a query's first epoch), its record limit at 1 KiB a record; a byte
    budget in the plan caps every guess."""
    cursors = {
        "a": ShardCursor(StartPosition.trim_horizon(), limit=100),
        "b": ShardCursor(StartPosition.trim_horizon(), limit=100),
        "c": ShardCursor(StartPosition.trim_horizon(), limit=100),
        "d": ShardCursor(StartPosition.trim_horizon(), limit=100, max_bytes=50),
    }
    last = {"a": _outcome("a", 1_000), "b": _outcome("b", 3_000), "gone": _outcome("gone", 9)}

    assert estimated_bytes(cursors, last) == {"a": 1_000, "b": 3_000, "c": 2_000, "d": 50}
    first = estimated_bytes(cursors, {})
    assert first == {"a": 100 * UNKNOWN_RECORD_BYTES, "b": 102_400, "c": 102_400, "d": 50}


def _task(shard_id: str, metadata: Path, stream: str = "s", endpoint: str = "") -> ShardReadTask:
    return ShardReadTask(
        stream_name=stream,
        shard_id=shard_id,
        region_name=REGION,
        endpoint_url=endpoint,
        role=None,
        run_id="run",
        epoch=1,
        start=StartPosition.trim_horizon().to_dict(),
        limit=1_000,
        cutoff_ms=None,
        quiet_since_ms=None,
        retention_ms=24 * 3_600_000,
        processed_through=None,
        not_before_ms=0,
        metadata_path=str(metadata),
        fail_on_data_loss=True,
        min_call_interval_s=0.2,
        max_retries=1,
        consumer_arn=None,
    )


def test_a_packed_task_reads_every_shard_once_and_records_each(
    kinesalite_endpoint, tmp_path: Path
) -> None:
    """Twelve shards read by one task, eight at a time: every record once, each shard in
    its own order, and a progress record per shard as a task of its own would save."""
    url = kinesalite_endpoint.url
    stream = new_stream(url, shards=12)
    events = keyed_events("g", keys=48, per_key=2)
    put(url, stream, events)
    group = ShardGroupTask(tuple(_task(s, tmp_path, stream, url) for s in _shards(12)))

    rows = [row for batch in read_group(group) for row in batch.to_pylist()]

    assert sorted(row["data"] for row in rows) == sorted(data for _, data in events)
    by_shard: dict[str, list[int]] = {}
    for row in rows:
        by_shard.setdefault(row["shard_id"], []).append(int(row["sequence_number"]))
    assert all(seqs == sorted(seqs) for seqs in by_shard.values())
    saved = ShardProgressStore(str(tmp_path)).load_epoch("run", 1, _shards(12))
    assert sorted(saved) == _shards(12)
    assert sum(r.outcome.records_read for r in saved.values()) == len(events)


def test_a_failing_shard_fails_its_packed_task(kinesalite_endpoint, tmp_path: Path) -> None:
    url = kinesalite_endpoint.url
    stream = new_stream(url, shards=3)
    tasks = [_task(s, tmp_path, stream, url) for s in _shards(3)]
    broken = replace(tasks[1], shard_id="shardId-000000000099")  # no such shard

    with pytest.raises(Exception, match="shardId-000000000099"):
        list(read_group(ShardGroupTask((tasks[0], broken, tasks[2]))))
    assert ShardProgressStore(str(tmp_path)).load("run", 1, "shardId-000000000099") is None
