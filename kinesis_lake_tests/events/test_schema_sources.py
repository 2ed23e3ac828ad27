"""Tables declared from a schema (``schema_file:`` Avro or JSON Schema, ``registry_schema:``)
instead of ``fields:``: the derived fields equal the hand-written ones, the table routes and
types records like a listed one, and what has no column type stops the load naming the
file, the line, the path in the schema and what to do."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pyiceberg.types import MapType, StringType

from kinesis_lake.events.declaration import DeclarationError, LakeDeclaration
from kinesis_lake.events.declaration_file import declaration_from_dict, load_declaration
from kinesis_lake.events.parse import route_events
from kinesis_lake.events.tables import parsed_table_schema
from kinesis_lake_tests.events.raw import NOW, event_fields, raw_table
from kinesis_lake_tests.events.registry import Registry, avro_datum

ORDER = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "seen", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {
            "name": "total",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
        },
        {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]}},
        {"name": "qty", "type": "int"},
        {"name": "weight", "type": ["null", "float"], "default": None},
        {"name": "gift", "type": "boolean", "default": False},
        {"name": "counts", "type": {"type": "map", "values": "long"}},
        {
            "name": "lines",
            "type": {
                "type": "array",
                "items": {
                    "type": "record",
                    "name": "Line",
                    "fields": [
                        {"name": "sku", "type": "string"},
                        {"name": "price", "type": "double"},
                    ],
                },
            },
        },
        {"name": "first", "type": ["null", "shop.Line"], "default": None},  # by full name
        {"name": "ids", "type": {"type": "string", "logicalType": "uuid"}},
    ],
}
LINE_FIELDS = [{"name": "sku", "type": "string", "required": True}]
LINE_FIELDS.append({"name": "price", "type": "double", "required": True})
LISTED = [
    {"name": "id", "type": "string", "required": True},
    {"name": "at", "type": "timestamp", "required": True},
    {"name": "seen", "type": "timestamp", "required": True},
    {"name": "day", "type": "date", "required": True},
    {"name": "total", "type": "decimal(10,2)", "required": True},
    {"name": "status", "type": "string", "required": True},
    {"name": "qty", "type": "int", "required": True},
    {"name": "weight", "type": "float"},
    {"name": "gift", "type": "boolean"},
    {
        "name": "counts",
        "type": "map",
        "required": True,
        "values": {"type": "long", "required": True},
    },
    {
        "name": "lines",
        "type": "list",
        "required": True,
        "items": {"type": "struct", "required": True, "fields": LINE_FIELDS},
    },
    {"name": "first", "type": "struct", "fields": LINE_FIELDS},
    {"name": "ids", "type": "string", "required": True},
]
JSON_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["id", "at"],
    "properties": {
        "id": {"type": "string"},
        "at": {"type": "string", "format": "date-time"},
        "day": {"type": "string", "format": "date"},
        "n": {"type": "integer"},
        "score": {"type": ["number", "null"]},
        "ok": {"type": "boolean"},
        "kind": {"enum": ["a", "b"]},
        "tags": {"type": "array", "items": {"type": "string"}},
        "maybe": {"type": "array", "items": {"type": ["integer", "null"]}},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "page": {"$ref": "#/$defs/page"},
        "alt": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/page"}]},
    },
    "$defs": {
        "page": {
            "type": "object",
            "required": ["url"],
            "properties": {"url": {"type": "string"}, "ms": {"type": "integer"}},
        }
    },
}
PAGE = [{"name": "url", "type": "string", "required": True}, {"name": "ms", "type": "long"}]
JSON_LISTED = [
    {"name": "id", "type": "string", "required": True},
    {"name": "at", "type": "timestamp", "required": True},
    {"name": "day", "type": "date"},
    {"name": "n", "type": "long"},
    {"name": "score", "type": "double"},
    {"name": "ok", "type": "boolean"},
    {"name": "kind", "type": "string"},
    {"name": "tags", "type": "list", "items": {"type": "string", "required": True}},
    {"name": "maybe", "type": "list<long>"},
    {"name": "labels", "type": "map", "values": {"type": "string", "required": True}},
    {"name": "page", "type": "struct", "fields": PAGE},
    {"name": "alt", "type": "struct", "fields": PAGE},
]


def _write_lake(tmp_path: Path, schema_file: str, schema: Any, table_extra: str = "") -> Path:
    (tmp_path / schema_file).write_text(json.dumps(schema))
    lake = tmp_path / "lake.yaml"
    lake.write_text(f"tables:\n  - name: t\n    schema_file: {schema_file}\n{table_extra}")
    return lake


def test_an_avro_schema_file_declares_the_fields_a_listed_table_would_have(tmp_path):
    lake = _write_lake(
        tmp_path,
        "order.avsc",
        ORDER,
        "    dedup: id\n    event_time_field: at\n"
        "    partition: [{field: at, transform: day}, {field: status, transform: identity}]\n",
    )

    (table,) = load_declaration(lake).tables

    assert table.schema.fields == event_fields(LISTED)
    assert (table.schema.event_key, table.schema.event_time_field) == ("id", "at")
    assert [p.name for p in table.partition] == ["at_day", "status"]
    assert table.origin is not None and table.origin.definition == ORDER
    counts = parsed_table_schema(table.schema).find_field("counts").field_type
    assert isinstance(counts, MapType) and counts.key_type == StringType()
    assert LakeDeclaration.from_dict(load_declaration(lake).to_dict()).tables == (table,)


def test_a_json_schema_file_declares_the_fields_a_listed_table_would_have(tmp_path):
    lake = _write_lake(tmp_path, "order.schema.json", JSON_SCHEMA, "    event_time_field: at\n")
    (table,) = load_declaration(lake).tables
    assert table.schema.fields == event_fields(JSON_LISTED)


def test_a_table_from_a_schema_routes_and_types_records_like_a_listed_one():
    from kinesis_lake.events.schema_sources import SchemaOrigin, derive_fields

    derived = derive_fields(SchemaOrigin("test", "AVRO", ORDER))
    fields = [field.to_dict() for field in derived.fields]
    from_schema = declaration_from_dict(
        {
            "streams": [{"name": "events", "format": "avro", "schema": ORDER}],
            "tables": [{"name": "t", "fields": fields, "route": {"status": "PAID"}}],
        }
    )
    at = datetime(2024, 5, 1, 9, 30, tzinfo=UTC)
    order = {
        "id": "o1",
        "at": at,
        "seen": at,
        "day": date(2024, 5, 1),
        "total": Decimal("9.99"),
        "status": "PAID",
        "qty": 2,
        "weight": None,
        "gift": True,
        "counts": {"x": 1, "y": 2},
        "lines": [{"sku": "s", "price": 1.5}],
        "first": None,
        "ids": "9d0c0f1e-0000-4000-8000-000000000000",
    }
    payloads = [avro_datum(ORDER, order), avro_datum(ORDER, {**order, "status": "NEW"})]

    routed = route_events(raw_table(payloads), from_schema, now=NOW)

    (row,) = routed.tables["t"].to_pylist()
    assert (row["id"], row["at"], row["total"], row["status"]) == (
        "o1",
        at,
        Decimal("9.99"),
        "PAID",
    )
    assert sorted(row["counts"]) == [("x", 1), ("y", 2)]
    assert row["lines"] == [{"sku": "s", "price": 1.5}] and row["first"] is None
    (unrouted,) = routed.quarantine.to_pylist()
    assert unrouted["error"].startswith("no route")


def test_a_map_field_types_each_value_and_quarantines_a_bad_one_by_its_path():
    lake = declaration_from_dict(
        {"tables": [{"name": "t", "fields": [{"name": "m", "type": "map<int>"}]}]}
    )
    routed = route_events(
        raw_table([b'{"m": {"a": 1, "b": null}}', b'{"m": {"a": "x"}}', b'{"m": null}', b"{}"]),
        lake,
        now=NOW,
    )
    rows = routed.tables["t"].to_pylist()
    assert [row["m"] for row in rows] == [[("a", 1), ("b", None)], None, None]
    (bad,) = routed.quarantine.to_pylist()
    assert (bad["error_field"], bad["error"]) == (
        "m{}",
        "field 'm{}': expected int, got string \"x\"",
    )


def _avro(*fields: dict[str, Any]) -> dict[str, Any]:
    return {"type": "record", "name": "R", "fields": [{"name": "id", "type": "string"}, *fields]}


def _json(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": {"id": {"type": "string"}, **properties}}


REFUSED = {
    "avro union": (
        _avro({"name": "v", "type": ["null", "string", "long"]}),
        'field \'v\': the union ["null", "string", "long"] has no column type',
        'use one type, or ["null", T] for an optional T',
    ),
    "avro bytes": (
        _avro({"name": "b", "type": "bytes"}),
        "field 'b': Avro bytes have no column type",
        "give them logicalType decimal",
    ),
    "avro fixed": (
        _avro({"name": "f", "type": {"type": "fixed", "name": "F", "size": 4}}),
        "field 'f': Avro fixed (raw bytes) has no column type",
        "or send the value as a string",
    ),
    "avro recursion": (
        {
            "type": "record",
            "name": "Node",
            "fields": [{"name": "next", "type": ["null", "Node"]}],
        },
        "field 'next': type 'Node' contains itself",
        "cut the recursion",
    ),
    "avro local timestamp": (
        _avro({"name": "t", "type": {"type": "long", "logicalType": "local-timestamp-millis"}}),
        "field 't': local-timestamp-millis has no zone",
        "use timestamp-millis or timestamp-micros (UTC)",
    ),
    "avro time of day": (
        _avro({"name": "t", "type": {"type": "int", "logicalType": "time-millis"}}),
        "field 't': time-millis (a time of day) has no column type",
        "or as a string",
    ),
    "avro wide decimal": (
        _avro(
            {
                "name": "d",
                "type": {"type": "bytes", "logicalType": "decimal", "precision": 40, "scale": 2},
            }
        ),
        "field 'd': decimal precision 40 does not fit a column (1 to 38 digits)",
        "send wider values as strings",
    ),
    "avro undefined name": (
        _avro({"name": "x", "type": "Later"}),
        "field 'x': type 'Later' is not defined before it is used",
        "define it earlier",
    ),
    "avro nested reserved case clash": (
        _avro(
            {
                "name": "s",
                "type": {
                    "type": "record",
                    "name": "S",
                    "fields": [{"name": "a", "type": "int"}, {"name": "A", "type": "int"}],
                },
            }
        ),
        "field 's': struct 's': field 'A' duplicates field 'a'",
        "case-insensitive",
    ),
    "json two types": (
        _json(v={"type": ["string", "integer"]}),
        'field \'v\': type ["string", "integer"] has no column type',
        'or [T, "null"] for an optional T',
    ),
    "json bare object": (
        _json(o={"type": "object"}),
        "field 'o': an object without properties has no columns",
        "additionalProperties: {type: ...} for a map",
    ),
    "json array without items": (
        _json(a={"type": "array"}),
        "field 'a': an array without one items schema has no column type",
        "give it items: {type: ...}",
    ),
    "json oneOf": (
        _json(u={"oneOf": [{"type": "string"}, {"type": "integer"}]}),
        "field 'u': oneOf of 2 non-null schemas has no column type",
        "use one schema",
    ),
    "json remote ref": (
        _json(r={"$ref": "https://example.com/x.json"}),
        "field 'r': $ref 'https://example.com/x.json' is not a local definition",
        "put the definition under $defs",
    ),
    "json recursion": (
        {
            "type": "object",
            "properties": {"tree": {"$ref": "#/$defs/t"}},
            "$defs": {"t": {"type": "object", "properties": {"kids": {"$ref": "#/$defs/t"}}}},
        },
        "field 'tree.kids': #/$defs/t contains itself",
        "cut the recursion",
    ),
    "json column name": (
        _json(**{"user-id": {"type": "string"}}),
        "field 'user-id': field name 'user-id' is not a valid column name",
        "use letters, digits and underscores",
    ),
    "json no type": (
        _json(x={"description": "anything"}),
        "field 'x': has no type",
        "give it a type: string, integer, number, boolean, object or array",
    ),
    "json top": (
        {"type": "array", "items": {"type": "string"}},
        "the JSON Schema must describe an object with properties",
        "each property becomes a column",
    ),
}


@pytest.mark.parametrize(("schema", "what", "fix"), REFUSED.values(), ids=REFUSED.keys())
def test_what_a_schema_cannot_map_stops_the_load_naming_file_line_path_and_fix(
    tmp_path, schema, what, fix
):
    name = "s.avsc" if schema.get("type") == "record" else "s.json"
    lake = _write_lake(tmp_path, name, schema)

    with pytest.raises(DeclarationError) as raised:
        load_declaration(lake)

    message = str(raised.value)
    assert message.startswith(f"{lake}:2: table 't': schema_file '{name}': {what}"), message
    assert fix in message


def test_a_table_lists_its_fields_or_names_one_schema(tmp_path):
    lake = _write_lake(tmp_path, "s.avsc", ORDER, "    fields: [{name: id, type: string}]\n")
    with pytest.raises(DeclarationError, match="declare the columns once: one of fields, "):
        load_declaration(lake)


def _registry_lake(registry: Registry, ref: dict[str, Any]) -> dict[str, Any]:
    return {
        "streams": [
            {
                "name": "orders",
                "format": "glue-schema-registry",
                "registry": {"region": "us-east-1", "endpoint_url": registry.endpoint_url},
            }
        ],
        "tables": [{"name": "t", "registry_schema": {"registry": registry.name, **ref}}],
    }


def test_a_registry_schema_declares_the_table_at_its_latest_or_a_numbered_version(registry):
    registry.create("orders", _avro())
    registry.register("orders", _avro({"name": "n", "type": ["null", "long"], "default": None}))

    latest = declaration_from_dict(_registry_lake(registry, {"schema": "orders"}))
    first = declaration_from_dict(_registry_lake(registry, {"schema": "orders", "version": 1}))

    assert [f.name for f in latest.tables[0].schema.fields] == ["id", "n"]
    assert [f.name for f in first.tables[0].schema.fields] == ["id"]
    origin = latest.tables[0].origin
    assert origin is not None and origin.describe() == (
        f"registry {registry.name}, schema orders, version 2"
    )
    (stream,) = latest.streams  # its records are read as the version the table follows
    assert stream.format.readers == {origin.schema_arn: {"number": 2, "schema": origin.definition}}


def test_a_json_schema_in_the_registry_declares_a_table_too(registry):
    registry.create("events", JSON_SCHEMA, data_format="JSON")
    lake = declaration_from_dict(_registry_lake(registry, {"schema": "events"}))
    assert lake.tables[0].schema.fields == event_fields(JSON_LISTED)


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ({"schema": "nope"}, "registry_schema: registry {name}, schema nope has no version latest"),
        ({"schema": "orders", "version": 7}, "schema orders has no version 7 in the registry"),
        ({"schema": "orders", "version": "newest"}, "version must be latest or a version number"),
    ],
)
def test_a_registry_schema_that_is_not_there_stops_the_load(registry, ref, message):
    registry.create("orders", _avro())
    with pytest.raises(DeclarationError) as raised:
        declaration_from_dict(_registry_lake(registry, ref))
    assert message.format(name=registry.name) in str(raised.value)


@pytest.mark.parametrize(
    ("stream_registry", "ref", "setting"),
    [
        ({"region": "us-east-1", "endpoint_url": "http://127.0.0.1:9"}, {}, "endpoint_url"),
        ({}, {"region": "us-east-1"}, "region"),
    ],
)
def test_a_registry_schema_of_another_registry_than_its_streams_stops_the_load(
    registry, tmp_path, stream_registry, ref, setting
):
    """The executors decode a stream's records with its registry: settings alone, so a table
    whose schema came from elsewhere would load and then quarantine every record."""
    registry.create("orders", _avro())
    lake = _registry_lake(registry, {"schema": "orders", "endpoint_url": registry.endpoint_url})
    lake["streams"][0]["registry"] = {"endpoint_url": registry.endpoint_url, **stream_registry}
    lake["tables"][0]["registry_schema"].update(ref)
    path = tmp_path / "lake.yaml"
    path.write_text(json.dumps(lake, indent=1), encoding="utf-8")

    with pytest.raises(DeclarationError) as raised:
        load_declaration(path)

    message = str(raised.value)
    assert message.startswith(f"{path}:") and f"table 't': registry_schema: {setting} " in message
    assert f"differs from stream 'orders''s registry: {setting} " in message
    assert f"set {setting} once, in the stream's registry:" in message


def test_two_versions_of_one_registry_schema_on_one_stream_stop_the_load(registry):
    """A stream reads each registry schema's records as one version: two tables following
    two versions would get one of them, silently in the wrong shape."""
    registry.create("orders", _avro())
    registry.register("orders", _avro({"name": "n", "type": ["null", "long"], "default": None}))
    lake = _registry_lake(registry, {"schema": "orders"})
    pinned = {**lake["tables"][0], "name": "u"}
    pinned["registry_schema"] = {**pinned["registry_schema"], "version": 2}
    assert len(declaration_from_dict({**lake, "tables": [*lake["tables"], pinned]}).tables) == 2

    pinned["registry_schema"]["version"] = 1
    with pytest.raises(DeclarationError) as raised:
        declaration_from_dict({**lake, "tables": [*lake["tables"], pinned]})

    message = str(raised.value)
    assert f"table 'u' follows registry {registry.name}, schema orders, version 1" in message
    assert "table 't' follows version 2 of it, on stream 'orders'" in message
    assert "follow one version in both" in message and "streams of their own" in message


def test_upsert_and_sql_tables_read_a_table_declared_from_a_schema(tmp_path):
    """Issue 35: upserts and SQL tables work on a schema-declared table as on a listed one."""
    lake = _write_lake(
        tmp_path,
        "order.avsc",
        ORDER,
        "derived:\n  - name: latest_orders\n    from: t\n    upsert: {key: id, version: qty}\n"
        "  - name: paid\n    sql: SELECT count(*) AS n FROM t WHERE status = 'PAID'\n",
    )
    upsert, sql = load_declaration(lake).derived
    assert (upsert.inputs, upsert.upsert.key, upsert.upsert.version) == (("t",), "id", "qty")
    assert sql.inputs == ("t",)
