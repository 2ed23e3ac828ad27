"""Which registry schema version a Glue Schema Registry stream's records are read as.

The executors decode a registry stream's records with the one registry its ``registry:``
names, and read each registry schema's records as ONE version (a reader's schema): the
version its tables were declared from, so records of older versions come out in that
version's shape, new fields with their defaults.

Invariant: per stream, one registry and one version per registry schema. A table whose
schema comes from another registry, or two tables following two versions of one schema on
one stream, would load and then silently get the wrong records (all quarantined, or one
table the other's shape); so the declaration is refused where the fix is one edit away.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from kinesis_lake.events.declaration import DeclarationError, StreamDeclaration, TableDeclaration
from kinesis_lake.events.payload_formats import GLUE_SCHEMA_REGISTRY
from kinesis_lake.events.schema_sources import AVRO, SchemaOrigin


def refuse_another_registry(ref: object, stream: StreamDeclaration | None) -> None:
    """The executors decode a registry stream's records with the registry its ``registry:``
    names, and know no other: a table's schema from another registry would load, and then
    every record would be quarantined as a version the registry does not have."""
    if stream is None or stream.format.kind != GLUE_SCHEMA_REGISTRY or not isinstance(ref, Mapping):
        return
    for key in ("region", "endpoint_url"):
        ours = getattr(stream.format, key)
        if key in ref and ref[key] != ours:
            raise DeclarationError(
                f"registry_schema: {key} {ref[key]!r} differs from stream {stream.name!r}'s "
                f"registry: {key} {ours!r}, and the stream's records are decoded with its "
                f"registry; set {key} once, in the stream's registry: (not in registry_schema)"
            )


def with_readers(stream: StreamDeclaration, tables: list[TableDeclaration]) -> StreamDeclaration:
    """A registry stream without a reader's schema of its own reads each registry schema its
    tables were declared from as the version they were declared from (so records of older
    versions come out in that version's shape, new fields with their defaults)."""
    readers = {
        origin.schema_arn: {"number": origin.version, "schema": origin.definition}
        for table in tables
        if (origin := _read_as(table, stream)) is not None
    }
    return replace(stream, format=replace(stream.format, readers=readers)) if readers else stream


def _read_as(table: TableDeclaration, stream: StreamDeclaration) -> SchemaOrigin | None:
    """The registry schema version ``stream``'s records of that schema are read as for
    ``table``'s sake (see ``with_readers``), or None when the table sets none."""
    origin = table.origin
    if (
        stream.format.kind != GLUE_SCHEMA_REGISTRY
        or stream.format.schema is not None
        or table.stream != stream.name
        or origin is None
        or not origin.schema_arn
        or origin.data_format != AVRO
    ):
        return None
    return origin


def refuse_two_versions(
    table: TableDeclaration,
    earlier: list[TableDeclaration],
    streams: tuple[StreamDeclaration, ...],
    line: int | None,
) -> None:
    """A stream reads each registry schema's records as one version, so two tables following
    two versions of it would both get one of them: silently the wrong shape for the other."""
    stream = next((s for s in streams if s.name == table.stream), None)
    origin = None if stream is None else _read_as(table, stream)
    if stream is None or origin is None:
        return
    where = f"line {line}: " if line else ""
    for other in earlier:
        theirs = _read_as(other, stream)
        if theirs and theirs.schema_arn == origin.schema_arn and theirs.version != origin.version:
            raise DeclarationError(
                f"{where}table {table.name!r} follows {origin.describe()}, and table "
                f"{other.name!r} follows version {theirs.version} of it, on stream "
                f"{stream.name!r}, whose records of one schema are read as one version; "
                "follow one version in both (the same version:, or latest in both), or read "
                "the tables from streams of their own"
            )
