"""What a query started without checkpoint learns from the plans of earlier runs, kept
beside the progress records (issue 31: the simulator's seeds 40299 and 50302 lost the
plans with the checkpoint)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from kinesis_lake.kinesis.start_positions import StartPosition
from kinesis_lake.spark.kinesis.earlier_runs import with_earlier_plan, with_earlier_start
from kinesis_lake.spark.kinesis.offsets import SourceOffset
from kinesis_lake.spark.kinesis.progress import ShardProgressStore
from kinesis_lake_tests.spark.offset_helpers import initial, shard

AFTER_7 = StartPosition.after("7")


def started(offset: SourceOffset, at_ms: int) -> SourceOffset:
    return replace(offset, started_ms=at_ms, listed_ms=at_ms)


def test_a_shard_the_earlier_plan_never_listed_was_created_after_that_listing():
    earlier = started(initial(shard("0"), shard("1")), 1_000)
    read_to_tip = replace(earlier.shards["0"], tip_ms=900)
    earlier = replace(earlier, shards={**earlier.shards, "0": read_to_tip})
    listed = [shard("0", closed=True), shard("2"), shard("3", "0", "2")]
    now = started(initial(*listed), 5_000)

    learned = with_earlier_plan(now, earlier, listed)

    assert learned.shards["0"].tip_ms == 900  # the plan's own read to the tip
    assert learned.shards["2"].tip_ms == 1_000  # unseen at 1,000 ms: created after
    assert learned.shards["3"].tip_ms == 900  # its parents' earliest, at most the listing


def test_the_first_runs_start_carries_on_for_shards_without_a_read_to_the_tip():
    earlier = started(initial(shard("0")), 1_000)
    now = started(initial(shard("0")), 5_000)

    learned = with_earlier_plan(now, earlier, [shard("0")])

    assert learned.started_ms == 1_000
    assert learned.listed_ms == 5_000  # this query's own listing
    assert learned.quiet_since("0") == 1_000


def test_a_shard_resumed_after_a_committed_record_is_left_to_its_resume_check():
    earlier = started(initial(shard("0")), 1_000)
    now = started(
        SourceOffset.initial(
            stream_created_ms=1,
            shards=[shard("0")],
            start=StartPosition.trim_horizon(),
            new_shard_start=StartPosition.trim_horizon(),
            per_shard_start={"0": AFTER_7},
        ),
        5_000,
    )

    learned = with_earlier_plan(now, earlier, [shard("0")])

    assert learned.shards["0"].tip_ms is None
    assert learned.quiet_since("0") is None


def test_a_plan_of_a_deleted_stream_of_the_same_name_is_ignored():
    earlier = replace(started(initial(shard("0")), 1_000), stream_created_ms=0)
    now = started(initial(shard("0")), 5_000)

    assert with_earlier_plan(now, earlier, [shard("0")]) == now


def test_the_latest_plan_is_the_one_made_last_whichever_run_made_it(tmp_path: Path):
    store = ShardProgressStore(str(tmp_path))
    first_run = replace(started(initial(shard("0")), 1_000), epoch=7, planned_ms=3_000)
    second_run = started(initial(shard("0")), 4_000)  # an initial offset: never planned
    store.write_plan(first_run.run_id, first_run.to_dict())
    store.write_plan(second_run.run_id, second_run.to_dict())

    assert store.latest_plan() == second_run
    assert not store.has_progress()  # a plan is not a read: the no_data_loss check waits


def test_a_shard_the_earlier_plan_finished_was_read_to_its_end_before_that_listing():
    """Seed 110139 of the simulation: a merge's child read to its end by a run whose
    checkpoint was then lost, re-read from its trim horizon holding nothing, was taken
    for quiet only since the first run's start (days before it existed): a false loss.
    Read to its end, a closed shard holds nothing the earlier run did not read, and the
    plan that finished it listed the stream after that read."""
    earlier = started(initial(shard("2")), 9_000)
    earlier = replace(earlier, started_ms=1_000, finished=frozenset({"0", "1"}))
    listed = [shard("0", closed=True), shard("1", "0", closed=True), shard("2", "1")]
    now = started(initial(*listed), 50_000)

    learned = with_earlier_plan(now, earlier, listed)

    assert learned.started_ms == 1_000
    assert learned.shards["0"].tip_ms == 9_000
    assert learned.shards["1"].tip_ms == 9_000
    assert learned.quiet_since("1") == 9_000


def test_latest_resumes_a_shard_without_committed_record_at_its_earlier_read_to_the_tip():
    """``latest`` pins 'arrived at or after now' for a new query: right for a deployment's
    first start, but a query started without checkpoint (a lost folder, a second machine)
    skipped, silently, what arrived on a shard with no committed record since an earlier
    run read it to its tip, or since the deployment started (the review of issue 36's
    fresh read found it). Such a shard now starts at that time; one resumed after a
    committed record keeps its position, and a first start (nothing earlier) keeps now."""
    now_ms = 50_000
    pinned = StartPosition.at_timestamp(now_ms)
    offset = SourceOffset.initial(
        stream_created_ms=1,
        shards=[shard("read"), shard("never-read"), shard("committed")],
        start=pinned,
        new_shard_start=StartPosition.trim_horizon(),
        per_shard_start={"committed": AFTER_7},
        started_ms=49_000,
    )
    read = replace(offset.shards["read"], tip_ms=30_000)
    earlier = replace(offset, shards={**offset.shards, "read": read}, started_ms=10_000)
    latest = StartPosition("LATEST")

    resumed = with_earlier_start(earlier, latest)

    assert resumed.shards["read"].start == StartPosition.at_timestamp(30_000)
    assert resumed.shards["never-read"].start == StartPosition.at_timestamp(10_000)
    assert resumed.shards["committed"].start == AFTER_7
    assert with_earlier_start(offset, latest).shards["never-read"].start == (
        StartPosition.at_timestamp(49_000)  # this query's own start: the server's clock
    )
    chosen = StartPosition.at_timestamp(5_000)  # a user's instant is the user's
    at_instant = replace(earlier, shards={"x": replace(read, start=chosen)})
    assert with_earlier_start(at_instant, chosen) == at_instant
