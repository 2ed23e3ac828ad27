"""KPL-aggregated records through the source: split, flagged when corrupt, never cut.

The aggregates are built with aws_kinesis_agg's ``RecordAggregator`` directly: the
producer side of that library, independent of the splitting code under test.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict

from kinesis_lake.kinesis.kpl import KPL_MAGIC
from kinesis_lake_tests.spark.source_helpers import (
    new_stream,
    put,
    run_source,
    source_options,
)


def _aggregate(users: list[tuple[str, bytes]]) -> tuple[str, bytes]:
    # Imported here, after kinesis_lake.kinesis.kpl, which imports the package without
    # letting it prepend its own folder to sys.path for the rest of the session.
    from aws_kinesis_agg.aggregator import RecordAggregator

    aggregator = RecordAggregator()
    for key, data in users:
        assert aggregator.add_user_record(key, data) is None, "small records never fill it"
    partition_key, _, data = aggregator.clear_and_get().get_contents()
    return partition_key, bytes(data)


def _users(name: str, count: int) -> list[tuple[str, bytes]]:
    return [(f"user-{name}-{i}", f"{name}{i}".encode()) for i in range(count)]


def test_aggregates_are_split_whole_into_one_batch_and_corrupt_ones_kept_and_flagged(
    spark, kinesalite_endpoint, tmp_path
):
    """``maxRecordsPerBatch=2`` asks for 2 rows per batch, a limit that falls inside every
    aggregate (3 to 5 user records). Limits count Kinesis records, so each batch holds
    two whole Kinesis records: an aggregate is never split across batches, and a batch
    replayed after a crash never starts in the middle of one."""
    aggregates = {name: _users(name, count) for name, count in (("a", 4), ("b", 5), ("c", 3))}
    packed = {name: _aggregate(users) for name, users in aggregates.items()}
    _, valid = packed["a"]
    bad_digest = valid[:-1] + bytes([valid[-1] ^ 0xFF])
    garbage = b"\xff\xff\xff"
    bad_protobuf = KPL_MAGIC + garbage + hashlib.md5(garbage).digest()
    entries = [
        ("plain", b"plain-first"),
        packed["a"],
        ("broken-1", bad_digest),
        packed["b"],
        ("broken-2", bad_protobuf),
        packed["c"],
        ("plain", b"plain-last"),
    ]
    url = kinesalite_endpoint.url
    stream = new_stream(url, shards=1)
    put(url, stream, entries)

    rows = run_source(
        spark,
        source_options(url, stream, tmp_path / "meta", maxRecordsPerBatch="2"),
        tmp_path / "checkpoint",
    )

    by_record: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        by_record[row["sequence_number"]].append(row)
    in_order = [by_record[seq] for seq in sorted(by_record, key=int)]
    assert len(in_order) == len(entries)
    for group in in_order:
        assert len({r["batch_id"] for r in group}) == 1, "one Kinesis record, one batch"
    batches = defaultdict(set)
    for row in rows:
        batches[row["batch_id"]].add(row["sequence_number"])
    assert max(len(records) for records in batches.values()) == 2

    plain_first, agg_a, broken_1, agg_b, broken_2, agg_c, plain_last = in_order
    for group, name in ((agg_a, "a"), (agg_b, "b"), (agg_c, "c")):
        ordered = sorted(group, key=lambda r: r["sub_sequence_number"])
        assert [r["sub_sequence_number"] for r in ordered] == list(range(len(aggregates[name])))
        assert [(r["partition_key"], bytes(r["data"])) for r in ordered] == aggregates[name]
        assert all(r["aggregated"] and r["source_error"] is None for r in ordered)
    for group, original, reason in (
        (broken_1, bad_digest, "MD5 digest"),
        (broken_2, bad_protobuf, "protobuf"),
    ):
        (row,) = group
        assert bytes(row["data"]) == original, "kept whole, byte for byte"
        assert not row["aggregated"] and row["sub_sequence_number"] == 0
        assert "corrupt KPL aggregate" in row["source_error"] and reason in row["source_error"]
    for group, data in ((plain_first, b"plain-first"), (plain_last, b"plain-last")):
        (row,) = group
        assert bytes(row["data"]) == data and not row["aggregated"] and not row["source_error"]
