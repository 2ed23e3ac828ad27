"""The declaration file: hand-edited YAML turned into a validated :class:`LakeDeclaration`.

Two shapes are accepted, so today's schema files keep working unchanged:

* an event schema (``name``, ``fields``, ``event_key``, ...): one table, ``events``, that takes
  every record, as before;
* a lake (``tables:`` list): each entry is an event schema plus ``name`` (the table),
  ``route`` (which records it takes, see ``routes.py``), ``dedup`` (the field to deduplicate
  on, today's ``event_key``) and ``partition`` (Iceberg transforms); ``aggregate`` names the
  table whose events are counted per minute; ``derived`` declares tables computed from the
  declared ones (current state by key, Spark SQL: ``derived_tables.py``).

A stream entry may say what its payloads are (``format:``, with a schema or a registry:
``payload_formats.py``); the default is JSON. A table may name a schema instead of listing
``fields`` (``schema_file:``, with ``message:`` for a .proto, ``registry_schema:``:
``schema_sources.py``); a registry schema is fetched on every load, so the next refresh
follows its latest version (which version a registry stream reads is
``registry_versions.py``'s rule).

Invariant: a declaration this module returns is whole and consistent (every name taken
once, every table on a declared stream, every derived table reading what is declared
before it), so nothing downstream re-checks it. Errors name the file and the line of the
offending entry, because the file is edited by hand and ``dagster definitions validate``
shows them to whoever edited it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from kinesis_lake.events.columns import ARRIVAL_TIMESTAMP, EVENT_TIMESTAMP, RESERVED_COLUMNS
from kinesis_lake.events.declaration import (
    AGGREGATE_TABLE,
    DAILY,
    DEFAULT_TABLE,
    FIXED_TABLES,
    QUARANTINE_TABLE,
    DeclarationError,
    LakeDeclaration,
    PartitionDeclaration,
    StreamDeclaration,
    TableDeclaration,
)
from kinesis_lake.events.derived_tables import DerivedTable, DerivedTableError, parse_derived
from kinesis_lake.events.payload_formats import (
    FORMAT_KEYS,
    JSON_FORMAT,
    PayloadFormatError,
    payload_format,
)
from kinesis_lake.events.registry_versions import (
    refuse_another_registry,
    refuse_two_versions,
    with_readers,
)
from kinesis_lake.events.routes import Route
from kinesis_lake.events.schema import EventSchema, EventSchemaError, check_keys
from kinesis_lake.events.schema_sources import SchemaOrigin, fields_from_file, fields_from_registry

TRANSFORMS = ("identity", "year", "month", "day", "hour", "bucket", "truncate")
_WIDTH_TRANSFORMS = ("bucket", "truncate")
_TIME_TRANSFORMS = ("year", "month", "day", "hour")
_TABLE_NAME = re.compile(r"[a-z_][a-z0-9_]*")
_LAKE_KEYS = ("streams", "tables", "aggregate", "derived")
_STREAM_KEYS = ("name", "raw_table", "description", *FORMAT_KEYS)
_STREAM_NAME = re.compile(r"[a-zA-Z0-9_.-]{1,128}")  # Kinesis's own rule
_TABLE_KEYS = (
    "name",
    "description",
    "stream",
    "route",
    "fields",
    "schema_file",
    "registry_schema",
    "dedup",
    "event_time_field",
    "event_type_field",
    "partition",
    "message",
)
_PARTITION_KEYS = ("field", "transform", "width")
_FIELD_SOURCES = ("fields", "schema_file", "registry_schema")
"""What a table's columns may come from: listed, or derived from a schema it names."""


_SafeLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's parser where PyYAML was built with it (its wheels are): every refresh, check
and fresh read loads the declaration afresh, and the pure-Python parser took 11.5 ms of a
fresh read's 70 ms on the shipped declaration, libyaml 1.7 ms (2026-12-06). A PyYAML built
from source without libyaml has only the pure-Python one."""


class _LineLoader(_SafeLoader):
    """Safe YAML that notes the line each mapping starts on (by the mapping's ``id``, so the
    documents stay plain dicts)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.lines: dict[int, int] = {}


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    mapping = loader.construct_mapping(node, deep=True)
    loader.lines[id(mapping)] = node.start_mark.line + 1
    return mapping


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _partition(raw: object, fields: set[str], table: str) -> PartitionDeclaration:
    where = f"table {table!r}: partition"
    if isinstance(raw, str):
        raw = {"field": EVENT_TIMESTAMP, "transform": raw}
    raw = check_keys(raw, _PARTITION_KEYS, ("field",), where)
    field, transform, width = raw.get("field"), raw.get("transform", "identity"), raw.get("width")
    allowed_fields = fields | {EVENT_TIMESTAMP, ARRIVAL_TIMESTAMP}
    if field not in allowed_fields:
        raise DeclarationError(
            f"{where}: field {field!r} is not a top-level column of the table; use a "
            f"declared field that is not a struct or list, {EVENT_TIMESTAMP} or "
            f"{ARRIVAL_TIMESTAMP}"
        )
    if transform not in TRANSFORMS:
        raise DeclarationError(
            f"{where} on {field!r}: unknown transform {transform!r}; use {', '.join(TRANSFORMS)}"
        )
    if transform in _WIDTH_TRANSFORMS:
        if not isinstance(width, int) or isinstance(width, bool) or width < 1:
            raise DeclarationError(
                f"{where} on {field!r}: {transform} needs width, a positive integer (got {width!r})"
            )
    elif width is not None:
        raise DeclarationError(f"{where} on {field!r}: width applies to bucket and truncate only")
    return PartitionDeclaration(field, transform, width)


def _table(
    raw: object, index: int, streams: tuple[StreamDeclaration, ...], base: Path | None
) -> TableDeclaration:
    raw = check_keys(raw, _TABLE_KEYS, ("name",), f"tables[{index}]")
    name = raw.get("name")
    if not isinstance(name, str) or not _TABLE_NAME.fullmatch(name):
        raise DeclarationError(
            f"tables[{index}]: name must be a lower-case table name (letters, digits, "
            f"underscores), got {name!r}"
        )
    if name in FIXED_TABLES:
        raise DeclarationError(
            f"tables[{index}]: name {name!r} is the lake's own table; choose another name"
        )
    try:
        listed, origin = _fields(raw, streams, base)
        schema = EventSchema.from_dict(
            {
                "name": name,
                "fields": listed,
                "event_key": raw.get("dedup"),
                "event_time_field": raw.get("event_time_field"),
                "event_type_field": raw.get("event_type_field"),
            }
        )
    except EventSchemaError as exc:
        # A table's key is spelled ``dedup`` here (``event_key`` in a plain schema file).
        message = str(exc).replace("event_key", "dedup")
        raise DeclarationError(f"table {name!r}: {message}") from None
    fields = {field.name for field in schema.fields if not field.is_nested}
    partition_list = raw.get("partition", [p.to_dict() for p in DAILY])
    if not isinstance(partition_list, list):
        raise DeclarationError(f"table {name!r}: partition must be a list")
    partition = tuple(_partition(p, fields, name) for p in partition_list)
    for spec in partition:
        if spec.transform in _TIME_TRANSFORMS and spec.field in fields:
            declared = schema.fields[[f.name for f in schema.fields].index(spec.field)]
            if declared.type not in ("timestamp", "date"):
                raise DeclarationError(
                    f"table {name!r}: partition {spec.transform}({spec.field}) needs a "
                    f"timestamp or date field, {spec.field} is {declared.type}"
                )
    description = raw.get("description", "")
    if not isinstance(description, str):
        raise DeclarationError(f"table {name!r}: description must be a string")
    try:
        route = Route.from_dict(raw.get("route"))
    except EventSchemaError as exc:
        raise DeclarationError(f"table {name!r}: {exc}") from None
    stream = raw.get("stream")
    if stream is not None and not isinstance(stream, str):
        raise DeclarationError(f"table {name!r}: stream must be a declared stream's name")
    return TableDeclaration(schema, route, partition, description.strip(), stream, origin)


def _fields(
    raw: Mapping[str, Any], streams: tuple[StreamDeclaration, ...], base: Path | None
) -> tuple[list[Any], SchemaOrigin | None]:
    """A table's fields as ``fields:`` lists them, or derived from the schema it names."""
    given = [key for key in _FIELD_SOURCES if key in raw]
    if len(given) != 1:
        raise DeclarationError(
            f"declare the columns once: one of {', '.join(_FIELD_SOURCES)}"
            + (f" (not {' and '.join(given)})" if given else "")
        )
    file, message = raw.get("schema_file"), raw.get("message")
    if message is not None and not (isinstance(file, str) and Path(file).suffix == ".proto"):
        raise DeclarationError(
            "message applies to a .proto schema_file (a registry_schema takes its own message:)"
        )
    if message is not None and not isinstance(message, str):
        raise DeclarationError("message must be the name of a message of the .proto")
    event_time = raw.get("event_time_field")
    event_time = event_time if isinstance(event_time, str) else None  # checked with the schema
    if given[0] == "fields":
        return raw["fields"], None
    if given[0] == "schema_file":
        if not isinstance(file, str):
            raise DeclarationError("schema_file must be a path (relative to this file)")
        path = Path(file) if base is None else base / file
        derived = fields_from_file(path, file, message, event_time)
    else:
        stream = next(
            (s for s in streams if s.name == raw.get("stream") or len(streams) == 1), None
        )
        refuse_another_registry(raw["registry_schema"], stream)
        registry = stream.format if stream is not None else JSON_FORMAT
        derived = fields_from_registry(
            raw["registry_schema"], registry.region, registry.endpoint_url, event_time
        )
    return [field.to_dict() for field in derived.fields], derived.origin


def declaration_from_dict(
    data: object, lines: Mapping[int, int] | None = None, base: Path | None = None
) -> LakeDeclaration:
    """Validate a parsed YAML document of either shape (see the module docstring); ``lines``
    maps a mapping's ``id`` to its line in the file, for messages; ``base`` is the file's
    folder, where a stream's ``schema_file`` is found."""

    def _line(mapping: object) -> int | None:
        return (lines or {}).get(id(mapping))

    if isinstance(data, Mapping) and "tables" not in data:
        schema = EventSchema.from_dict(data)
        renamed = EventSchema(
            DEFAULT_TABLE,
            schema.fields,
            schema.event_key,
            schema.event_time_field,
            schema.event_type_field,
        )
        return LakeDeclaration((TableDeclaration(renamed),), DEFAULT_TABLE)
    if not isinstance(data, Mapping):
        raise DeclarationError(
            "the declaration must be a mapping: an event schema (name, fields) or a lake "
            f"(tables: [...]), got {type(data).__name__}"
        )
    unknown = [key for key in data if key not in _LAKE_KEYS]
    if unknown:
        raise DeclarationError(f"unknown key {unknown[0]!r}; allowed keys: {', '.join(_LAKE_KEYS)}")
    streams = _streams(data.get("streams"), _line, base)
    raw_tables = data["tables"]
    if not isinstance(raw_tables, list) or not raw_tables:
        raise DeclarationError("tables must be a non-empty list of table declarations")
    tables: list[TableDeclaration] = []
    seen: set[str] = set()
    for index, raw in enumerate(raw_tables):
        try:
            table = _table(raw, index, streams, base)
        except EventSchemaError as exc:
            line = _line(raw)
            raise DeclarationError(f"line {line}: {exc}" if line else str(exc)) from None
        if table.name in seen or table.name in {stream.raw_table for stream in streams}:
            raise DeclarationError(f"line {_line(raw)}: table {table.name!r} is declared twice")
        seen.add(table.name)
        table = _on_stream(table, streams, _line(raw))
        refuse_two_versions(table, tables, streams, _line(raw))
        tables.append(table)
    aggregate = data.get("aggregate", {"table": tables[0].name})
    source = aggregate.get("table") if isinstance(aggregate, Mapping) else None
    if source not in seen:
        raise DeclarationError(
            f"line {_line(aggregate) or _line(data)}: aggregate: {{table: ...}} must name a "
            f"declared table ({', '.join(sorted(seen))}), got {source!r}"
        )
    derived = _derived(data.get("derived"), tables, streams, _line)
    streams = tuple(with_readers(stream, tables) for stream in streams)
    return LakeDeclaration(tuple(tables), source, streams=streams, derived=derived)


def _derived(
    raw: object,
    tables: list[TableDeclaration],
    streams: tuple[StreamDeclaration, ...],
    line: Callable[[object], int | None],
) -> tuple[DerivedTable, ...]:
    """The ``derived:`` entries; each may read the routed tables and the upsert tables
    declared before it (a SQL table's columns are known only once it has run)."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise DeclarationError("derived must be a list of derived table declarations")
    readable = {
        table.name: frozenset(
            [*(f.name for f in table.schema.fields if not f.is_nested), *RESERVED_COLUMNS]
        )
        for table in tables
    }
    taken = {*readable, *FIXED_TABLES, *(stream.raw_table for stream in streams)}
    upserts: dict[str, str] = {}  # the upsert tables so far, and the table each reads
    derived: list[DerivedTable] = []
    for index, entry in enumerate(raw):
        where = f"line {line(entry)}: " if line(entry) else ""
        try:
            table = parse_derived(entry, index, readable)
            _refuse_following_an_upsert(table, upserts)
        except EventSchemaError as exc:
            raise DeclarationError(f"{where}{exc}") from None
        names = (table.name, table.tombstones) if table.upsert else (table.name,)
        clash = next((name for name in names if name in taken), None)
        if clash is not None:
            raise DeclarationError(
                f"{where}derived table {table.name!r}: the name {clash!r} is already a table "
                "of the lake; choose another name"
            )
        taken.update(names)
        if table.upsert is not None:
            readable[table.name] = readable[table.source]
            upserts[table.name] = table.source
        derived.append(table)
    return tuple(derived)


def _refuse_following_an_upsert(table: DerivedTable, upserts: Mapping[str, str]) -> None:
    """An upsert table replaces rows (copy-on-write overwrites), and a table that reads only
    what its input appended cannot see a replacement: it would stop at the first replaced
    key, for good (issue 31, defect 4). Refused here, where the fix is one edit away."""
    if not table.incremental or table.source not in upserts:
        return
    if table.upsert is not None:
        raise DerivedTableError(
            f"derived table {table.name!r}: an upsert follows the rows its from table appends, "
            f"and {table.source} is an upsert table, which replaces rows; take from: "
            f"{upserts[table.source]} (its source), or use a SQL table with refresh: full"
        )
    raise DerivedTableError(
        f"derived table {table.name!r}: refresh {table.refresh} follows the rows its input "
        f"appends, and {table.source} is an upsert table, which replaces rows; use refresh: full"
    )


def _streams(
    raw: object, line: Callable[[object], int | None], base: Path | None
) -> tuple[StreamDeclaration, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not raw:
        raise DeclarationError("streams must be a non-empty list of {name, raw_table} mappings")
    streams: list[StreamDeclaration] = []
    for index, entry in enumerate(raw):
        where = f"line {line(entry)}: streams[{index}]" if line(entry) else f"streams[{index}]"
        try:
            entry = check_keys(entry, _STREAM_KEYS, ("name",), where)
        except EventSchemaError as exc:
            raise DeclarationError(str(exc)) from None
        name = entry.get("name")
        if not isinstance(name, str) or not _STREAM_NAME.fullmatch(name):
            raise DeclarationError(
                f"{where}: name must be a Kinesis stream name (letters, digits, _ . -), got "
                f"{name!r}"
            )
        raw_table = entry.get("raw_table", "raw_" + re.sub(r"[^a-z0-9_]", "_", name.lower()))
        if not isinstance(raw_table, str) or not _TABLE_NAME.fullmatch(raw_table):
            raise DeclarationError(f"{where}: raw_table must be a lower-case table name")
        if raw_table in (QUARANTINE_TABLE, AGGREGATE_TABLE):
            raise DeclarationError(f"{where}: raw_table {raw_table!r} is the lake's own table")
        if any(s.name == name or s.raw_table == raw_table for s in streams):
            raise DeclarationError(f"{where}: stream {name!r} or its raw table is declared twice")
        description = entry.get("description", "")
        try:
            fmt = payload_format(entry, base)
        except PayloadFormatError as exc:
            raise DeclarationError(f"{where}: stream {name!r}: {exc}") from None
        streams.append(StreamDeclaration(name, raw_table, str(description).strip(), fmt))
    return tuple(streams)


def _on_stream(
    table: TableDeclaration, streams: tuple[StreamDeclaration, ...], line: int | None
) -> TableDeclaration:
    """The table with its stream checked, or the only declared stream filled in."""
    names = [stream.name for stream in streams]
    where = f"line {line}: table {table.name!r}" if line else f"table {table.name!r}"
    if table.stream is None:
        if len(streams) > 1:
            raise DeclarationError(
                f"{where}: say which stream it reads (stream: one of {', '.join(names)})"
            )
        return replace(table, stream=names[0]) if names else table
    if table.stream not in names:
        declared = ", ".join(names) or "none: declare streams first"
        raise DeclarationError(
            f"{where}: stream {table.stream!r} is not declared (streams: {declared})"
        )
    return table


def load_declaration(path: str | Path) -> LakeDeclaration:
    """Load and validate a declaration file; every error starts with ``path`` (and a line)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DeclarationError(f"{path}: cannot read the declaration: {exc}") from exc
    loader = _LineLoader(text)
    try:
        data = loader.get_single_data()
    except yaml.YAMLError as exc:
        raise DeclarationError(f"{path}: invalid YAML: {exc}") from None
    finally:
        loader.dispose()
    try:
        declaration = declaration_from_dict(data, loader.lines, path.parent)
    except EventSchemaError as exc:
        message = str(exc)
        if message.startswith("line "):
            raise DeclarationError(f"{path}:{message[5:]}") from None
        raise DeclarationError(f"{path}: {message}") from None
    return replace(declaration, path=path)
