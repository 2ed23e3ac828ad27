"""Builders for raw Kinesis tables, schemas and events shared by the events tests."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

from kinesis_lake.events.declaration_file import load_declaration
from kinesis_lake.events.schema import EventField, EventSchema

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"
ARRIVAL = datetime(2024, 5, 1, 12, 30, 15, tzinfo=UTC)
NOW = datetime(2024, 5, 2, tzinfo=UTC)

ALL_TYPES = EventSchema.from_dict(
    {
        "name": "all_types",
        "fields": [
            {"name": "s", "type": "string"},
            {"name": "l", "type": "long"},
            {"name": "i", "type": "int"},
            {"name": "d", "type": "double"},
            {"name": "f", "type": "float"},
            {"name": "b", "type": "boolean"},
            {"name": "t", "type": "timestamp"},
            {"name": "dt", "type": "date"},
            {"name": "m", "type": "decimal(10,2)"},
        ],
    }
)

GOOD = {
    "event_id": "e1",
    "event_type": "click",
    "user_id": "u1",
    "amount": 12.5,
    "event_time": "2024-05-01T10:00:00Z",
    "key1": "a",
    "key2": "b",
    "key3": "c",
}
"""A valid event of the demo schema (schemas/events.yaml)."""


def json_payload(value: Any) -> bytes:
    """``value`` as a JSON record's payload."""
    return json.dumps(value).encode()


def event_fields(listed: list[dict[str, Any]]) -> tuple[EventField, ...]:
    """The fields a declaration's ``fields:`` list declares, to compare derived ones with."""
    return tuple(EventField.from_dict(field, f"fields[{i}]") for i, field in enumerate(listed))


def load_event_schema(path: Path) -> EventSchema:
    """The schema of a one-table declaration file."""
    (table,) = load_declaration(path).tables
    return table.schema


def demo_schema() -> EventSchema:
    return load_event_schema(SCHEMAS / "events.yaml")


def seed_schema() -> EventSchema:
    return load_event_schema(SCHEMAS / "seed_article.yaml")


def raw_table(
    payloads: Sequence[bytes | None],
    *,
    source_errors: Sequence[str | None] | None = None,
    shard_ids: Sequence[str] | None = None,
    sequence_numbers: Sequence[str] | None = None,
    sub_sequence_numbers: Sequence[int] | None = None,
    arrivals: Sequence[datetime | None] | None = None,
) -> pa.Table:
    """A raw table in the shape the Kinesis reader writes; row i has sequence number i+1."""
    size = len(payloads)
    return pa.table(
        {
            "stream_name": pa.array(["events"] * size, pa.string()),
            "shard_id": pa.array(shard_ids or ["shardId-000000000000"] * size, pa.string()),
            "sequence_number": pa.array(
                sequence_numbers or [str(row + 1) for row in range(size)], pa.string()
            ),
            "sub_sequence_number": pa.array(sub_sequence_numbers or [0] * size, pa.int64()),
            "approximate_arrival_timestamp": pa.array(
                arrivals or [ARRIVAL] * size, pa.timestamp("us", tz="UTC")
            ),
            "data": pa.array(payloads, pa.binary()),
            "source_error": pa.array(source_errors or [None] * size, pa.string()),
        }
    )
