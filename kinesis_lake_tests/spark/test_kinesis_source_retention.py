"""Ingestion over weeks: time passes on the stream (a ClockProxy in front of kinesalite).

kinesalite alone never trims a record nor stops listing a shard, so these tests point the
pipeline at a :class:`~kinesis_lake_tests.kinesis.clock_proxy.ClockProxy` and advance its clock
past the retention period between runs, as days pass on a real stream.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException

from kinesis_lake.kinesis.streams import Shard
from kinesis_lake.pipeline.ingest import run_ingestion
from kinesis_lake.pipeline.ingest_query import checkpoint_location
from kinesis_lake.spark.kinesis.offsets import SourcePlanningError
from kinesis_lake.spark.kinesis.options import (
    KinesisOptionError,
    KinesisSourceOptions,
    check_against_stream,
)
from kinesis_lake_tests.pipeline_helpers import produce, raw_keys, stream_truth
from kinesis_lake_tests.spark.source_helpers import (
    QUERY_TIMEOUT_S,
    keyed_events,
    kinesis,
    new_stream,
    payloads,
    put,
    run_into,
    run_source,
    source_options,
    split,
    status,
)

PARENT = "shardId-000000000000"
OTHER = "shardId-000000000001"
DAY_S = 24 * 3600


def assert_exactly_once(settings, expected_rows: int) -> None:
    keys = raw_keys(settings)
    assert not [k for k, n in Counter(keys).items() if n > 1]
    assert len(keys) == expected_rows
    # Every record still retained in the stream is in the table.
    assert stream_truth(settings) <= {(shard, seq) for shard, seq, _ in keys}


@pytest.mark.parametrize("lose_checkpoint", [False, True], ids=["checkpoint", "no-checkpoint"])
def test_ingestion_starts_again_after_a_split_parent_ages_out(
    spark, clock, settings_factory, lose_checkpoint
):
    """Issue 10 defect 2: a day after a split, ListShards stops listing the parent; every
    start then refused the table's committed position on it."""
    settings = settings_factory(clock, shard_count=1)
    produce(settings, 60, seed=1)
    run_ingestion(spark, settings)
    split(kinesis(clock.url), settings.stream_name, PARENT)
    run_ingestion(spark, settings)  # the parent is read to its end; the children are empty
    # Read within the retention period, as the README asks: since issue 31 a shard read to
    # its tip while empty, then left unread for longer, is possible loss like any other.
    clock.advance(DAY_S - 4 * 3600)
    assert run_ingestion(spark, settings).rows == 0
    clock.advance(4 * 3600 + 60)
    listed = kinesis(clock.url).list_shards(StreamName=settings.stream_name)["Shards"]
    assert PARENT not in {s["ShardId"] for s in listed}
    produce(settings, 80, seed=2)
    if lose_checkpoint:
        shutil.rmtree(checkpoint_location(settings))

    result = run_ingestion(spark, settings)

    assert result.rows == 80
    assert_exactly_once(settings, 140)
    produce(settings, 20, seed=3)
    assert run_ingestion(spark, settings).rows == 20
    assert_exactly_once(settings, 160)


def test_a_start_naming_an_aged_out_shard_is_accepted_and_an_impossible_one_refused():
    """Only a shard numbered below a listed one can have aged out; others are typos."""
    listed = [Shard(f"shardId-00000000000{i}", PARENT, None, "1", None) for i in (1, 2)]

    def options(*shard_ids: str) -> KinesisSourceOptions:
        positions = {shard_id: "49" for shard_id in shard_ids}
        return KinesisSourceOptions.parse(
            {"streamName": "s", "startingPosition": json.dumps(positions)}
        )

    check_against_stream(options(PARENT, "shardId-000000000001"), listed)
    for impossible in ("shardId-000000000003", "shardld-000000000000"):
        with pytest.raises(KinesisOptionError, match=impossible):
            check_against_stream(options(impossible), listed)


def test_a_shard_idle_longer_than_retention_is_not_data_loss(spark, clock, settings_factory):
    """Issue 10 defect 3: the resume record of a quiet shard ages out; the next new record
    then looked like a gap, and every restart failed with a false data-loss error."""
    settings = settings_factory(clock, shard_count=1)
    produce(settings, 10, seed=1)
    run_ingestion(spark, settings)
    clock.advance(20 * 3600)
    assert run_ingestion(spark, settings).rows == 0  # the query polls the quiet shard
    clock.advance(5 * 3600)  # the resume record is now past retention; nothing arrived
    produce(settings, 5, seed=2)

    result = run_ingestion(spark, settings)

    assert result.rows == 5 and result.skipped_ranges == 0
    assert_exactly_once(settings, 15)


def test_records_that_expired_unread_are_data_loss(spark, clock, settings_factory):
    """The other side of defect 3: records that arrived after the last read to the tip
    and expired before the next read are lost, and that fails the query by default."""
    settings = settings_factory(clock, shard_count=1)
    produce(settings, 10, seed=1)
    run_ingestion(spark, settings)
    clock.advance(20 * 3600)
    run_ingestion(spark, settings)
    produce(settings, 4, seed=2)  # never read before they expire
    clock.advance(25 * 3600)
    produce(settings, 3, seed=3)

    with pytest.raises(StreamingQueryException, match="Data loss"):
        run_ingestion(spark, settings)
    assert len(raw_keys(settings)) == 10
    # Withheld from the reader: its resume record and the four that expired unread.
    assert clock.trimmed == {PARENT: 5}


def test_replaying_a_committed_batch_after_its_records_expired(spark, clock, settings_factory):
    """Issue 10 defect 7: the sink committed a batch, Spark died before its commit log
    entry, and the outage outlasted retention: the replay could not re-read the batch's
    pinned range and failed, although the sink would have skipped it anyway."""
    settings = settings_factory(clock, shard_count=1)
    produce(settings, 10, seed=1)
    clock.advance(10 * 3600)
    run_ingestion(spark, settings)
    commits = Path(checkpoint_location(settings)) / "commits"
    last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    # As if Spark died after the sink's commit, before its own (and its checksum file).
    (commits / str(last)).unlink()
    (commits / f".{last}.crc").unlink(missing_ok=True)
    clock.advance(15 * 3600)  # the batch's records are gone; the last read is recent
    produce(settings, 5, seed=2)

    result = run_ingestion(spark, settings)

    assert result.rows == 5
    assert_exactly_once(settings, 15)


def _outage_longer_than_retention_with_records_lost(spark, clock, settings) -> None:
    """Ingest, then records arrive and expire unread during an outage longer than the
    retention period; the shard holds nothing newer when ingestion starts again."""
    produce(settings, 10, seed=1)
    run_ingestion(spark, settings)
    clock.advance(2 * 3600)
    produce(settings, 4, seed=2)  # arrive during the outage, never read
    clock.advance(DAY_S + 3600)  # the resume record and the four are past retention


def test_an_empty_read_after_an_outage_that_lost_records_reports_the_loss(
    spark, clock, settings_factory
):
    """Issue 31 defect 2: the read after the outage found the shard empty and recorded it
    as read to its tip, so the gap was never reported and the next read took it for a
    quiet shard."""
    settings = settings_factory(clock, shard_count=1)
    _outage_longer_than_retention_with_records_lost(spark, clock, settings)

    with pytest.raises(StreamingQueryException, match="Data loss"):
        run_ingestion(spark, settings)
    assert clock.trimmed == {PARENT: 5}  # the resume record and the four lost


def test_an_acknowledged_loss_after_an_outage_is_counted_once(spark, clock, settings_factory):
    """With KINESIS_LAKE_FAIL_ON_DATA_LOSS=false the possible gap is skipped and counted
    once; the runs after it find no loss again, and new records land."""
    settings = settings_factory(clock, shard_count=1, fail_on_data_loss=False)
    _outage_longer_than_retention_with_records_lost(spark, clock, settings)

    assert run_ingestion(spark, settings).skipped_ranges == 1
    assert run_ingestion(spark, settings).skipped_ranges == 1
    produce(settings, 5, seed=3)
    result = run_ingestion(spark, settings)

    assert result.rows == 5 and result.skipped_ranges == 1
    assert_exactly_once(settings, 15)


def test_a_run_that_skips_gaps_names_every_shard_it_skipped(spark, clock, settings_factory):
    """The soak (seed 7, day 3): after an outage longer than retention, records expired
    unread on one shard and the other's loss cannot be ruled out. The failing run names
    only the shard whose task failed first, at random; the run with failOnDataLoss=false
    then skipped both gaps and named neither, so the shard that really lost records could
    go unnamed for good."""
    settings = settings_factory(clock, shard_count=2, fail_on_data_loss=False)
    _outage_longer_than_retention_with_records_lost(spark, clock, settings)

    result = run_ingestion(spark, settings)

    # The four lost records were all on PARENT; OTHER lost only its resume record, but
    # nothing read it within retention either, so its loss cannot be ruled out (README).
    assert clock.trimmed == {PARENT: 5, OTHER: 1}
    assert result.skipped_ranges == 2
    assert sorted(gap.shard_id for gap in result.skipped_gaps) == [PARENT, OTHER]
    assert all("no longer retained" in gap.detail for gap in result.skipped_gaps)
    assert run_ingestion(spark, settings).skipped_gaps == []  # named by the run that skipped


def test_records_expired_on_a_shard_read_to_its_tip_while_empty_are_data_loss(
    spark, clock, settings_factory
):
    """Issue 31 (found by the simulation): a shard the query read to its tip while empty
    stays at TRIM_HORIZON; records that arrived after that read and expired unread were
    skipped silently, since only a start after a known record was checked for a gap."""
    settings = settings_factory(clock, shard_count=1)
    produce(settings, 0, seed=0)  # creates the stream
    assert run_ingestion(spark, settings).rows == 0  # read to its tip, nothing there
    produce(settings, 4, seed=1)  # arrive during the outage, never read
    clock.advance(DAY_S + 3600)
    produce(settings, 3, seed=2)

    with pytest.raises(StreamingQueryException, match=r"(?s)Data loss.*TRIM_HORIZON"):
        run_ingestion(spark, settings)
    assert raw_keys(settings) == []


def test_a_child_never_read_takes_its_open_parents_tip_time():
    """Issue 31 (simulation seed 11): a query started without checkpoint gives a split's
    child the tip time its parent was read to while open, so records that arrived on the
    child and expired are reported; not when the parent's read ended it or finished it (a
    drained closed shard on kinesalite), nor when the child has an entry of its own."""
    from kinesis_lake.kinesis.start_positions import StartPosition
    from kinesis_lake.spark.kinesis.earlier_runs import with_earlier_tips
    from kinesis_lake.spark.kinesis.offsets import SourceOffset

    child, other = "shardId-000000000001", "shardId-000000000002"
    listed = [Shard(sid, PARENT, None, "1", None) for sid in (child, other)]
    offset = SourceOffset.initial(
        stream_created_ms=1_000,
        shards=listed,
        start=StartPosition.trim_horizon(),
        new_shard_start=StartPosition.trim_horizon(),
    )

    def tips(status: dict) -> dict:
        planned = with_earlier_tips(offset, status, listed)
        return {sid: cursor.tip_ms for sid, cursor in planned.shards.items()}

    open_parent = {PARENT: {"tip_ms": 5_000, "shard_ended": False}}
    assert tips({"shards": open_parent}) == {child: 5_000, other: 5_000}
    own = {**open_parent, other: {"tip_ms": None}}
    assert tips({"shards": own}) == {child: 5_000, other: None}
    assert tips({"shards": open_parent, "finishedShards": [PARENT]}) == {child: None, other: None}
    ended = {PARENT: {"tip_ms": 5_000, "shard_ended": True}}
    assert tips({"shards": ended}) == {child: None, other: None}
    assert tips({"shards": {PARENT: {"tip_ms": 500}}}) == {child: None, other: None}


def test_a_replay_of_a_parent_gone_from_the_stream_reports_its_loss_then_goes_on(
    spark, clock, tmp_path
):
    """Issue 31 (simulation seed 20147): a batch read a split's parent and died before its
    commit; a day later Kinesis no longer has the parent (ListShards omits it,
    GetShardIterator answers ResourceNotFoundException). Every restart replayed the
    batch and failed at GetShardIterator, for ever, and failOnDataLoss=false could not
    help. A shard gone is finished: the replay reports the range it can no longer read
    as data loss, and the acknowledged run goes on with the children."""
    url = clock.url
    stream = new_stream(url, shards=1)
    put(url, stream, keyed_events("lost", keys=2, per_key=2))
    split(kinesis(url), stream, PARENT)
    options = source_options(url, stream, tmp_path / "meta")
    checkpoint = tmp_path / "checkpoint"

    def read_then_die(batch, _batch_id: int) -> None:
        batch.count()  # the executors read the parent and record where they stopped
        raise RuntimeError("the sink died before its commit")

    with pytest.raises(StreamingQueryException, match="died before its commit"):
        run_into(spark, options, checkpoint, read_then_die, QUERY_TIMEOUT_S)
    clock.advance(DAY_S + 3600)
    # The proxy answers for a shard it knows expired, from a listing (the planner's).
    assert PARENT not in {
        s["ShardId"] for s in kinesis(url).list_shards(StreamName=stream)["Shards"]
    }

    pattern = r"(?s)Data loss.*shardId-000000000000.*all 4 of its records.*no longer in the stream"
    with pytest.raises(StreamingQueryException, match=pattern):
        run_source(spark, options, checkpoint)
    put(url, stream, keyed_events("new", keys=2, per_key=2))
    rows = run_source(spark, {**options, "failOnDataLoss": "false"}, checkpoint)

    assert sorted(payloads(rows)) == sorted(d.decode() for _, d in keyed_events("new", 2, 2))
    # The parent, and both children as possible loss: nothing read them for 25 hours
    # since the query started (README, Retention and time).
    assert status(tmp_path / "meta")["skippedRanges"] == 3


def test_a_gone_shard_an_earlier_query_left_unfinished_is_planned_to_be_reported():
    """Issue 31: a query started without checkpoint after a split's parent left the
    stream plans the parent when the progress records say the earlier query had not
    finished it (its first plan then reports it gone before its end); not when it had,
    nor when nothing is known of it (the table names a gone shard for ever)."""
    from kinesis_lake.kinesis.start_positions import StartPosition
    from kinesis_lake.spark.kinesis.earlier_runs import with_gone_unfinished
    from kinesis_lake.spark.kinesis.offsets import SourceOffset
    from kinesis_lake.spark.kinesis.planning import PlanningInput, plan_next_offset

    children = [Shard(f"shardId-00000000000{i}", PARENT, None, "1", None) for i in (1, 2)]
    committed = {PARENT: StartPosition.after("49")}
    offset = SourceOffset.initial(
        stream_created_ms=1_000,
        shards=children,
        start=StartPosition.trim_horizon(),
        new_shard_start=StartPosition.trim_horizon(),
        per_shard_start=committed,
    )

    def planned(status: dict | None) -> set[str]:
        return set(with_gone_unfinished(offset, status, committed).shards)

    live = {"read_started_ms": 5_000, "tip_ms": 5_000, "shard_ended": False}
    assert planned({"shards": {PARENT: live}}) == {PARENT, *(c.shard_id for c in children)}
    assert PARENT not in planned(None)
    assert PARENT not in planned({"shards": {PARENT: {**live, "shard_ended": True}}})
    assert PARENT not in planned({"shards": {PARENT: live}, "finishedShards": [PARENT]})
    assert PARENT not in planned({"shards": {PARENT: {**live, "read_started_ms": 500}}})

    first = with_gone_unfinished(offset, {"shards": {PARENT: live}}, committed)
    given = PlanningInput(listed_shards=children, outcomes={}, max_records_per_shard=10, now_ms=9)
    with pytest.raises(SourcePlanningError, match=f"Shard {PARENT} is no longer in the stream"):
        plan_next_offset(first, given)


def test_with_no_status_a_start_takes_the_empty_reads_of_failed_first_batches(tmp_path):
    """Issue 31 (simulation seed 40299): a deployment's first batch failed, so no status
    was ever written; its reads to the tip are still known from its progress records.
    Only reads that returned nothing past the table's position count (a batch that never
    committed must not date its records as read), the earliest of each shard, of runs
    that wrote no status."""
    from dataclasses import replace

    from kinesis_lake.spark.kinesis.progress import ProgressRecord, ShardProgressStore
    from kinesis_lake_tests.kinesis.helpers import outcome

    def read(shard_id: str, records: int, tip_ms: int) -> ProgressRecord:
        caught = outcome(shard_id, "7" if records else None, records=records, caught_up=True)
        return ProgressRecord(replace(caught, stopped_by="caught_up", tip_ms=tip_ms))

    store = ShardProgressStore(str(tmp_path))
    assert store.unpublished_status() is None
    other = "shardId-000000000001"
    store.save("first", 1, read(PARENT, 0, 5_000))
    store.save("first", 1, read(other, 3, 5_000))
    store.save("second", 1, read(PARENT, 0, 9_000))
    status = store.unpublished_status()
    assert status is not None
    assert {sid: entry["tip_ms"] for sid, entry in status["shards"].items()} == {PARENT: 5_000}

    store.write_status("second", {"epoch": 1, "shards": {}})
    status = store.unpublished_status()
    assert status is not None and status["shards"][PARENT]["tip_ms"] == 5_000
    # A read whose records the table holds (its batch committed, the run stopped before
    # publishing) counts too (seed 40299 again).
    status = store.unpublished_status({other: "7"})
    assert status is not None and set(status["shards"]) == {PARENT, other}
    assert store.unpublished_status({other: "6"})["shards"].keys() == {PARENT}


def test_the_status_names_the_shards_a_plan_skipped_as_gone():
    """Issue 31 (simulation seed 50389): the run that skips shards gone before their end
    names each among the skipped gaps, as it names the gaps reads found."""
    from dataclasses import replace

    from kinesis_lake.kinesis.start_positions import StartPosition
    from kinesis_lake.spark.kinesis.offsets import SourceOffset
    from kinesis_lake.spark.kinesis.progress import source_status

    offset = SourceOffset.initial(
        stream_created_ms=1,
        shards=[],
        start=StartPosition.trim_horizon(),
        new_shard_start=StartPosition.trim_horizon(),
    )
    skipped = replace(offset, epoch=3, skipped_ranges=2, gone_unread=frozenset({PARENT}))
    status = source_status(skipped, {}, None)
    assert status["skippedRanges"] == 2
    assert [(gap["shard"], gap["epoch"]) for gap in status["skippedGaps"]] == [(PARENT, 3)]
    assert "no longer in the stream" in status["skippedGaps"][0]["detail"]
