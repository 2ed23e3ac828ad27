"""parse_events: typed values for good records, a precise reason for every bad one."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from kinesis_lake.events.declaration_file import declaration_from_dict
from kinesis_lake.events.parse import parse_events, route_events
from kinesis_lake.events.schema import EventSchema
from kinesis_lake.events.tables import parsed_arrow_schema, quarantine_arrow_schema
from kinesis_lake_tests.events.raw import (
    ALL_TYPES,
    ARRIVAL,
    GOOD,
    NOW,
    demo_schema,
    json_payload,
    raw_table,
    seed_schema,
)
from kinesis_lake_tests.events.registry import avro_datum

UTC = UTC


def _parse(payloads: list[bytes | None], schema: EventSchema, **raw: Any) -> tuple[pa.Table, ...]:
    parsed, quarantine = parse_events(raw_table(payloads, **raw), schema, now=NOW)
    assert parsed.schema == parsed_arrow_schema(schema)
    assert quarantine.schema == quarantine_arrow_schema()
    assert parsed.num_rows + quarantine.num_rows == len(payloads)
    return parsed, quarantine


def _reason(
    payload: bytes | None, schema: EventSchema | None = None, **raw: Any
) -> tuple[str, Any]:
    parsed, quarantine = _parse([payload], schema or demo_schema(), **raw)
    assert parsed.num_rows == 0
    row = quarantine.to_pylist()[0]
    return row["error"], row["error_field"]


def test_valid_event_becomes_typed_row_and_unknown_keys_are_ignored() -> None:
    payload = {**GOOD, "unknown": {"nested": [1, 2]}, "also_unknown": None}
    parsed, quarantine = _parse([json_payload(payload)], demo_schema())
    assert quarantine.num_rows == 0
    assert parsed.to_pylist() == [
        {
            "stream_name": "events",
            "shard_id": "shardId-000000000000",
            "sequence_number": "1",
            "sub_sequence_number": 0,
            "approximate_arrival_timestamp": ARRIVAL,
            "event_id": "e1",
            "event_type": "click",
            "user_id": "u1",
            "amount": 12.5,
            "event_time": datetime(2024, 5, 1, 10, tzinfo=UTC),
            "key1": "a",
            "key2": "b",
            "key3": "c",
            "event_timestamp": datetime(2024, 5, 1, 10, tzinfo=UTC),
            "parsed_at": NOW,
        }
    ]


def test_optional_fields_may_be_missing_or_null_and_ints_fill_doubles() -> None:
    payload = {**GOOD, "user_id": None, "amount": 7}
    del payload["key1"]
    (row,) = _parse([json_payload(payload)], demo_schema())[0].to_pylist()
    assert (row["user_id"], row["key1"], row["amount"]) == (None, None, 7.0)


TEN_UTC = datetime(2024, 5, 1, 10, tzinfo=UTC)
TIMESTAMPS = {
    "Z": ("2024-05-01T10:00:00Z", TEN_UTC),
    "positive offset": ("2024-05-01T12:00:00+02:00", TEN_UTC),
    "negative half-hour offset": ("2024-05-01T05:30:00.5-04:30", TEN_UTC + timedelta(seconds=0.5)),
    "space separator": ("2024-05-01 10:00:00+00:00", TEN_UTC),
    "nanoseconds truncated": (
        "2024-05-01T10:00:00.123456789Z",
        TEN_UTC + timedelta(microseconds=123456),
    ),
    "epoch milliseconds": (1714557600000, TEN_UTC),
    "fractional epoch milliseconds": (1714557600000.25, TEN_UTC + timedelta(microseconds=250)),
    "before the epoch": (-(10**12), datetime(1938, 4, 24, 22, 13, 20, tzinfo=UTC)),
}


@pytest.mark.parametrize(("value", "expected"), TIMESTAMPS.values(), ids=TIMESTAMPS.keys())
def test_timestamps_become_utc_microseconds(value: Any, expected: datetime) -> None:
    (row,) = _parse([json_payload({**GOOD, "event_time": value})], demo_schema())[0].to_pylist()
    assert row["event_time"] == expected
    assert row["event_timestamp"] == expected


def test_every_type_converts() -> None:
    payloads = [
        {
            "s": "x",
            "l": 2**62,
            "i": -(2**31),
            "d": 3,
            "f": 1.5,
            "b": False,
            "t": "2024-05-01T10:00:00Z",
            "dt": "2024-02-29",
            "m": "12.30",
        },
        {"d": 0.1, "l": 2**63 - 1, "i": 2**31 - 1, "m": 12.3},
        {"d": 2**60 + 1, "m": -5},
        {},
    ]
    parsed, _ = _parse([json_payload(p) for p in payloads], ALL_TYPES)
    columns = parsed.select([field.name for field in ALL_TYPES.fields]).to_pydict()
    assert columns == {
        "s": ["x", None, None, None],
        "l": [2**62, 2**63 - 1, None, None],
        "i": [-(2**31), 2**31 - 1, None, None],
        "d": [3.0, 0.1, float(2**60), None],
        "f": [1.5, None, None, None],
        "b": [False, None, None, None],
        "t": [TEN_UTC, None, None, None],
        "dt": [date(2024, 2, 29), None, None, None],
        "m": [Decimal("12.30"), Decimal("12.30"), Decimal("-5.00"), None],
    }
    # No event_time_field: the Kinesis arrival time is the event time.
    assert parsed.column("event_timestamp").to_pylist() == [ARRIVAL] * 4


def test_seed_article_parses_by_configuration_alone() -> None:
    parsed, quarantine = _parse([b'{"key1":"a","key2":"b","key3":"c"}'], seed_schema())
    assert quarantine.num_rows == 0
    (row,) = parsed.to_pylist()
    assert (row["key1"], row["key2"], row["key3"]) == ("a", "b", "c")
    assert row["event_timestamp"] == ARRIVAL


DEMO_REASONS = {
    "source error": (
        json_payload(GOOD),
        {"source_errors": ["KPL aggregate MD5 mismatch"]},
        "kinesis source error: KPL aggregate MD5 mismatch",
        None,
    ),
    "null payload": (None, {}, "record has no payload (data is null)", None),
    "invalid UTF-8": (b"\xff{}", {}, "invalid UTF-8 at byte 0: invalid start byte", None),
    "truncated UTF-8": (
        b'{"a": "\xc3"}',
        {},
        "invalid UTF-8 at byte 7: invalid continuation byte",
        None,
    ),
    "UTF-16 is not UTF-8": (
        '{"a": 1}'.encode("utf-16"),
        {},
        "invalid UTF-8 at byte 0: invalid start byte",
        None,
    ),
    "empty payload": (b"", {}, "record payload is empty (0 bytes); expected a JSON object", None),
    "invalid JSON": (
        b'{"event_id" "e1"}',
        {},
        "invalid JSON: Expecting ':' delimiter: line 1 column 13 (char 12)",
        None,
    ),
    "trailing data": (b"{} {}", {}, "invalid JSON: Extra data: line 1 column 4 (char 3)", None),
    "NaN": (b'{"amount": NaN}', {}, "invalid JSON: NaN is not valid JSON", None),
    "Infinity": (b'{"amount": -Infinity}', {}, "invalid JSON: -Infinity is not valid JSON", None),
    "deep nesting": (b"[" * 100_000, {}, "invalid JSON: nested too deeply", None),
    "array": (b"[1, 2]", {}, "JSON payload is an array, expected an object", None),
    "string": (b'"text"', {}, "JSON payload is a string, expected an object", None),
    "integer": (b"42", {}, "JSON payload is an integer, expected an object", None),
    "null": (b"null", {}, "JSON payload is null, expected an object", None),
    "missing required": (
        json_payload({k: v for k, v in GOOD.items() if k != "event_type"}),
        {},
        "missing required field 'event_type'",
        "event_type",
    ),
    "null required": (
        json_payload({**GOOD, "event_time": None}),
        {},
        "required field 'event_time' is null",
        "event_time",
    ),
    "wrong type": (
        json_payload({**GOOD, "event_id": 7}),
        {},
        "field 'event_id': expected string, got integer 7",
        "event_id",
    ),
    "string for double": (
        json_payload({**GOOD, "amount": "12.5"}),
        {},
        "field 'amount': expected double, got string \"12.5\"",
        "amount",
    ),
    "boolean for double": (
        json_payload({**GOOD, "amount": True}),
        {},
        "field 'amount': expected double, got boolean true",
        "amount",
    ),
    "double overflow": (
        b'{"event_id": "e", "event_type": "t", "amount": 1e999}',
        {},
        "field 'amount': value 1e999 out of range for double",
        "amount",
    ),
    "long value excerpt": (
        json_payload({**GOOD, "user_id": ["x" * 100]}),
        {},
        "field 'user_id': expected string, got array [\"" + "x" * 55 + "...",
        "user_id",
    ),
    "lone surrogate": (
        b'{"event_id": "\\ud800"}',
        {},
        "field 'event_id': string \"\\ud800\" is not valid Unicode (lone surrogate)",
        "event_id",
    ),
    "unparseable timestamp": (
        json_payload({**GOOD, "event_time": "2024-13-01T00:00:00Z"}),
        {},
        "field 'event_time': unparseable timestamp \"2024-13-01T00:00:00Z\": "
        "month must be in 1..12",
        "event_time",
    ),
    "timestamp without offset": (
        json_payload({**GOOD, "event_time": "2024-05-01T10:00:00"}),
        {},
        "field 'event_time': unparseable timestamp \"2024-05-01T10:00:00\": "
        "no UTC offset (append Z or +HH:MM)",
        "event_time",
    ),
    "timestamp beyond year 9999 in UTC": (
        json_payload({**GOOD, "event_time": "9999-12-31T23:59:59-02:00"}),
        {},
        "field 'event_time': timestamp \"9999-12-31T23:59:59-02:00\" is not between 0001-01-01 "
        "and 9999-12-30 in UTC (the last day of 9999 has no day or minute end to window it in)",
        "event_time",
    ),
    "epoch out of range": (
        json_payload({**GOOD, "event_time": 10**20}),
        {},
        "field 'event_time': epoch milliseconds 100000000000000000000 out of range",
        "event_time",
    ),
    "timestamp of wrong type": (
        json_payload({**GOOD, "event_time": {"ms": 1}}),
        {},
        "field 'event_time': expected timestamp, got object {\"ms\": 1}",
        "event_time",
    ),
    "first error wins": (
        json_payload({"event_id": 1, "amount": "x"}),
        {},
        "field 'event_id': expected string, got integer 1",
        "event_id",
    ),
}


@pytest.mark.parametrize(
    ("payload", "raw", "error", "field"), DEMO_REASONS.values(), ids=DEMO_REASONS.keys()
)
def test_quarantine_reasons(payload: bytes | None, raw: dict, error: str, field: str) -> None:
    assert _reason(payload, **raw) == (error, field)


TYPE_REASONS = {
    "fraction for long": (
        {"l": 3.0},
        "field 'l': expected long, got number 3.0 "
        "(integer fields do not accept fractional notation such as 3.0)",
    ),
    "long overflow": ({"l": 2**63}, "field 'l': value 9223372036854775808 out of range for long"),
    "long underflow": (
        {"l": -(2**63) - 1},
        "field 'l': value -9223372036854775809 out of range for long",
    ),
    "int overflow": ({"i": 2**31}, "field 'i': value 2147483648 out of range for int"),
    "float overflow": ({"f": 1e39}, "field 'f': value 1E+39 out of range for float"),
    "integer beyond double": (
        {"d": 10**400},
        "field 'd': value " + ("1" + "0" * 56) + "... out of range for double",
    ),
    "string for boolean": ({"b": "true"}, "field 'b': expected boolean, got string \"true\""),
    "integer for string": ({"s": 1}, "field 's': expected string, got integer 1"),
    "boolean for long": ({"l": True}, "field 'l': expected long, got boolean true"),
    "unparseable date": (
        {"dt": "2024-02-30"},
        "field 'dt': unparseable date \"2024-02-30\": day is out of range for month",
    ),
    "decimal fraction digits": (
        {"m": 1.234},
        "field 'm': value 1.234 has more than 2 fraction digits for decimal(10,2)",
    ),
    "decimal integer digits": (
        {"m": 123456789},
        "field 'm': value 123456789 has more than 8 integer digits for decimal(10,2)",
    ),
    "decimal string not a number": (
        {"m": "abc"},
        "field 'm': value \"abc\" is not a decimal number for decimal(10,2)",
    ),
    "decimal NaN string": (
        {"m": "NaN"},
        "field 'm': value \"NaN\" is not a finite decimal number for decimal(10,2)",
    ),
    "boolean for decimal": ({"m": True}, "field 'm': expected decimal(10,2), got boolean true"),
}


@pytest.mark.parametrize(("payload", "error"), TYPE_REASONS.values(), ids=TYPE_REASONS.keys())
def test_type_quarantine_reasons(payload: dict, error: str) -> None:
    assert _reason(json_payload(payload), ALL_TYPES) == (error, next(iter(payload)))


def test_missing_arrival_time_without_event_time_field_is_quarantined() -> None:
    error = _reason(b'{"key1": "a"}', seed_schema(), arrivals=[None])
    assert error == ("no event time: approximate_arrival_timestamp is null", None)


def test_quarantine_keeps_identity_and_raw_payload_in_input_order() -> None:
    payloads = [b"{", json_payload(GOOD), b"\xff", json_payload({**GOOD, "event_id": "e2"})]
    parsed, quarantine = _parse(
        payloads,
        demo_schema(),
        shard_ids=["s1", "s2", "s3", "s4"],
        sub_sequence_numbers=[0, 1, 2, 3],
    )
    assert parsed.column("event_id").to_pylist() == ["e1", "e2"]
    assert parsed.column("shard_id").to_pylist() == ["s2", "s4"]
    rows = quarantine.to_pylist()
    assert [(r["shard_id"], r["sequence_number"], r["sub_sequence_number"]) for r in rows] == [
        ("s1", "1", 0),
        ("s3", "3", 2),
    ]
    assert [r["payload"] for r in rows] == [b"{", b"\xff"]
    assert {r["quarantined_at"] for r in rows} == {NOW}
    assert {r["approximate_arrival_timestamp"] for r in rows} == {ARRIVAL}


def test_record_batch_and_loosely_typed_raw_columns_are_accepted() -> None:
    table = raw_table([json_payload(GOOD)])
    loose = table.cast(
        pa.schema(
            [
                pa.field("stream_name", pa.large_string()),
                pa.field("shard_id", pa.string()),
                pa.field("sequence_number", pa.string()),
                pa.field("sub_sequence_number", pa.int32()),
                pa.field("approximate_arrival_timestamp", pa.timestamp("ms", tz="UTC")),
                pa.field("data", pa.large_binary()),
                pa.field("source_error", pa.string()),
            ]
        )
    ).append_column("extra_raw_column", pa.array([1]))
    for raw in (loose, loose.to_batches()[0]):
        parsed, quarantine = parse_events(raw, demo_schema(), now=NOW)
        assert (parsed.num_rows, quarantine.num_rows) == (1, 0)
        assert parsed.schema == parsed_arrow_schema(demo_schema())


def test_empty_input_gives_empty_tables() -> None:
    parsed, quarantine = _parse([], demo_schema())
    assert (parsed.num_rows, quarantine.num_rows) == (0, 0)


def test_parse_without_now_stamps_current_time() -> None:
    before = datetime.now(UTC)
    parsed, _ = parse_events(raw_table([json_payload(GOOD)]), demo_schema())
    assert before <= parsed.column("parsed_at")[0].as_py() <= datetime.now(UTC)


def test_wiring_mistakes_raise() -> None:
    with pytest.raises(ValueError, match=r"raw input lacks columns \['source_error'\]"):
        parse_events(raw_table([json_payload(GOOD)]).drop_columns(["source_error"]), demo_schema())
    with pytest.raises(ValueError, match="now must be timezone-aware"):
        parse_events(raw_table([json_payload(GOOD)]), demo_schema(), now=datetime(2024, 1, 1))


def test_an_avro_local_timestamp_is_quarantined_for_its_missing_offset() -> None:
    """An Avro local-timestamp decodes to a naive datetime: its zone is unknown, and the
    reason must say so (not that a number is out of range)."""
    local = {"type": "long", "logicalType": "local-timestamp-millis"}
    schema = {"type": "record", "name": "R", "fields": [{"name": "at", "type": local}]}
    lake = declaration_from_dict(
        {
            "streams": [{"name": "events", "format": "avro", "schema": schema}],
            "tables": [{"name": "t", "fields": [{"name": "at", "type": "timestamp"}]}],
        }
    )
    payload = avro_datum(schema, {"at": datetime(2020, 1, 1)})

    (row,) = route_events(raw_table([payload]), lake, now=NOW).quarantine.to_pylist()

    assert row["error"] == (
        "field 'at': timestamp 2020-01-01 00:00:00: no UTC offset (an Avro local-timestamp "
        "has no zone)"
    )
