"""An Avro schema of every type a table declared from a schema maps, and records of it,
shared by the payload tests, the fuzz target of the payload decoders and the Iceberg Java
interop test."""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

MAPPED = {
    "type": "record",
    "name": "Mapped",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "seen", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {
            "name": "price",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
        },
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["VIEW", "BUY"]}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "counts", "type": {"type": "map", "values": "long"}},
        {
            "name": "page",
            "type": {
                "type": "record",
                "name": "Page",
                "fields": [{"name": "url", "type": "string"}, {"name": "ms", "type": "int"}],
            },
        },
        {"name": "ref", "type": ["null", "string"], "default": None},
    ],
}
"""record -> struct, array -> list, map -> map, enum -> string, decimal,
timestamp-millis/micros, date, a nullable union."""


def mapped_record(index: int) -> dict[str, Any]:
    """The ``index``-th record of ``MAPPED`` (0-27), as fastavro writes and reads it."""
    return {
        "id": f"m{index}",
        "at": datetime(2024, 5, 1, 10, index, 0, 123000, tzinfo=UTC),
        "seen": datetime(2024, 5, 1, 10, index, 0, 123456, tzinfo=UTC),
        "day": date(2024, 5, 1 + index),
        "price": Decimal(f"{index}.25"),
        "kind": ("VIEW", "BUY")[index % 2],
        "tags": [f"t{n}" for n in range(index)],
        "counts": {f"k{n}": n for n in range(index % 3)},
        "page": {"url": f"/p/{index}", "ms": index * 10},
        "ref": None if index % 2 else f"r{index}",
    }
