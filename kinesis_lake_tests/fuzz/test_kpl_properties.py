"""Property tests: hostile KPL records through the real source conversion.

Every Kinesis record goes through the KPL decoder (``user_records``) and then Arrow
(``records_to_arrow``) exactly as the Spark source does. Whatever the records hold
(binary or long partition keys, corrupt aggregates, many sub-records, arbitrary bytes),
nothing raises and every user record comes out exactly once: valid, or flagged in
``source_error`` with its data byte for byte.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kinesis_lake.kinesis.kpl import KPL_MAGIC, user_records
from kinesis_lake.spark.kinesis.arrow import records_to_arrow
from kinesis_lake_tests.kinesis.helpers import protobuf_field, varint

SHARD = "shardId-000000000003"
KEYS = (
    st.binary(max_size=8)
    | st.binary(min_size=200, max_size=600)
    | st.text(max_size=300).map(lambda t: t.encode("utf-8", "surrogatepass"))
)
USERS = st.lists(st.tuples(KEYS, st.binary(max_size=64)), min_size=1, max_size=30)


@dataclass(frozen=True)
class Sent:
    """One Kinesis record and the user records it must turn into."""

    data: bytes
    users: list[tuple[bytes, bytes]] | None  # None: not a valid aggregate, kept whole


def _encode(users: list[tuple[bytes, bytes]]) -> bytes:
    """The KPL format from its spec; keys are bytes, so they may be anything."""
    keys = list(dict.fromkeys(key for key, _ in users))
    body = b"".join(protobuf_field(1, key) for key in keys)
    for key, data in users:
        record = varint(1 << 3 | 0) + varint(keys.index(key)) + protobuf_field(3, data)
        body += protobuf_field(3, record)
    return body


def _framed(body: bytes) -> bytes:
    return KPL_MAGIC + body + hashlib.md5(body).digest()


@st.composite
def kinesis_records(draw: st.DrawFn) -> Sent:
    kind = draw(st.sampled_from(["plain", "aggregate", "bad_digest", "bad_index", "junk"]))
    if kind == "plain":
        return Sent(draw(st.binary(max_size=200).filter(lambda b: not b.startswith(KPL_MAGIC))), [])
    if kind == "junk":  # magic, then anything: split or flagged, never raised
        return Sent(KPL_MAGIC + draw(st.binary(max_size=200)), None)
    users = draw(USERS)
    if kind == "aggregate":
        return Sent(_framed(_encode(users)), users)
    if kind == "bad_digest":
        framed = _framed(_encode(users))
        return Sent(framed[:-1] + bytes([framed[-1] ^ 0x01]), None)
    body = _encode(users) + protobuf_field(
        3, varint(1 << 3) + varint(len(users) + 5) + protobuf_field(3, b"x")
    )
    return Sent(_framed(body), None)


def _expected_key(key: bytes) -> tuple[str, bool]:
    """(stored partition key, flagged) for a key table entry."""
    try:
        return key.decode("utf-8"), False
    except UnicodeDecodeError:
        return key.decode("utf-8", "backslashreplace"), True


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(kinesis_records(), min_size=1, max_size=12))
def test_every_user_record_comes_out_once_valid_or_flagged(sent: list[Sent]) -> None:
    records = []
    for position, item in enumerate(sent):
        records += user_records(str(1000 + position), "outer", 1_700_000_000_000, item.data)

    rows = records_to_arrow("stream", SHARD, records).to_pylist()

    assert len(rows) == len(records)
    by_record: dict[str, list[dict]] = {}
    for row in rows:
        assert row["shard_id"] == SHARD and row["partition_key"] is not None
        by_record.setdefault(row["sequence_number"], []).append(row)
    assert sorted(by_record, key=int) == [str(1000 + i) for i in range(len(sent))]
    for position, item in enumerate(sent):
        group = by_record[str(1000 + position)]
        assert [r["sub_sequence_number"] for r in group] == list(range(len(group)))
        if item.users == []:  # plain record
            (row,) = group
            assert row["data"] == item.data and row["source_error"] is None
        elif item.users is None:  # corrupt: whole and flagged, or (junk) split cleanly
            if len(group) == 1 and not group[0]["aggregated"]:
                assert group[0]["data"] == item.data and group[0]["source_error"]
            else:
                assert all(r["aggregated"] for r in group)
        else:
            assert [r["data"] for r in group] == [data for _, data in item.users]
            for row, (key, _) in zip(group, item.users, strict=True):
                stored, flagged = _expected_key(key)
                assert row["partition_key"] == stored
                assert (row["source_error"] is not None) == flagged
                if flagged:
                    assert str(1000 + position) in row["source_error"]


@settings(max_examples=10, deadline=None)
@given(st.integers(min_value=500, max_value=3000), st.text(min_size=1, max_size=4))
def test_many_sub_records_in_one_aggregate(count: int, text: str) -> None:
    """Every 7th user record's key is made invalid UTF-8: exactly those are flagged."""
    key = text.encode("utf-8")
    users = [(key if i % 7 else b"\xff" + key, i.to_bytes(2, "big")) for i in range(count)]
    records = user_records("5", "o", 0, _framed(_encode(users)))
    rows = records_to_arrow("s", SHARD, records).to_pylist()
    assert [r["data"] for r in rows] == [data for _, data in users]
    assert sum(r["source_error"] is not None for r in rows) == len(range(0, count, 7))
