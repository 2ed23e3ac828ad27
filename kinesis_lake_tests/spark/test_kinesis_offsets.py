"""The source's planning rule, driven with made-up shards and read outcomes."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kinesis_lake.kinesis.start_positions import StartPosition
from kinesis_lake.kinesis.streams import Shard
from kinesis_lake.spark.kinesis.offsets import SourceOffset, SourcePlanningError
from kinesis_lake.spark.kinesis.planning import PlanningInput, plan_next_offset
from kinesis_lake.spark.kinesis.read_limits import epoch_byte_limits, epoch_limits
from kinesis_lake_tests.kinesis.helpers import outcome
from kinesis_lake_tests.spark.offset_helpers import initial, shard


def plan(current, listed, outcomes=(), **kwargs) -> SourceOffset:
    given = PlanningInput(
        listed_shards=listed,
        outcomes={o.shard_id: o for o in outcomes},
        max_records_per_shard=kwargs.pop("limit", 100),
        now_ms=kwargs.pop("now_ms", 10_000),
        **kwargs,
    )
    return plan_next_offset(current, given)


def test_offsets_round_trip_through_json_types():
    offset = plan(initial(shard("a"), shard("b", "a")), [shard("a", closed=True), shard("b", "a")])
    assert SourceOffset.from_dict(offset.to_dict()) == offset


def test_an_offset_of_another_layout_version_is_refused_with_the_fix():
    data = initial(shard("a")).to_dict()
    data["version"] = 0
    with pytest.raises(SourcePlanningError, match="new checkpointLocation"):
        SourceOffset.from_dict(data)


def test_each_epoch_continues_after_the_last_record_read():
    first = plan(initial(shard("a")), [shard("a")])
    assert first.shards["a"].limit == 100
    second = plan(first, [shard("a")], [outcome("a", "42")])
    assert second.epoch == 2
    assert second.shards["a"].start == StartPosition.after("42")


def test_a_read_that_found_nothing_starts_again_where_it_started():
    at = StartPosition.at_timestamp(5)
    first = plan(initial(shard("a"), start=at), [shard("a")])
    idle = outcome("a", None, records=0, stopped_by="caught_up", caught_up=True)
    assert plan(first, [shard("a")], [idle], now_ms=99_000).shards["a"].start == at


def test_children_wait_until_every_parent_is_read_to_its_end():
    parents = [shard("p1", closed=True), shard("p2", closed=True)]
    child = shard("c", "p1", "p2")
    first = plan(initial(*parents), [*parents, child])
    assert first.shards_to_read() == ["p1", "p2"]

    second = plan(first, [*parents, child], [outcome("p1", "5", ended=True), outcome("p2", "6")])
    assert second.shards_to_read() == ["p2"], "p2 is not drained yet, so the merge child waits"
    assert "p1" in second.finished

    third = plan(second, [*parents, child], [outcome("p2", "7", ended=True)])
    assert third.shards_to_read() == ["c"]
    assert third.shards["c"].start == StartPosition.trim_horizon()


def test_a_split_before_the_query_started_still_reads_the_parent_first():
    """The children are listed in the initial offset, with their own starting position,
    but are not read in the same epoch as their parent."""
    at = StartPosition.at_timestamp(7)
    listed = [shard("p", closed=True), shard("c1", "p"), shard("c2", "p")]
    first = plan(initial(*listed, start=at), listed)
    assert first.shards_to_read() == ["p"]
    assert first.shards["c1"].start == at and not first.shards["c1"].read
    second = plan(first, listed, [outcome("p", None, records=0, ended=True)])
    assert second.shards_to_read() == ["c1", "c2"]
    assert second.shards["c1"].start == at, "the initial starting position is kept"


def test_a_finished_shard_is_never_read_again():
    listed = [shard("p", closed=True), shard("c", "p")]
    first = plan(initial(listed[0]), listed)
    second = plan(first, listed, [outcome("p", "9", ended=True)])
    third = plan(second, listed, [outcome("c", "12")])
    assert "p" not in third.shards and "p" in third.finished


def _one_of_two_at_the_cutoff() -> tuple[list[Shard], SourceOffset]:
    """Shards a and b read once to a cutoff of 5 s: a reached it, b stopped at its limit."""
    listed = [shard("a"), shard("b")]
    first = plan(initial(*listed), listed, cutoff_ms=5_000)
    return listed, plan(
        first,
        listed,
        [outcome("a", "3", stopped_by="cutoff"), outcome("b", "4", stopped_by="limit")],
        cutoff_ms=5_000,
    )


def test_available_now_stops_when_every_shard_reached_the_cutoff():
    listed, second = _one_of_two_at_the_cutoff()
    assert second.shards_to_read() == ["b"]
    assert second.shards["a"].reached_cutoff
    done = plan(
        second,
        listed,
        [outcome("b", "8", stopped_by="caught_up", caught_up=True, started_ms=6_000)],
        cutoff_ms=5_000,
    )
    assert done == second, "returning the start offset is how a source ends availableNow"


def test_a_new_available_now_run_reads_shards_that_reached_the_old_cutoff():
    listed, second = _one_of_two_at_the_cutoff()
    later_run = plan(second, listed, [outcome("b", "5", stopped_by="cutoff")], cutoff_ms=9_000)
    assert later_run.shards_to_read() == ["a", "b"]


def test_a_shard_closed_before_its_read_is_finished_once_the_read_catches_up():
    """Its end needs no separate empty read: kinesalite reports it only to an iterator
    later than the one a read resumed after the last record gets, so waiting for it
    would leave the children unread forever."""
    parent, child = shard("p", closed=True), shard("c", "p")
    first = plan(initial(parent), [parent, child])
    assert first.shards["p"].closed
    caught_up = outcome("p", "9", stopped_by="caught_up", caught_up=True)
    second = plan(first, [parent, child], [caught_up])
    assert "p" in second.finished and second.shards_to_read() == ["c"]


def test_a_shard_that_closed_after_its_read_began_is_read_again():
    """Records may have arrived between the read and the split."""
    listed_open, listed_closed = [shard("p")], [shard("p", closed=True), shard("c", "p")]
    first = plan(initial(*listed_open), listed_open, cutoff_ms=5_000)
    caught_up = outcome("p", "9", stopped_by="caught_up", caught_up=True, started_ms=6_000)
    second = plan(first, listed_closed, [caught_up], cutoff_ms=5_000)
    assert second.shards_to_read() == ["p"] and second.shards["p"].closed
    again = outcome("p", "11", stopped_by="caught_up", caught_up=True, started_ms=7_000)
    third = plan(second, listed_closed, [again], cutoff_ms=5_000)
    assert third.shards_to_read() == ["c"]


def test_available_now_ends_when_a_closed_parent_holds_records_past_the_cutoff():
    """Its children were created after those records, so they hold nothing older."""
    parent, child = shard("p", closed=True), shard("c", "p")
    first = plan(initial(parent), [parent, child], cutoff_ms=5_000)
    second = plan(first, [parent, child], [outcome("p", "9", stopped_by="cutoff")], cutoff_ms=5_000)
    assert second == first


def test_an_idle_stream_is_not_polled_again_before_the_idle_time():
    listed = [shard("a")]
    first = plan(initial(*listed), listed, now_ms=1_000)
    idle = [outcome("a", None, records=0, stopped_by="caught_up", caught_up=True)]
    assert plan(first, listed, idle, now_ms=1_500, idle_ms=1_000) == first
    assert plan(first, listed, idle, now_ms=2_500, idle_ms=1_000).epoch == 2


def test_an_idle_stream_is_polled_ever_less_often_up_to_the_longest_pause():
    """Every poll of an idle stream is a micro-batch (tasks, a commit): on two cores a
    lingering run's polls once a second took 0.6-0.7 of a core from the downstream refresh
    beside it. The pause doubles after each empty epoch (1, 2, 4 s), up to ``max_idle_ms``,
    and a read that finds records starts again from ``idle_ms``."""
    listed = [shard("a")]
    idle = [outcome("a", None, records=0, stopped_by="caught_up", caught_up=True)]
    pauses = dict(idle_ms=1_000, max_idle_ms=5_000)
    epoch, now, waited = plan(initial(*listed), listed, now_ms=0), 0, []
    while len(waited) < 5:
        planned_at = now
        while (following := plan(epoch, listed, idle, now_ms=now, **pauses)) == epoch:
            now += 100
        waited.append(now - planned_at)
        epoch = following
    # Backed off, a pause may end up to 0.5 s early: a trigger of the same period that
    # comes round as it ends (its epoch stamped a little after the trigger began) takes it.
    assert waited == [1_000, 1_500, 3_500, 4_500, 4_500]
    busy = [outcome("a", "7", records=3, stopped_by="caught_up", caught_up=True)]
    after_records = plan(epoch, listed, busy, now_ms=now, **pauses)
    assert plan(after_records, listed, idle, now_ms=now + 999, **pauses) == after_records
    assert plan(after_records, listed, idle, now_ms=now + 1_000, **pauses).epoch == epoch.epoch + 2
    # Without a longest pause, none: every idle epoch waits idle_ms, as before.
    assert plan(epoch, listed, idle, now_ms=now + 1_000, idle_ms=1_000) != epoch


def test_missing_progress_record_fails_with_the_fix():
    first = plan(initial(shard("a")), [shard("a")])
    with pytest.raises(SourcePlanningError, match="metadataPath"):
        plan(first, [shard("a")], [])


def test_an_expired_unfinished_shard_is_data_loss_unless_allowed():
    listed = [shard("a"), shard("b")]
    first = plan(initial(*listed), listed)
    outcomes = [outcome("a", "1"), outcome("b", "2")]
    with pytest.raises(SourcePlanningError, match="failOnDataLoss") as refused:
        plan(first, [shard("b")], outcomes)
    # An empty shard gives the same error (seed 130584): the message must not claim records.
    assert "Kinesis does not say whether it held any" in str(refused.value)
    tolerant = plan(first, [shard("b")], outcomes, fail_on_data_loss=False)
    assert tolerant.shards_to_read() == ["b"]
    assert tolerant.skipped_ranges == 1


def test_a_gap_found_by_a_read_is_counted_as_a_skipped_range():
    first = plan(initial(shard("a")), [shard("a")])
    second = plan(first, [shard("a")], [outcome("a", "5", data_loss="gap")])
    assert second.skipped_ranges == 1


def test_read_max_rows_is_split_over_the_shards_the_next_epoch_reads():
    """The parent alone in epoch 1, its two children in epoch 2: 10 rows each time."""
    listed = [shard("p", closed=True), shard("c1", "p"), shard("c2", "p")]
    first = plan(initial(listed[0]), listed, max_rows=10)
    assert {s: c.limit for s, c in first.shards.items()} == {"p": 10, "c1": 0, "c2": 0}
    second = plan(first, listed, [outcome("p", "3", ended=True)], max_rows=10)
    assert {s: c.limit for s, c in second.shards.items()} == {"c1": 5, "c2": 5}


@pytest.mark.parametrize(
    ("max_rows", "cap", "rotation", "expected"),
    [
        (None, 100, 0, {"a": 100, "b": 100, "c": 100}),
        (1000, 100, 0, {"a": 100, "b": 100, "c": 100}),
        (10, 100, 0, {"a": 4, "b": 3, "c": 3}),
        (10, 100, 1, {"a": 3, "b": 4, "c": 3}),
        (2, 100, 0, {"a": 1, "b": 1}),
        (2, 100, 2, {"c": 1, "a": 1}),
    ],
)
def test_epoch_limits_never_exceed_the_read_limit(max_rows, cap, rotation, expected):
    limits = epoch_limits(["a", "b", "c"], cap, max_rows, rotation=rotation)
    assert limits == expected
    assert sum(limits.values()) <= (max_rows or 3 * cap)


def test_fewer_rows_than_shards_still_reads_every_shard_in_turn():
    listed = [shard("a"), shard("b"), shard("c")]
    current = plan(initial(*listed), listed, max_rows=1)
    read = []
    for _ in range(3):
        (shard_id,) = current.shards_to_read()
        read.append(shard_id)
        current = plan(current, listed, [outcome(shard_id, "1")], max_rows=1)
    assert sorted(read) == ["a", "b", "c"]


@pytest.mark.parametrize(
    ("per_shard", "total", "rotation", "expected"),
    [
        (None, None, 0, {"a": None, "b": None, "c": None}),
        (1000, None, 0, {"a": 1000, "b": 1000, "c": 1000}),
        (None, 10, 0, {"a": 4, "b": 3, "c": 3}),
        (3, 10, 1, {"a": 3, "b": 3, "c": 3}),
        (None, 2, 2, {"c": 1, "a": 1, "b": 0}),
    ],
)
def test_epoch_byte_limits_split_the_batch_budget_under_the_shard_cap(
    per_shard, total, rotation, expected
):
    budgets = epoch_byte_limits(["a", "b", "c"], per_shard, total, rotation=rotation)
    assert budgets == expected
    if total is not None:
        assert sum(budgets.values()) <= total


def test_the_plan_carries_each_shards_byte_budget_and_an_old_offset_still_loads():
    """The budget is in the offset, so a read its first attempt never finished is done
    again under the same budget; an offset logged before byte budgets loads without one.
    A shard whose share is 0 bytes sits the epoch out, as with records."""
    listed = [shard("a"), shard("b"), shard("c")]
    first = plan(initial(*listed), listed, max_bytes_per_shard=500, max_bytes=2)
    assert {s: (c.limit, c.max_bytes) for s, c in first.shards.items()} == {
        "a": (100, 1),
        "b": (100, 1),
        "c": (0, None),
    }
    logged = first.to_dict()
    assert logged["shards"]["a"]["maxBytes"] == 1
    assert SourceOffset.from_dict(logged) == first
    second = plan(first, listed, [outcome("a", "1"), outcome("b", "1")], max_bytes=2000)
    assert {c.max_bytes for c in second.shards.values()} == {667, 666}
    for cursor in logged["shards"].values():
        cursor.pop("maxBytes", None)
    old = SourceOffset.from_dict(logged)
    assert all(c.max_bytes is None for c in old.shards.values())
    assert plan(old, listed, [outcome("a", "1"), outcome("b", "1")]).shards_to_read() == [
        "a",
        "b",
        "c",
    ]


def test_a_child_of_a_parent_the_last_plan_never_saw_still_has_a_read_to_tip_time():
    """Issue 31 (simulation seed 40118): a and b merged into m1, then m1 and c into m2,
    all between two plans. m2's parent m1 was unknown to the last plan, so m2 had no
    read-to-tip time, and records that expired on it in an outage went unreported. A
    shard new to a plan was created after the last plan listed the stream: that time
    (the server's clock) bounds its own, whatever its parents; an earlier parent's
    read to its tip lowers it; with no listing time, every parent must have one."""
    a, b, c = shard("a"), shard("b"), shard("c")
    first = plan(initial(a, b, c), [a, b, c], now_ms=10_000, listed_ms=9_000)
    caught = [
        replace(outcome(s, "1", stopped_by="caught_up", caught_up=True), tip_ms=tip)
        for s, tip in (("a", 12_000), ("b", 11_000), ("c", 900_000))
    ]
    m1 = shard("m1", "a", "b", closed=True)
    m2 = shard("m2", "c", "m1")
    closed = [shard(s, closed=True) for s in ("a", "b", "c")]

    second = plan(first, [*closed, m1, m2], caught, now_ms=20_000)
    assert (second.shards["m1"].tip_ms, second.shards["m2"].tip_ms) == (9_000, 9_000)
    earlier = [replace(read, tip_ms=read.tip_ms - 5_000) for read in caught]
    second = plan(first, [*closed, m1, m2], earlier, now_ms=20_000)
    assert (second.shards["m1"].tip_ms, second.shards["m2"].tip_ms) == (6_000, 6_000)
    unlisted = replace(first, listed_ms=None)
    second = plan(unlisted, [*closed, m1, m2], caught, now_ms=20_000)
    assert (second.shards["m1"].tip_ms, second.shards["m2"].tip_ms) == (11_000, 11_000)

    # a, b, c and m1 past retention by the next plan: only m2 is listed.
    later = plan(first, [m2], caught, now_ms=20_000, fail_on_data_loss=False)
    assert later.shards["m2"].tip_ms == 9_000
    later = plan(unlisted, [m2], caught, now_ms=20_000, fail_on_data_loss=False)
    assert later.shards["m2"].tip_ms is None


def test_a_start_not_after_a_record_is_checked_from_the_query_start_until_a_read_to_the_tip():
    """Issue 31 (simulation seed 40299): what arrives once the query started is its to
    read, so a shard no read found at its tip yet is checked for records that expired
    from the query's start (on the server's clock) on; a read to the tip takes over, and
    a resume record's check never sees that start, which is no read."""
    started = SourceOffset.initial(
        stream_created_ms=1,
        shards=[shard("a"), shard("b")],
        start=StartPosition.trim_horizon(),
        new_shard_start=StartPosition.trim_horizon(),
        per_shard_start={"b": StartPosition.after("41")},
        started_ms=600_000,
    )
    assert SourceOffset.from_dict(started.to_dict()) == started
    first = plan(started, [shard("a"), shard("b")])
    assert first.quiet_since("a") == 600_000
    assert first.quiet_since("b") is None
    caught = outcome("a", None, records=0, stopped_by="caught_up", caught_up=True)
    b_read = outcome("b", "43")
    second = plan(first, [shard("a"), shard("b")], [replace(caught, tip_ms=700_000), b_read])
    assert second.quiet_since("a") == 700_000
    assert second.shards["a"].tip_ms == 700_000
    limited = plan(first, [shard("a"), shard("b")], [outcome("a", "42"), b_read])
    assert limited.quiet_since("a") is None and limited.shards["a"].tip_ms is None


def test_every_shard_gone_before_its_end_is_named_and_so_is_a_parent_no_plan_saw():
    """Issue 31 (simulation seeds 50389 and 50318): the error names every shard gone
    before its end, not only the first; the plan that skips them (failOnDataLoss=false)
    names each in ``gone_unread``, even reading nothing else; and a parent a new shard
    names, neither listed nor known to the last plan, was born and gone in between."""
    a, b, c = shard("a"), shard("b"), shard("c")
    first = plan(initial(a, b, c), [a, b, c])
    reads = [outcome(s, "1") for s in ("a", "b", "c")]
    with pytest.raises(SourcePlanningError, match=r"Shard a .*\(nor were b\)"):
        plan(first, [c], reads)
    skipped = plan(first, [c], reads, fail_on_data_loss=False)
    assert (skipped.gone_unread, skipped.skipped_ranges) == ({"a", "b"}, 2)
    assert SourceOffset.from_dict(skipped.to_dict()) == skipped
    alone = plan(first, [], reads, fail_on_data_loss=False)
    assert alone.gone_unread == {"a", "b", "c"} and alone.shards_to_read() == []

    # m: a and b merged after the first plan, and merged again with c into n; m is gone.
    n = shard("n", "m", "c")
    closed = [shard(s, closed=True) for s in ("a", "b", "c")]
    later = plan(first, [*closed, n], reads, fail_on_data_loss=False)
    assert later.gone_unread == {"m"} and "m" not in later.shards
