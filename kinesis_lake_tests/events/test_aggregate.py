"""aggregate_counts and minute_windows over parsed events."""

from __future__ import annotations

import json
import random
from collections import Counter
from datetime import datetime, timedelta, timezone

import pyarrow as pa

from kinesis_lake.events.parse import aggregate_counts, minute_windows, parse_events
from kinesis_lake.events.tables import aggregate_arrow_schema, parsed_arrow_schema
from kinesis_lake_tests.events.raw import ARRIVAL, NOW, demo_schema, raw_table, seed_schema

UTC = timezone.utc
START = datetime(2024, 5, 1, 10, tzinfo=UTC)


def _event(event_id: str, event_type: str, at: datetime) -> bytes:
    payload = {"event_id": event_id, "event_type": event_type, "event_time": at.isoformat()}
    return json.dumps(payload).encode()


def _parsed(payloads: list[bytes], **raw: object) -> pa.Table:
    parsed, quarantine = parse_events(raw_table(payloads, **raw), demo_schema(), now=NOW)
    assert quarantine.num_rows == 0
    return parsed


def test_counts_per_minute_and_type_sum_to_parsed_rows() -> None:
    rng = random.Random(7)
    events = [
        (
            f"e{n}",
            rng.choice(["click", "view", "buy"]),
            START + timedelta(seconds=rng.randrange(600)),
        )
        for n in range(500)
    ]
    parsed = _parsed([_event(*event) for event in events])
    counts = aggregate_counts(parsed, demo_schema(), now=NOW)
    assert counts.schema == aggregate_arrow_schema()
    expected = Counter(
        (at.replace(second=0, microsecond=0), event_type) for _, event_type, at in events
    )
    rows = counts.to_pylist()
    assert {(r["window_start"], r["event_type"]): r["event_count"] for r in rows} == expected
    assert sum(r["event_count"] for r in rows) == parsed.num_rows
    assert [(r["window_start"], r["event_type"]) for r in rows] == sorted(expected)
    assert {r["updated_at"] for r in rows} == {NOW}


def test_windows_floor_to_the_minute_even_before_the_epoch() -> None:
    parsed = _parsed(
        [
            _event("a", "t", datetime(1969, 12, 31, 23, 59, 30, tzinfo=UTC)),
            _event("b", "t", START + timedelta(seconds=59.999999)),
            _event("c", "t", START),
        ]
    )
    windows = [datetime(1969, 12, 31, 23, 59, tzinfo=UTC), START]
    assert minute_windows(parsed) == windows
    assert all(window.tzinfo is UTC for window in minute_windows(parsed))
    counts = aggregate_counts(parsed, demo_schema(), now=NOW)
    assert counts.column("window_start").to_pylist() == windows
    assert counts.column("event_count").to_pylist() == [1, 2]


def test_without_event_type_everything_counts_under_all_at_arrival_time() -> None:
    parsed, _ = parse_events(raw_table([b'{"key1": "a"}'] * 3), seed_schema(), now=NOW)
    (row,) = aggregate_counts(parsed, seed_schema(), now=NOW).to_pylist()
    assert row == {
        "window_start": ARRIVAL.replace(second=0),
        "event_type": "all",
        "event_count": 3,
        "updated_at": NOW,
    }


def test_empty_input_has_no_windows_and_no_counts() -> None:
    empty = parsed_arrow_schema(demo_schema()).empty_table()
    assert minute_windows(empty) == []
    counts = aggregate_counts(empty, demo_schema())
    assert counts.num_rows == 0
    assert counts.schema == aggregate_arrow_schema()
