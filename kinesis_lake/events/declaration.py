"""The lake declaration's shape: the validated tables, streams and partitions a lake has.

Plain frozen data, because the driver ships it to the executors that route and parse records
(``to_dict`` / ``from_dict``): what they get must be what the driver validated, so nothing
here reads a file or checks anything. The file's shapes and their checks, with errors that
name the line to edit, are ``declaration_file.py``'s.

The lake's own tables (raw, quarantine, per-minute counts) are named here too: every layer
that opens a table by name takes the name from one place.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kinesis_lake.events.columns import EVENT_TIMESTAMP
from kinesis_lake.events.derived_tables import DerivedTable
from kinesis_lake.events.payload_formats import JSON_FORMAT, PayloadFormat
from kinesis_lake.events.routes import Route
from kinesis_lake.events.schema import EventSchema, EventSchemaError
from kinesis_lake.events.schema_sources import SchemaOrigin

DEFAULT_TABLE = "events"
"""The table a plain event schema declares (the name it has always had)."""

RAW_TABLE = "raw_events"
QUARANTINE_TABLE = "events_quarantine"
AGGREGATE_TABLE = "event_counts_per_minute"
FIXED_TABLES = (RAW_TABLE, QUARANTINE_TABLE, AGGREGATE_TABLE)
"""The lake's own tables around the declared ones; no declared table may take their names."""


class DeclarationError(EventSchemaError):
    """An invalid lake declaration; the message starts with ``file:line``."""


@dataclass(frozen=True)
class PartitionDeclaration:
    """One partition field: a transform of a declared field or of ``event_timestamp``."""

    field: str
    transform: str
    width: int | None = None

    @property
    def name(self) -> str:
        suffix = f"_{self.width}" if self.width is not None else ""
        if self.transform == "identity":
            return self.field
        return f"{self.field}_{self.transform}{suffix}"

    def to_dict(self) -> dict[str, Any]:
        return {"field": self.field, "transform": self.transform, "width": self.width}


DAILY = (PartitionDeclaration(EVENT_TIMESTAMP, "day"),)
"""Days of event time: what the time queries, dedup and the aggregate filter on."""


@dataclass(frozen=True)
class StreamDeclaration:
    """A Kinesis stream of the lake and the raw table it is ingested into."""

    name: str
    raw_table: str
    description: str = ""
    format: PayloadFormat = JSON_FORMAT
    """How its records' payloads decode (``payload_formats.py``)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "raw_table": self.raw_table,
            "description": self.description,
            "format": self.format.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StreamDeclaration:
        return cls(
            data["name"],
            data["raw_table"],
            data["description"],
            PayloadFormat.from_dict(data["format"]),
        )


@dataclass(frozen=True)
class TableDeclaration:
    """One routed table: its events' schema, the records it takes and its layout."""

    schema: EventSchema
    route: Route = field(default_factory=Route)
    partition: tuple[PartitionDeclaration, ...] = DAILY
    description: str = ""
    stream: str | None = None
    """The declared stream whose raw records it takes; None: the lake's only stream."""
    origin: SchemaOrigin | None = None
    """The schema its fields were derived from (``schema_sources.py``); None: listed."""

    @property
    def name(self) -> str:
        return self.schema.name

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able form, shipped to the executors that route and parse."""
        return {
            "schema": self.schema.to_dict(),
            "route": self.route.to_dict(),
            "partition": [p.to_dict() for p in self.partition],
            "description": self.description,
            "stream": self.stream,
            "origin": None if self.origin is None else self.origin.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TableDeclaration:
        origin = data.get("origin")
        return cls(
            schema=EventSchema.from_dict(data["schema"]),
            route=Route.from_dict(data["route"]),
            partition=tuple(PartitionDeclaration(**p) for p in data["partition"]),
            description=data["description"],
            stream=data["stream"],
            origin=None if origin is None else SchemaOrigin(**origin),
        )


@dataclass(frozen=True)
class LakeDeclaration:
    """Every routed table, in declared order, and the table the per-minute counts follow."""

    tables: tuple[TableDeclaration, ...]
    aggregate_source: str
    path: Path | None = None
    streams: tuple[StreamDeclaration, ...] = ()
    """Declared streams; none: the one stream the settings name (KINESIS_STREAM_NAME)."""
    derived: tuple[DerivedTable, ...] = ()
    """Tables computed from the routed ones, in declared order (each reads earlier ones)."""

    def for_stream(self, stream: str | None) -> LakeDeclaration:
        """The tables that take ``stream``'s records (all of them when none is declared)."""
        tables = tuple(t for t in self.tables if t.stream == stream)
        return LakeDeclaration(tables, self.aggregate_source, self.path, self.streams)

    def table(self, name: str) -> TableDeclaration:
        for table in self.tables:
            if table.name == name:
                return table
        raise KeyError(name)

    @property
    def names(self) -> list[str]:
        return [table.name for table in self.tables]

    def to_dict(self) -> dict[str, Any]:
        return {
            "tables": [table.to_dict() for table in self.tables],
            "aggregate_source": self.aggregate_source,
            "streams": [stream.to_dict() for stream in self.streams],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LakeDeclaration:
        return cls(
            tables=tuple(TableDeclaration.from_dict(t) for t in data["tables"]),
            aggregate_source=data["aggregate_source"],
            streams=tuple(StreamDeclaration.from_dict(s) for s in data["streams"]),
        )
