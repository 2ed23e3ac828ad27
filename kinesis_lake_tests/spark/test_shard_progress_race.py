"""Progress records are first-writer-wins: a zombie attempt cannot overwrite the record of
the attempt whose rows were committed (issue 10 defect 6)."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from kinesis_lake.kinesis.shard_reader import ReadOutcome
from kinesis_lake.spark.kinesis.progress import (
    ProgressConflictError,
    ProgressRecord,
    ShardProgressStore,
)
from kinesis_lake_tests.kinesis.helpers import outcome as kinesis_outcome

SHARD = "shardId-000000000000"


def outcome(last: int, *, calls: int = 1) -> ReadOutcome:
    """A caught-up read of ``SHARD`` that took ``last`` records."""
    read = kinesis_outcome(
        SHARD, str(1000 + last), records=last, stopped_by="caught_up", caught_up=True
    )
    return replace(read, calls=calls)


def test_a_later_attempt_with_another_range_fails_and_the_first_record_stands(tmp_path):
    store = ShardProgressStore(str(tmp_path))
    store.save("run", 3, ProgressRecord(outcome(10), {"attempt": 1}))

    with pytest.raises(ProgressConflictError, match="epoch 3"):
        store.save("run", 3, ProgressRecord(outcome(25), {"attempt": "zombie"}))

    assert store.load("run", 3, SHARD) == ProgressRecord(outcome(10), {"attempt": 1})
    # An attempt that read the very same range agrees with the record and goes on.
    store.save("run", 3, ProgressRecord(replace(outcome(10), calls=7), {"attempt": 2}))
    assert store.load("run", 3, SHARD).reader == {"attempt": 1}


def test_racing_attempts_one_wins_the_rest_fail(tmp_path):
    store = ShardProgressStore(str(tmp_path))
    start = threading.Barrier(8)
    won: list[int] = []
    lost: list[int] = []

    def attempt(number: int) -> None:
        record = ProgressRecord(outcome(number + 1), {"attempt": number})
        start.wait()
        try:
            ShardProgressStore(str(tmp_path)).save("run", 5, record)
            won.append(number)
        except ProgressConflictError:
            lost.append(number)

    threads = [threading.Thread(target=attempt, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(won) == 1 and len(lost) == 7
    assert store.load("run", 5, SHARD).reader == {"attempt": won[0]}
    assert not [p for p in tmp_path.rglob("*.tmp")]


def test_on_s3_a_conditional_put_keeps_the_first_record(request):
    root = request.getfixturevalue("s3_root")  # moto S3 (the root conftest)
    store = ShardProgressStore(root)
    store.save("run", 1, ProgressRecord(outcome(4), {"attempt": 1}))

    with pytest.raises(ProgressConflictError):
        ShardProgressStore(root).save("run", 1, ProgressRecord(outcome(9), {"attempt": 2}))

    assert ShardProgressStore(root).load("run", 1, SHARD).reader == {"attempt": 1}
