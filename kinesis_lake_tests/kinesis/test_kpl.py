"""KPL aggregation: our split against an independent encoder, and corrupt aggregates."""

from __future__ import annotations

import hashlib
import sys

import pytest

from kinesis_lake.kinesis.kpl import KPL_MAGIC, aggregate, user_records
from kinesis_lake_tests.kinesis.helpers import protobuf_field, varint


def _hand_encoded_aggregate(keys: list[str], records: list[tuple[int, bytes]]) -> bytes:
    """The KPL format written from its spec, sharing no code with aws_kinesis_agg."""
    body = b"".join(protobuf_field(1, key.encode()) for key in keys)
    for key_index, data in records:
        record = varint(1 << 3 | 0) + varint(key_index) + protobuf_field(3, data)
        body += protobuf_field(3, record)
    return KPL_MAGIC + body + hashlib.md5(body).digest()


def test_aggregate_splits_into_user_records_with_sub_sequence_numbers() -> None:
    pairs = [("user-1", b"a"), ("user-2", b"bb"), ("user-1", b""), ("user-3", b"\xf3" * 300)]
    records = user_records("123", "user-1", 1000, aggregate(pairs))
    assert [(r.partition_key, r.data) for r in records] == pairs
    assert [r.sub_sequence_number for r in records] == [0, 1, 2, 3]
    assert all(
        r.sequence_number == "123" and r.arrival_ms == 1000 and r.aggregated and r.error is None
        for r in records
    )


def test_independently_encoded_aggregate_splits() -> None:
    data = _hand_encoded_aggregate(["k0", "k1"], [(1, b"x"), (0, b"y"), (1, b"z" * 200)])
    records = user_records("7", "outer-key", 5, data)
    assert [(r.partition_key, r.data, r.sub_sequence_number) for r in records] == [
        ("k1", b"x", 0),
        ("k0", b"y", 1),
        ("k1", b"z" * 200, 2),
    ]


def test_aggregate_matches_the_reference_deaggregator(monkeypatch: pytest.MonkeyPatch) -> None:
    """aws_kinesis_agg's own deaggregator reads what aggregate() writes."""
    monkeypatch.setattr(sys, "path", list(sys.path))  # the module prepends its own folder
    from aws_kinesis_agg.deaggregator import iter_deaggregate_records

    pairs = [("p1", b"one"), ("p2", b"two")]
    raw = {
        "SequenceNumber": "1",
        "PartitionKey": "p1",
        "ApproximateArrivalTimestamp": 0,
        "Data": aggregate(pairs),
    }
    split = list(iter_deaggregate_records([raw], data_format="Boto3"))
    assert [(r["kinesis"]["partitionKey"], r["kinesis"]["data"]) for r in split] == [
        ("p1", b"b25l"),
        ("p2", b"dHdv"),
    ]  # base64 of the payloads: the reference re-encodes like Lambda does


def test_plain_record_is_one_user_record() -> None:
    (record,) = user_records("9", "key", 3, b'{"a":1}')
    assert (record.sub_sequence_number, record.partition_key, record.data) == (0, "key", b'{"a":1}')
    assert not record.aggregated and record.error is None


@pytest.mark.parametrize(
    ("mangle", "reason"),
    [
        (lambda d: d[:-1] + bytes([d[-1] ^ 1]), "MD5"),
        (lambda d: d[:10] + hashlib.md5(d[4:-16][:6]).digest(), "protobuf"),
        (lambda d: KPL_MAGIC + b"\x00" * 8, "too short"),
        (
            lambda d: _hand_encoded_aggregate(["only"], [(3, b"x")]),
            "key table has 1",
        ),
        (lambda d: _hand_encoded_aggregate(["k"], []), "no user records"),
    ],
)
def test_corrupt_aggregate_is_kept_whole_with_the_reason(mangle, reason: str) -> None:
    data = mangle(aggregate([("k", b"payload-1"), ("k", b"payload-2")]))
    (record,) = user_records("55", "outer", 1, data)
    assert record.data == data
    assert record.partition_key == "outer"
    assert (record.sub_sequence_number, record.aggregated) == (0, False)
    assert record.error is not None and reason in record.error and "55" in record.error


def test_aggregate_rejects_what_does_not_fit() -> None:
    with pytest.raises(ValueError, match="1 MiB"):
        aggregate([("k", b"x" * 600_000), ("k", b"y" * 600_000)])
    with pytest.raises(ValueError):
        aggregate([])


def test_non_utf8_partition_key_is_flagged_not_fatal() -> None:
    """Issue 15, defect 2: protobuf hands a key table entry that is not UTF-8 back as
    bytes. The user record keeps its data and place, its key is stored with ``\\x``
    escapes, and ``error`` says what was wrong; its neighbours are untouched."""
    body = protobuf_field(1, b"\xff\xfe") + protobuf_field(1, b"good")
    for key_index, data in ((1, b"first"), (0, b"poisoned"), (1, b"last")):
        body += protobuf_field(3, varint(1 << 3 | 0) + varint(key_index) + protobuf_field(3, data))
    data = KPL_MAGIC + body + hashlib.md5(body).digest()

    first, poisoned, last = user_records("77", "outer", 1, data)

    assert (first.partition_key, first.data, first.error) == ("good", b"first", None)
    assert (last.partition_key, last.data, last.error) == ("good", b"last", None)
    assert poisoned.partition_key == "\\xff\\xfe"
    assert (poisoned.data, poisoned.sub_sequence_number, poisoned.aggregated) == (
        b"poisoned",
        1,
        True,
    )
    assert poisoned.error is not None
    assert "77" in poisoned.error and "not UTF-8" in poisoned.error and "ff fe" in poisoned.error
