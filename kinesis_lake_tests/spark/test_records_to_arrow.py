"""records_to_arrow: one record the source cannot represent never fails the batch.

Issue 15, defect 2: a user record whose partition key was not UTF-8 made Arrow raise,
which failed the micro-batch on every retry and held back every shard. Each field that
could fail conversion is tried here, alongside valid records.
"""

from __future__ import annotations

import pytest

from kinesis_lake.kinesis.records import KinesisRecord
from kinesis_lake.record_rows import RECORD_ARROW_SCHEMA
from kinesis_lake.spark.kinesis.arrow import records_to_arrow


def _record(sequence: str, **fields: object) -> KinesisRecord:
    values = {
        "sequence_number": sequence,
        "sub_sequence_number": 0,
        "partition_key": "key",
        "arrival_ms": 1_700_000_000_000,
        "data": b"payload",
        "aggregated": False,
        "error": None,
    }
    values.update(fields)
    return KinesisRecord(**values)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("poison", "stored", "reason"),
    [
        ({"partition_key": b"\xff\xfe"}, {"partition_key": "\\xff\\xfe"}, "partition_key"),
        ({"partition_key": "a\udcff"}, {"partition_key": "a\\udcff"}, "partition_key"),
        ({"arrival_ms": 10**20}, {"approximate_arrival_timestamp": None}, "arrival"),
        ({"arrival_ms": -(10**20)}, {"approximate_arrival_timestamp": None}, "arrival"),
        ({"sub_sequence_number": 2**70}, {"sub_sequence_number": 0}, "sub_sequence_number"),
        ({"data": None}, {"data": b""}, "data"),
        ({"data": bytearray(b"\x00raw")}, {"data": b"\x00raw"}, None),
        ({"error": "bad \udcff aggregate"}, {}, "bad \\udcff aggregate"),
    ],
)
def test_a_record_that_cannot_be_converted_is_flagged_and_its_neighbours_kept(
    poison: dict, stored: dict, reason: str | None
) -> None:
    records = [_record("1"), _record("2", **poison), _record("3")]

    batch = records_to_arrow("stream", "shardId-000000000007", records)

    assert batch.schema == RECORD_ARROW_SCHEMA
    rows = batch.to_pylist()
    assert [r["sequence_number"] for r in rows] == ["1", "2", "3"]
    for row in (rows[0], rows[2]):
        assert (row["partition_key"], row["data"], row["source_error"]) == ("key", b"payload", None)
    bad = rows[1]
    for column, value in stored.items():
        if column == "approximate_arrival_timestamp":
            assert bad[column].timestamp() == 0
        else:
            assert bad[column] == value
    if reason is None:
        assert bad["source_error"] is None, "a representable record is not flagged"
        return
    assert reason in bad["source_error"]
    assert "shardId-000000000007" in bad["source_error"] and "2" in bad["source_error"]
    for column in ("stream_name", "shard_id", "sequence_number", "partition_key", "data"):
        assert batch.column(column).null_count == 0


def test_valid_records_are_converted_unchanged() -> None:
    records = [_record(str(i), sub_sequence_number=i, aggregated=True) for i in range(3)]
    rows = records_to_arrow("s", "shard", records).to_pylist()
    assert [(r["sub_sequence_number"], r["aggregated"], r["source_error"]) for r in rows] == [
        (0, True, None),
        (1, True, None),
        (2, True, None),
    ]
    assert all(r["approximate_arrival_timestamp"].timestamp() == 1_700_000_000 for r in rows)
