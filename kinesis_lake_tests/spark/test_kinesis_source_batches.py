"""Micro-batches are bounded by the source's per-shard limit and by Spark's read limit, in
records and in bytes."""

from __future__ import annotations

from collections import Counter

from kinesis_lake_tests.spark.source_helpers import (
    keyed_events,
    new_stream,
    payloads,
    progress_records,
    put,
    run_source,
    source_options,
)


def test_per_shard_and_per_batch_limits_bound_every_batch_and_lose_nothing(
    spark, kinesalite_endpoint, tmp_path
):
    """The first run also caps bytes (Spark's ReadMaxBytes on 4.2+, the reader's own
    default on 4.0/4.1): 200 per batch, split over the shards read. Records are 17 bytes
    (data plus partition key), but one is 257: it is read alone, and no read of several
    records passes its share of the 200."""
    url = kinesalite_endpoint.url
    stream = new_stream(url, shards=2)
    events = keyed_events("x", keys=6, per_key=4)
    big = events[6][1] + b"-" * 240  # key-0's second event: its shard has more after it
    events[6] = (events[6][0], big)
    put(url, stream, events)
    expected = sorted(d.decode() for _, d in events)

    per_shard = run_source(
        spark,
        source_options(
            url, stream, tmp_path / "m1", maxRecordsPerShard="5", maxBytesPerBatch="200"
        ),
        tmp_path / "c1",
    )
    assert sorted(payloads(per_shard)) == expected
    per_batch_and_shard = Counter((r["batch_id"], r["shard_id"]) for r in per_shard)
    assert max(per_batch_and_shard.values()) == 5
    _assert_each_shard_continues_where_the_last_batch_stopped(per_shard)
    (big_row,) = [r for r in per_shard if bytes(r["data"]) == big]
    assert per_batch_and_shard[(big_row["batch_id"], big_row["shard_id"])] == 1
    read_bytes: Counter = Counter()
    for r in per_shard:
        if per_batch_and_shard[(r["batch_id"], r["shard_id"])] > 1:
            read_bytes[r["batch_id"]] += len(r["data"]) + len(r["partition_key"].encode())
    assert 0 < max(read_bytes.values()) <= 200

    per_batch = run_source(
        spark,
        source_options(url, stream, tmp_path / "m2", maxRecordsPerBatch="7"),
        tmp_path / "c2",
    )
    assert sorted(payloads(per_batch)) == expected
    sizes = Counter(r["batch_id"] for r in per_batch)
    assert max(sizes.values()) == 7, "ReadMaxRows(7) is split over both shards, 7 in all"
    assert len(sizes) >= 4  # 24 records, at most 7 per batch
    _assert_each_shard_continues_where_the_last_batch_stopped(per_batch)


def _assert_each_shard_continues_where_the_last_batch_stopped(rows: list[dict]) -> None:
    for shard_id in {r["shard_id"] for r in rows}:
        in_shard = [r for r in rows if r["shard_id"] == shard_id]
        by_batch = sorted(in_shard, key=lambda r: (r["batch_id"], int(r["sequence_number"])))
        by_sequence = sorted(in_shard, key=lambda r: int(r["sequence_number"]))
        assert by_batch == by_sequence


def test_a_quiet_shard_costs_one_get_records_call_a_batch(spark, kinesalite_endpoint, tmp_path):
    """A shard with nothing after its last read record is read from that record, and the
    page holding only it is the tip of a shard planned open: one GetRecords call, not a
    second one at the shard's pace 200 ms later (each spent from the shard's 5 calls/s,
    which every reader of the stream shares)."""
    url = kinesalite_endpoint.url
    stream = new_stream(url, shards=2)
    put(url, stream, keyed_events("a", keys=6, per_key=2))
    options = source_options(url, stream, tmp_path / "m")
    first = run_source(spark, options, tmp_path / "c")
    busy = first[0]["shard_id"]
    quiet = {r["shard_id"] for r in first} - {busy}
    assert len(quiet) == 1, "both shards hold records"
    put(url, stream, [(r["partition_key"], b"more") for r in first if r["shard_id"] == busy])
    before = {(p["epoch"], p["shard_id"]) for p in progress_records(tmp_path / "m")}

    second = run_source(spark, options, tmp_path / "c")

    assert {r["shard_id"] for r in second} == {busy}
    later = [
        p
        for p in progress_records(tmp_path / "m")
        if (p["epoch"], p["shard_id"]) not in before and p["shard_id"] in quiet
    ]
    assert later, "the second run read the quiet shard"
    assert all(p["records_read"] == 0 and p["caught_up"] for p in later)
    assert [p["calls"] for p in later] == [1] * len(later)
