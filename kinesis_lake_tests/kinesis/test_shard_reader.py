"""ShardReader against real endpoints, with faults injected over real HTTP."""

from __future__ import annotations

import time

import pytest

from kinesis_lake.kinesis.client import kinesis_client
from kinesis_lake.kinesis.kpl import aggregate
from kinesis_lake.kinesis.retry import RetryPolicy
from kinesis_lake.kinesis.shard_calls import ShardReadError
from kinesis_lake.kinesis.shard_reader import ReadCursor, ReadOutcome, ShardReader
from kinesis_lake.kinesis.start_positions import StartPosition
from kinesis_lake.kinesis.streams import ensure_stream, list_shards, shard_lineage_order
from kinesis_lake_tests.kinesis.fault_proxy import FaultProxy
from kinesis_lake_tests.kinesis.helpers import entries, put, read_shard

SHARD = "shardId-000000000000"
FAST = RetryPolicy(max_retries=3, base_delay_s=0.001, max_delay_s=0.01)


def _reader(client, stream, **kwargs) -> ShardReader:
    kwargs.setdefault("min_call_interval_s", 0)
    kwargs.setdefault("retry", FAST)
    return ShardReader(client, stream, SHARD, **kwargs)


def _read(reader: ShardReader, start: StartPosition, **kwargs) -> list:
    return [record for page in reader.read(start, **kwargs) for record in page]


def _key(records) -> list[tuple[str, int, bytes]]:
    return [(r.sequence_number, r.sub_sequence_number, r.data) for r in records]


def test_limit_then_resume_after_reads_each_record_once(client, new_stream) -> None:
    stream = new_stream(client)
    sequence_numbers = put(client, stream, entries(10))
    reader = _reader(client, stream, max_records_per_call=3)

    first = _read(reader, StartPosition.trim_horizon(), max_records=4)
    assert [r.data for r in first] == [b"r0", b"r1", b"r2", b"r3"]
    assert reader.outcome is not None
    assert reader.outcome.stopped_by == "limit"
    assert reader.outcome.records_read == reader.outcome.user_records == 4
    assert reader.outcome.last_sequence_number == sequence_numbers[3]
    assert reader.outcome.calls == 2  # Limit=3, then Limit=1

    second = _read(reader, StartPosition.after(sequence_numbers[3]), max_records=100)
    assert [r.data for r in second] == [f"r{i}".encode() for i in range(4, 10)]
    assert reader.outcome.stopped_by == "caught_up"
    assert reader.outcome.caught_up and not reader.outcome.shard_ended
    assert reader.outcome.data_loss is None
    assert reader.outcome.millis_behind_latest == 0

    third = _read(reader, StartPosition.after(sequence_numbers[-1]), max_records=100)
    assert third == []
    assert reader.outcome.stopped_by == "caught_up"
    assert reader.outcome.records_read == 0
    assert reader.outcome.last_sequence_number is None


def test_records_carry_arrival_time_and_partition_key(client, new_stream) -> None:
    stream = new_stream(client)
    before_ms = int(time.time() * 1000)
    put(client, stream, [("user-1", b"a"), ("user-2", b"b")])
    records = read_shard(client, stream, SHARD)
    assert [r.partition_key for r in records] == ["user-1", "user-2"]
    assert all(before_ms - 1000 <= r.arrival_ms <= int(time.time() * 1000) + 1000 for r in records)
    assert all(not r.aggregated and r.sub_sequence_number == 0 and r.error is None for r in records)


def test_arrival_cutoff_excludes_later_records(client, new_stream) -> None:
    stream = new_stream(client)
    put(client, stream, entries(5, "early"))
    cutoff_ms = max(r.arrival_ms for r in read_shard(client, stream, SHARD))
    time.sleep(0.05)  # later records must arrive in a later millisecond than the cutoff
    put(client, stream, entries(5, "late"))

    reader = _reader(client, stream)
    records = _read(
        reader, StartPosition.trim_horizon(), max_records=100, arrival_cutoff_ms=cutoff_ms
    )
    assert [r.data for r in records] == [f"early{i}".encode() for i in range(5)]
    assert reader.outcome.stopped_by == "cutoff"
    assert not reader.outcome.caught_up and not reader.outcome.shard_ended
    assert reader.outcome.last_arrival_ms <= cutoff_ms


def test_pinned_replay_reproduces_the_first_read_after_appends(client, new_stream) -> None:
    stream = new_stream(client)
    put(client, stream, entries(30))
    reader = _reader(client, stream, max_records_per_call=7)
    first = _read(reader, StartPosition.trim_horizon(), max_records=12)
    end = reader.outcome.last_sequence_number

    put(client, stream, entries(10, "more"))
    for max_records in (12, 1000):  # the pinned end, not the cap, decides
        replay = _read(
            reader, StartPosition.trim_horizon(), max_records=max_records, end_sequence_number=end
        )
        assert _key(replay) == _key(first)
        assert reader.outcome.stopped_by == "end_sequence"
        assert reader.outcome.last_sequence_number == end


def test_pinned_replay_that_cannot_be_reproduced_raises(client, new_stream) -> None:
    stream = new_stream(client)
    sequence_numbers = put(client, stream, entries(3))
    beyond = str(int(sequence_numbers[-1]) + 1)
    with pytest.raises(ShardReadError, match="cannot be reproduced") as raised:
        _read(
            _reader(client, stream),
            StartPosition.trim_horizon(),
            max_records=100,
            end_sequence_number=beyond,
        )
    assert SHARD in str(raised.value)
    with pytest.raises(ShardReadError, match=r"stopped \(limit\)"):
        _read(
            _reader(client, stream),
            StartPosition.trim_horizon(),
            max_records=1,
            end_sequence_number=sequence_numbers[-1],
        )


def test_limit_counts_kinesis_records_and_never_splits_an_aggregate(client, new_stream) -> None:
    stream = new_stream(client)
    users = [(f"user-{i}", f"event-{i}".encode()) for i in range(5)]
    put(client, stream, [("user-0", aggregate(users)), ("plain", b"after")])
    reader = _reader(client, stream)
    records = _read(reader, StartPosition.trim_horizon(), max_records=1)
    assert [(r.partition_key, r.data, r.sub_sequence_number) for r in records] == [
        (key, data, index) for index, (key, data) in enumerate(users)
    ]
    assert all(r.aggregated for r in records)
    assert len({r.sequence_number for r in records}) == 1
    assert (reader.outcome.records_read, reader.outcome.user_records) == (1, 5)
    assert reader.outcome.stopped_by == "limit"


def test_a_byte_budget_bounds_each_read_in_whole_records_and_replays_identically(
    client, new_stream
) -> None:
    """Records of 11 to 61 bytes and a KPL aggregate larger than the 50-byte budget,
    read one budget at a time, resuming after each read's last record: every read stays
    within the budget, but a first record larger than it is read alone (progress), the
    aggregate with all its user records (never split); every record is read once, in
    order; a pinned replay of a read that stopped before a record reads the same."""
    stream = new_stream(client)
    users = [(f"user-{i}", f"event-{i}".encode()) for i in range(5)]
    blobs = [b"a" * 10, b"b" * 30, b"c" * 5, b"d" * 60, b"e" * 20, aggregate(users), b"f" * 8]
    put(client, stream, [("k", blob) for blob in blobs] + [("key-41", b"g" * 35)])
    sizes = [len(blob) + 1 for blob in blobs] + [41]  # data plus partition key
    assert sizes[5] > 50
    reader = _reader(client, stream, max_records_per_call=3)
    reads, start = [], StartPosition.trim_horizon()
    while not reads or reader.outcome.stopped_by != "caught_up":
        records = _read(reader, start, max_records=100, max_bytes=50)
        outcome = _outcome(reader)
        reads.append((outcome.stopped_by, outcome.records_read, outcome.bytes_read, records))
        start = StartPosition.after(outcome.last_sequence_number or "0")
    assert [(stop, count, size) for stop, count, size, _ in reads] == [
        ("over_bytes", 3, 48),  # 11 + 31 + 6; the 61-byte record would pass 50
        ("bytes", 1, 61),  # larger than the budget: read alone
        ("over_bytes", 1, 21),  # the aggregate would pass 50
        ("bytes", 1, sizes[5]),  # the aggregate alone, whole
        ("bytes", 2, 50),  # 9 + 41 reach the budget exactly
        ("caught_up", 0, 0),
    ]
    aggregate_read = reads[3][3]
    assert [(r.partition_key, r.data) for r in aggregate_read] == users
    everything = [r for *_, records in reads for r in records]
    assert len({(r.sequence_number, r.sub_sequence_number) for r in everything}) == 12
    assert [r.data for r in everything if not r.aggregated] == [
        b"a" * 10,
        b"b" * 30,
        b"c" * 5,
        b"d" * 60,
        b"e" * 20,
        b"f" * 8,
        b"g" * 35,
    ]

    first = _read(reader, StartPosition.trim_horizon(), max_records=100, max_bytes=50)
    replay = _read(
        reader,
        StartPosition.trim_horizon(),
        max_records=100,
        max_bytes=50,
        end_sequence_number=reads[0][3][-1].sequence_number,
        pinned_records=3,
    )
    assert _key(replay) == _key(first) == _key(reads[0][3])
    assert (_outcome(reader).stopped_by, _outcome(reader).data_loss) == ("end_sequence", None)


def test_at_timestamp_start(client, new_stream) -> None:
    stream = new_stream(client)
    put(client, stream, entries(3, "old"))
    time.sleep(0.05)
    start_ms = int(time.time() * 1000)
    time.sleep(0.05)
    # No record at or after start_ms yet: kinesalite 3.3.3 used to hang here (launcher fix).
    assert read_shard(client, stream, SHARD, start=StartPosition.at_timestamp(start_ms)) == []
    put(client, stream, entries(2, "new"))
    records = read_shard(client, stream, SHARD, start=StartPosition.at_timestamp(start_ms))
    assert [r.data for r in records] == [b"new0", b"new1"]


def test_throttling_and_server_errors_are_retried(client, new_stream, proxy: FaultProxy) -> None:
    stream = new_stream(client)
    put(client, stream, entries(6))
    proxy.inject("GetShardIterator", "server_error", 1)
    proxy.inject("GetRecords", "throttle", 2)
    proxy.inject("GetRecords", "server_error", 1)
    reader = _reader(kinesis_client(proxy.url), stream, max_records_per_call=4)
    records = _read(reader, StartPosition.trim_horizon(), max_records=100)
    assert [r.data for r in records] == [f"r{i}".encode() for i in range(6)]
    assert reader.outcome.retries == 4
    assert reader.outcome.calls == 3 + 2  # three failed GetRecords attempts, pages of 4 and 2
    assert proxy.counts[("GetRecords", "throttle")] == 2
    assert proxy.counts[("GetShardIterator", "server_error")] == 1


def test_expired_iterator_is_renewed_after_the_last_record(
    client, new_stream, proxy: FaultProxy
) -> None:
    stream = new_stream(client)
    put(client, stream, entries(10))
    reader = _reader(kinesis_client(proxy.url), stream, max_records_per_call=3)
    proxy.inject("GetRecords", "expired_iterator", 1)  # before any record: renew from start
    pages = []
    for page in reader.read(StartPosition.trim_horizon(), max_records=100):
        pages.append(page)
        if len(pages) == 2:  # mid-read: renew after the last record read
            proxy.inject("GetRecords", "expired_iterator", 2)
    records = [r for page in pages for r in page]
    assert [r.data for r in records] == [f"r{i}".encode() for i in range(10)]
    assert reader.outcome.iterator_renewals == 3
    assert reader.outcome.stopped_by == "caught_up"


def test_exhausted_retries_raise_naming_shard_and_operation(
    client, new_stream, proxy: FaultProxy
) -> None:
    stream = new_stream(client)
    put(client, stream, entries(2))
    proxy.inject("GetRecords", "throttle", 10)
    reader = _reader(kinesis_client(proxy.url), stream)
    with pytest.raises(ShardReadError) as raised:
        _read(reader, StartPosition.trim_horizon(), max_records=10)
    message = str(raised.value)
    for part in (
        SHARD,
        stream,
        "GetRecords",
        "4 attempt(s)",
        "ProvisionedThroughputExceededException",
    ):
        assert part in message
    assert proxy.counts[("GetRecords", "throttle")] == 4
    assert reader.outcome is None


def test_errors_that_are_not_transient_fail_at_once(client, new_stream) -> None:
    stream = new_stream(client)
    reader = ShardReader(client, stream, "shardId-000000000042", min_call_interval_s=0)
    with pytest.raises(ShardReadError, match=r"GetShardIterator.*1 attempt.*ResourceNotFound"):
        _read(reader, StartPosition.trim_horizon(), max_records=10)


def test_missing_resume_record_is_reported_as_data_loss(kinesalite, new_stream) -> None:
    """A resume point whose record is gone (here: a shard's starting sequence number, which
    holds no record on kinesalite) must be reported, not skipped silently."""
    client = kinesis_client(kinesalite.url)
    stream = new_stream(client)
    sequence_numbers = put(client, stream, entries(3))
    shard = list_shards(client, stream)[0]
    reader = _reader(client, stream)
    records = _read(reader, StartPosition.after(shard.starting_sequence_number), max_records=10)
    assert [r.data for r in records] == [b"r0", b"r1", b"r2"]
    loss = reader.outcome.data_loss
    assert loss is not None
    assert shard.starting_sequence_number in loss and sequence_numbers[0] in loss


def test_rejected_resume_point_reads_from_trim_horizon_without_duplicates(
    client, new_stream, proxy: FaultProxy
) -> None:
    stream = new_stream(client)
    sequence_numbers = put(client, stream, entries(5))
    proxy.inject("GetShardIterator", "invalid_argument", 1)
    reader = _reader(kinesis_client(proxy.url), stream)
    records = _read(reader, StartPosition.after(sequence_numbers[2]), max_records=10)
    assert [r.data for r in records] == [b"r3", b"r4"]  # r0..r2 skipped, r2 found: no loss
    assert reader.outcome.data_loss is None
    assert proxy.counts[("GetShardIterator", "invalid_argument")] == 1


def test_rejected_resume_point_that_is_gone_is_data_loss(kinesalite, new_stream) -> None:
    proxy = FaultProxy(kinesalite.url).start()
    try:
        client = kinesis_client(kinesalite.url)
        stream = new_stream(client)
        put(client, stream, entries(2))
        gone = list_shards(client, stream)[0].starting_sequence_number  # holds no record
        proxy.inject("GetShardIterator", "invalid_argument", 1)
        reader = _reader(kinesis_client(proxy.url), stream)
        records = _read(reader, StartPosition.after(gone), max_records=10)
    finally:
        proxy.stop()
    assert [r.data for r in records] == [b"r0", b"r1"]
    assert reader.outcome.data_loss is not None
    assert "rejected" in reader.outcome.data_loss and gone in reader.outcome.data_loss


def test_sequence_number_of_another_shard_is_an_error(kinesalite, new_stream) -> None:
    client = kinesis_client(kinesalite.url)
    stream = new_stream(client, 2)
    foreign = client.put_record(
        StreamName=stream, PartitionKey="x", Data=b"x", ExplicitHashKey=str(2**127 + 1)
    )
    assert foreign["ShardId"] == "shardId-000000000001"
    with pytest.raises(ShardReadError, match="GetShardIterator"):
        _read(
            _reader(client, stream), StartPosition.after(foreign["SequenceNumber"]), max_records=5
        )


def test_split_parent_ends_and_children_follow(kinesalite, new_stream) -> None:
    client = kinesis_client(kinesalite.url)
    stream = new_stream(client)
    before = [(f"key-{i}", f"before-{i}".encode()) for i in range(20)]
    put(client, stream, before)
    client.split_shard(StreamName=stream, ShardToSplit=SHARD, NewStartingHashKey=str(2**127))
    # Until the split completes (stream ACTIVE again) writes still go to the parent.
    assert ensure_stream(client, stream, 1).open_shard_count == 2
    after = [(f"key-{i}", f"after-{i}".encode()) for i in range(20)]
    put(client, stream, after)

    shards = list_shards(client, stream)
    parent, *children = shards
    assert parent.shard_id == SHARD and parent.is_closed
    assert [c.parent_ids for c in children] == [(SHARD,), (SHARD,)]
    assert shard_lineage_order(list(reversed(shards)))[0].shard_id == SHARD

    reader = _reader(client, stream)
    parent_records = _read(reader, StartPosition.trim_horizon(), max_records=1000)
    assert [r.data for r in parent_records] == [d for _, d in before]
    # kinesalite signals the end only on an empty page, so the first read stops at the tip
    # of the drained parent; the next read finds the end and nothing beyond it.
    assert reader.outcome.stopped_by == "caught_up" and not reader.outcome.shard_ended
    last = reader.outcome.last_sequence_number
    assert _read(reader, StartPosition.after(last), max_records=1000) == []
    assert reader.outcome.shard_ended and reader.outcome.stopped_by == "shard_end"
    assert reader.outcome.calls == 2  # the resume record alone does not count as caught up

    child_data = sorted(r.data for c in children for r in read_shard(client, stream, c.shard_id))
    assert child_data == sorted(d for _, d in after)


def test_an_open_shard_read_from_its_last_record_is_caught_up_in_one_call(
    client, new_stream
) -> None:
    """A page holding only the resume record ends the read of a shard its caller listed
    open: only a closed shard's end needs kinesalite's empty page. One GetRecords instead
    of two, which at the shard's pace (5 calls/s) are 200 ms apart: a fresh read right
    after a commit reads every shard from its last record (benchmark 15)."""
    stream = new_stream(client)
    [last] = put(client, stream, entries(1))
    reader = _reader(client, stream)

    assert _read(reader, StartPosition.after(last), max_records=10, listed_open=True) == []
    assert reader.outcome.stopped_by == "caught_up" and reader.outcome.calls == 1
    assert reader.outcome.data_loss is None
    assert _read(reader, StartPosition.after(last), max_records=10) == []
    assert reader.outcome.stopped_by == "caught_up" and reader.outcome.calls == 2


def test_positions_and_outcomes_round_trip_through_json() -> None:
    import json

    for start in (
        StartPosition.trim_horizon(),
        StartPosition.after("49590338271490256608559692538361571095921575989136588898"),
        StartPosition.at_timestamp(1_700_000_000_000),
        StartPosition("LATEST"),
    ):
        assert StartPosition.from_dict(json.loads(json.dumps(start.to_dict()))) == start
    outcome = ReadOutcome(
        shard_id=SHARD,
        records_read=3,
        user_records=7,
        last_sequence_number="42",
        last_arrival_ms=5,
        shard_ended=False,
        caught_up=True,
        millis_behind_latest=0,
        stopped_by="caught_up",
        calls=2,
        retries=1,
        iterator_renewals=0,
        data_loss=None,
        read_started_ms=1,
    )
    assert ReadOutcome.from_dict(json.loads(json.dumps(outcome.to_dict()))) == outcome


@pytest.mark.parametrize("args", [("NOWHERE",), ("AFTER_SEQUENCE_NUMBER",), ("AT_TIMESTAMP",)])
def test_invalid_start_positions_are_rejected(args) -> None:
    with pytest.raises(ValueError):
        StartPosition(*args)


def test_no_page_is_fetched_ahead_of_where_the_read_stops(client, new_stream) -> None:
    """A call made ahead that the read then does not use would spend one of the shard's
    five GetRecords per second for nothing: at the tip, at the record limit, at the end
    of a pinned range and at the arrival cutoff, the reader makes no call beyond the page
    it stops on."""
    stream = new_stream(client)
    sequence_numbers = put(client, stream, entries(30))
    time.sleep(1.1)
    cutoff_ms = int(time.time() * 1000)
    time.sleep(1.1)
    put(client, stream, entries(10, prefix="late"))

    def calls(**read_args) -> int:
        reader = _reader(client, stream, max_records_per_call=10)
        _read(reader, StartPosition.trim_horizon(), **read_args)
        assert reader.outcome is not None
        return reader.outcome.calls

    assert calls(max_records=15) == 2  # pages of 10 and 5
    assert calls(max_records=100, end_sequence_number=sequence_numbers[14]) == 2
    # Pages of 10, 10 and 10, then the page of late records it stops on:
    assert calls(max_records=100, arrival_cutoff_ms=cutoff_ms) == 4
    tip = _reader(client, stream, max_records_per_call=50)
    assert len(_read(tip, StartPosition.after(sequence_numbers[-1]), max_records=100)) == 10
    assert tip.outcome.stopped_by == "caught_up"
    assert tip.outcome.calls == 1


# ---- retention and replays, on the clock proxy's time (issue 31) ---------------------

_HOUR_S = 3600
_RETENTION_MS = 24 * 3_600_000


def _outcome(reader: ShardReader) -> ReadOutcome:
    assert reader.outcome is not None
    return reader.outcome


def test_a_replay_of_a_range_retention_took_reports_it_lost(clock, new_stream) -> None:
    """A batch read 3 records and died uncommitted; an outage outlasted retention. Its
    replay reads nothing of the range again: that is reported as loss (the records and
    any after them up to the first retained one), not a ShardReadError on every restart."""
    client = kinesis_client(clock.url, timeout_s=10)
    stream = new_stream(client)
    put(client, stream, entries(3))
    reader = _reader(client, stream)
    first = _read(reader, StartPosition.trim_horizon(), max_records=10, retention_ms=_RETENTION_MS)
    end = _outcome(reader).last_sequence_number
    clock.advance(30 * _HOUR_S)
    after = put(client, stream, entries(2, "new"))

    replay = _read(
        reader,
        StartPosition.trim_horizon(),
        max_records=10,
        end_sequence_number=end,
        pinned_records=len(first),
        retention_ms=_RETENTION_MS,
    )
    assert replay == []
    loss = _outcome(reader).data_loss
    assert loss is not None and end is not None
    assert end in loss and "all 3 of its records" in loss
    assert after[0] in loss

    # tip_ms (the first retained record's arrival) then covers the gap, so the next
    # read does not report it again: shown by the simulation's regression test, since
    # the clock proxy does not move arrival times to its clock (only the Date header).
    assert _outcome(reader).tip_ms is not None


def test_a_replay_that_read_its_whole_range_is_no_loss_though_its_resume_record_aged_out(
    clock, new_stream
) -> None:
    client = kinesis_client(clock.url, timeout_s=10)
    stream = new_stream(client)
    [resumed] = put(client, stream, entries(1, "old"))
    clock.advance(23 * _HOUR_S)
    put(client, stream, entries(3))
    reader = _reader(client, stream)
    first = _read(reader, StartPosition.after(resumed), max_records=10, retention_ms=_RETENTION_MS)
    assert _outcome(reader).data_loss is None and len(first) == 3
    end = _outcome(reader).last_sequence_number
    clock.advance(2 * _HOUR_S)  # the resume record ages out; the range does not

    replay = _read(
        reader,
        StartPosition.after(resumed),
        max_records=10,
        end_sequence_number=end,
        pinned_records=len(first),
        retention_ms=_RETENTION_MS,
    )
    assert _key(replay) == _key(first)
    assert _outcome(reader).data_loss is None


@pytest.mark.parametrize("outage_hours", [20, 30])
def test_records_expired_on_a_shard_read_to_its_tip_while_empty_are_reported(
    clock, new_stream, outage_hours: int
) -> None:
    """A shard read to its tip while it held nothing stays at TRIM_HORIZON: records that
    arrive after that read and expire before the next are loss as well. Within retention
    the read to the tip still proves the shard was quiet."""
    client = kinesis_client(clock.url, timeout_s=10)
    stream = new_stream(client)
    reader = _reader(client, stream)
    assert _read(reader, StartPosition.trim_horizon(), max_records=10) == []
    tip_ms = _outcome(reader).tip_ms
    assert tip_ms is not None
    put(client, stream, entries(2, "lost"))
    clock.advance(outage_hours * _HOUR_S)
    put(client, stream, entries(2, "new"))

    records = _read(
        reader,
        StartPosition.trim_horizon(),
        max_records=10,
        quiet_since_ms=tip_ms,
        retention_ms=_RETENTION_MS,
    )
    if outage_hours < 24:
        assert [r.data for r in records] == [b"lost0", b"lost1", b"new0", b"new1"]
        assert _outcome(reader).data_loss is None
    else:
        assert [r.data for r in records] == [b"new0", b"new1"]
        assert "TRIM_HORIZON" in (_outcome(reader).data_loss or "")


def test_a_shard_gone_from_the_stream_ends_the_read_and_only_a_possible_gap_is_loss(
    clock, new_stream
) -> None:
    """Issue 31 (simulation seed 20147): a day after a split, Kinesis no longer has the
    parent, and GetShardIterator answers ResourceNotFoundException. That failed every
    read of it, for ever; now the read ends as at the end of a closed shard, and the gap
    rules of its start decide whether records may have expired unread."""
    client = kinesis_client(clock.url, timeout_s=10)
    stream = new_stream(client)
    put(client, stream, entries(3))
    reader = _reader(client, stream)
    first = _read(reader, StartPosition.trim_horizon(), max_records=10)
    last, tip_ms = _outcome(reader).last_sequence_number, _outcome(reader).tip_ms
    assert last is not None and tip_ms is not None
    client.split_shard(StreamName=stream, ShardToSplit=SHARD, NewStartingHashKey=str(2**127))
    ensure_stream(client, stream, 1)
    clock.advance(25 * _HOUR_S)
    # The proxy answers for a shard it knows expired, from a listing (as the planner does).
    assert SHARD not in {s.shard_id for s in list_shards(client, stream)}

    def read_gone(start: StartPosition, **kwargs) -> ReadOutcome:
        assert _read(reader, start, max_records=10, retention_ms=_RETENTION_MS, **kwargs) == []
        outcome = _outcome(reader)
        assert outcome.shard_ended and outcome.stopped_by == "shard_gone"
        return outcome

    # Read to the tip before the trim horizon: records may have arrived before the close.
    possible = read_gone(StartPosition.after(last), quiet_since_ms=tip_ms).data_loss
    assert possible is not None and "no longer in the stream" in possible
    # Read to the tip after it (so after the close): nothing can have been missed.
    server_now_ms = int(clock.now() * 1000)
    assert read_gone(StartPosition.after(last), quiet_since_ms=server_now_ms).data_loss is None
    # A first read from the trim horizon finds what is retained: nothing, and no gap.
    assert read_gone(StartPosition.trim_horizon()).data_loss is None
    # A replay of a range read and never committed: retention took all of it.
    replayed = read_gone(
        StartPosition.trim_horizon(), end_sequence_number=last, pinned_records=len(first)
    )
    assert "all 3 of its records" in (replayed.data_loss or "")


@pytest.mark.parametrize(
    ("first_record", "says"),
    [("49", "arrived after that read and before record 49 may"), (None, "now) may")],
)
def test_a_possible_loss_after_an_old_read_to_the_tip_reads_as_one_sentence(
    first_record: str | None, says: str
) -> None:
    """The operator acts on this message: it names the read, the start and what was
    seen (it once read 'after that read and and the shard holds none now')."""
    cursor = ReadCursor(StartPosition.trim_horizon(), quiet_since_ms=1_000, retention_ms=2_000)
    if first_record is None:
        cursor.nothing_after(server_ms=9_000)
    else:
        assert not cursor.skip(first_record, server_ms=9_000)
    assert cursor.data_loss is not None
    assert "at 1000 ms (server time)" in cursor.data_loss and says in cursor.data_loss
    assert "and and" not in cursor.data_loss
