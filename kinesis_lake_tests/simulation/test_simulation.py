"""The bounded simulation run of ``make test``, and checks that the simulator is sound.

The bounded run: schedules of fixed seeds, as many as fit in ``SIM_TEST_SECONDS``
(default 60), each checked after every step; it prints its figures, and a failure
prints the seed and its shrunk replay. ``make simulate`` runs the same for longer.

The soundness checks: a simulator that never trims, never lists a closed shard as gone
or never rolls its iterators could not find the bugs it exists for, so each behaviour the
docstring of :mod:`kinesis_lake_tests.simulation.kinesis` promises is asserted here
through the real reader.
"""

from __future__ import annotations

import logging
import os
import time

import pytest
from botocore.exceptions import ClientError

from kinesis_lake.kinesis.shard_reader import ShardReader
from kinesis_lake.kinesis.start_positions import StartPosition
from kinesis_lake.kinesis.streams import list_shards
from kinesis_lake_tests.simulation.kinesis import ITERATOR_LIFETIME_MS, SimulatedKinesis
from kinesis_lake_tests.simulation.schedules import Figures, generate, run, shrink

_DAY = 24 * 3_600_000

KNOWN_OPEN: dict[str, str] = {}
"""Violation kinds of bugs found and still open, each pinned by an xfail(strict) test of
test_regressions.py: the bounded run reports them without failing. Remove an entry with
its fix (the strict xfail then fails until it is removed too)."""


class Clock:
    def __init__(self) -> None:
        self.ms = 1_800_000_000_000

    def __call__(self) -> int:
        return self.ms


def read_all(kinesis: SimulatedKinesis, shard: str, start: StartPosition) -> ShardReader:
    reader = ShardReader(kinesis, kinesis.stream_name, shard, sleep=lambda _s: None)
    for _ in reader.read(start, max_records=1000, retention_ms=kinesis.retention_ms):
        pass
    return reader


def test_records_past_retention_are_not_read_and_their_gap_is_reported():
    clock = Clock()
    kinesis = SimulatedKinesis(clock)
    first = kinesis.put("shardId-000000000000", "k", b"1")
    kinesis.put("shardId-000000000000", "k", b"2")
    clock.ms += _DAY + 1
    kinesis.put("shardId-000000000000", "k", b"3")
    reader = read_all(kinesis, "shardId-000000000000", StartPosition.after(first))
    assert reader.outcome is not None
    assert reader.outcome.records_read == 1 and reader.outcome.data_loss


def test_a_drained_closed_shard_ends_and_is_unlisted_once_its_records_expired():
    clock = Clock()
    kinesis = SimulatedKinesis(clock)
    kinesis.put("shardId-000000000000", "k", b"1")
    children = kinesis.split("shardId-000000000000")
    reader = read_all(kinesis, "shardId-000000000000", StartPosition.trim_horizon())
    assert reader.outcome is not None and reader.outcome.shard_ended
    listed = [s.shard_id for s in list_shards(kinesis, kinesis.stream_name)]
    assert listed == ["shardId-000000000000", *children]
    clock.ms += _DAY + 1
    assert [s.shard_id for s in list_shards(kinesis, kinesis.stream_name)] == list(children)


def test_iterators_expire_and_throttling_is_retried_by_the_reader():
    clock = Clock()
    kinesis = SimulatedKinesis(clock)
    kinesis.put("shardId-000000000000", "k", b"1")
    iterator = kinesis.get_shard_iterator(
        StreamName="events", ShardId="shardId-000000000000", ShardIteratorType="TRIM_HORIZON"
    )["ShardIterator"]
    clock.ms += ITERATOR_LIFETIME_MS + 1
    with pytest.raises(ClientError, match="ExpiredIteratorException"):
        kinesis.get_records(ShardIterator=iterator)
    kinesis.throttle("shardId-000000000000", 2)
    kinesis.expire_iterators(after_calls=1)
    reader = read_all(kinesis, "shardId-000000000000", StartPosition.trim_horizon())
    assert reader.outcome is not None
    assert (reader.outcome.records_read, reader.outcome.retries) == (1, 2)
    assert reader.outcome.iterator_renewals == 1


def test_a_seed_is_a_replay():
    assert generate(7) == generate(7)
    assert generate(7) != generate(8)


@pytest.mark.system  # a minute of random schedules, like the fuzzers: not for test-fast
def test_bounded_simulation_run(capsys: pytest.CaptureFixture[str]):
    """As many seeded schedules as fit in the budget; every invariant after every step."""
    logging.disable(logging.WARNING)
    try:
        budget = float(os.environ.get("SIM_TEST_SECONDS", "60"))
        figures = Figures()
        deadline = time.monotonic() + budget
        seed = 0
        while time.monotonic() < deadline:
            schedule = generate(seed, short=True)
            violation = run(schedule, figures)
            if violation is not None and violation.kind in KNOWN_OPEN:
                figures.faults[f"known-open-{violation.kind}"] += 1
            elif violation is not None:
                figures.failures.append((schedule, violation))
            seed += 1
        with capsys.disabled():
            print(f"\nsimulation: {figures.summary()}")
        if figures.failures:
            schedule, violation = figures.failures[0]
            minimal = shrink(schedule, violation.kind)
            pytest.fail(f"seed {schedule.seed}: {violation}\nminimal replay:\n{minimal.replay()}")
        assert figures.schedules >= 1 and figures.steps > 0
    finally:
        logging.disable(logging.NOTSET)
