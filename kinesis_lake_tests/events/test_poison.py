"""Poison records (issue 15): each is quarantined with a reason in the record's terms, none
raises, and no value is silently stored with a different meaning."""

from __future__ import annotations

from typing import Any

import pytest

from kinesis_lake.events.parse import parse_events
from kinesis_lake.events.schema import EventSchema
from kinesis_lake_tests.events.raw import NOW, demo_schema, json_payload, raw_table

GOOD = {"event_id": "e1", "event_type": "click", "event_time": "2024-05-01T10:00:00Z"}


def _outcome(payload: bytes) -> tuple[str, str | None]:
    parsed, quarantine = parse_events(raw_table([payload]), demo_schema(), now=NOW)
    assert parsed.num_rows == 0, f"parsed: {parsed.to_pylist()}"
    (row,) = quarantine.to_pylist()
    assert row["payload"] == payload
    return row["error"], row["error_field"]


@pytest.mark.parametrize("depth", range(900, 1001, 4))
def test_a_deeply_nested_declared_value_is_quarantined_at_any_depth(depth: int) -> None:
    """Issue 15 defect 3: the message renderer recursed (json.dumps) where the decoder had
    not: some depths decoded fine and then raised RecursionError while being reported."""
    nested = b"[" * depth + b"]" * depth
    payload = json_payload(GOOD)[:-1] + b', "user_id": ' + nested + b"}"
    parsed, quarantine = parse_events(raw_table([payload]), demo_schema(), now=NOW)
    assert parsed.num_rows == 0
    (error,) = quarantine.column("error").to_pylist()
    assert error.startswith(("field 'user_id': expected string, got array [[[[", "invalid JSON"))
    assert len(error) < 200


def test_epoch_seconds_are_refused_as_ambiguous_not_read_as_milliseconds() -> None:
    """Issue 15 defect 4: 1714557600 (2024-05-01 in seconds) was stored as 1970-01-20."""
    error, field = _outcome(json_payload({**GOOD, "event_time": 1714557600}))
    assert field == "event_time"
    assert error == (
        "field 'event_time': number 1714557600 is an ambiguous time: numbers are read as epoch "
        "milliseconds and any below 100,000,000,000 (1973-03-03) look like epoch seconds; "
        "send milliseconds or an ISO-8601 string"
    )


@pytest.mark.parametrize(
    "moment", ["9999-12-31T00:00:00Z", "9999-12-31T23:59:30Z", 253402214400000]
)
def test_the_last_day_of_year_9999_is_refused(moment: Any) -> None:
    """Issue 15 defect 1: derive bounds days and minutes by their end, which does not exist."""
    error, field = _outcome(json_payload({**GOOD, "event_time": moment}))
    assert field == "event_time"
    assert "is not between 0001-01-01 and 9999-12-30 in UTC" in error


def test_9999_12_30_is_still_accepted() -> None:
    payload = json_payload({**GOOD, "event_time": "9999-12-30T23:59:59.999999Z"})
    parsed, quarantine = parse_events(raw_table([payload]), demo_schema(), now=NOW)
    assert (parsed.num_rows, quarantine.num_rows) == (1, 0)


def test_a_duplicate_json_key_is_quarantined_naming_the_key() -> None:
    """Issue 15 defect 6: the last value used to win silently."""
    payload = json_payload(GOOD)[:-1] + b', "event_id": "b"}'
    assert _outcome(payload) == (
        'duplicate JSON key "event_id" in one object: which value is meant is ambiguous; '
        "send each key once",
        "event_id",
    )


def test_a_duplicate_key_in_a_nested_object_is_quarantined_too() -> None:
    payload = json_payload(GOOD)[:-1] + b', "extra": {"k": 1, "k": 2}}'
    error, field = _outcome(payload)
    assert error.startswith('duplicate JSON key "k"') and field is None


MESSAGES = {
    "byte order mark": (
        b"\xef\xbb\xbf" + json_payload(GOOD),
        "payload starts with a UTF-8 byte order mark (EF BB BF); "
        "send JSON without a byte order mark",
        None,
    ),
    "empty payload": (b"", "record payload is empty (0 bytes); expected a JSON object", None),
    "digits as a timestamp string": (
        json_payload({**GOOD, "event_time": "1714557600000"}),
        "field 'event_time': unparseable timestamp \"1714557600000\": a string of digits is not "
        "a timestamp; send epoch milliseconds as a JSON number, or an ISO-8601 string with an "
        "offset",
        "event_time",
    ),
    "number beyond double": (
        json_payload(GOOD)[:-1] + b', "amount": -1e400}',
        "field 'amount': value -1e400 out of range for double",
        "amount",
    ),
    "epoch beyond double": (
        b'{"event_id": "e", "event_type": "t", "event_time": 1e400}',
        "field 'event_time': epoch milliseconds 1e400 out of range",
        "event_time",
    ),
    "integer too long to decode": (
        json_payload(GOOD)[:-1] + b', "amount": ' + b"1" + b"0" * 5000 + b"}",
        "invalid JSON: an integer has 5001 digits, more than the 4300 accepted",
        None,
    ),
    "empty event key": (
        json_payload({**GOOD, "event_id": ""}),
        "field 'event_id': empty string is not an event key; send a non-empty one",
        "event_id",
    ),
}


@pytest.mark.parametrize(("payload", "error", "field"), MESSAGES.values(), ids=MESSAGES.keys())
def test_reasons_say_what_is_wrong_in_the_record_terms(
    payload: bytes, error: str, field: str | None
) -> None:
    """Issue 15 defect 7."""
    assert _outcome(payload) == (error, field)


DECIMAL_SCHEMA = EventSchema.from_dict(
    {"name": "with_decimal", "fields": [{"name": "m", "type": "decimal(10,2)"}]}
)


@pytest.mark.parametrize("field", ["m", "undeclared"])
def test_an_exponent_beyond_decimal_range_is_quarantined_not_raised(field: str) -> None:
    """Found by the atheris parser target: with a decimal field declared, fractions decode
    as Decimal, whose constructor raises InvalidOperation (not ValueError) for an exponent
    past its limits, and one record stopped the whole parse, declared field or not."""
    payload = b'{"m": 1.5, "' + field.encode() + b'": 1e1000000000000000000}'
    if field == "m":
        payload = b'{"m": 1e1000000000000000000}'
    parsed, quarantine = parse_events(raw_table([payload]), DECIMAL_SCHEMA, now=NOW)
    assert parsed.num_rows == 0
    (row,) = quarantine.to_pylist()
    assert row["payload"] == payload
    assert "exponent" in row["error"] and "1e1000000000000000000" in row["error"]
