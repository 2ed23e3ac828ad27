"""Loading, validating and serialising event schemas."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pytest

from kinesis_lake.events.declaration_file import load_declaration
from kinesis_lake.events.schema import EventField, EventSchema, EventSchemaError
from kinesis_lake_tests.events.raw import SCHEMAS, demo_schema, seed_schema

ALLOWED = "string, long, int, double, float, boolean, timestamp, date, decimal(p,s)"


def test_demo_schema_loads() -> None:
    schema = demo_schema()
    assert schema.name == "events"
    assert [(f.name, f.type, f.required) for f in schema.fields] == [
        ("event_id", "string", True),
        ("event_type", "string", True),
        ("user_id", "string", False),
        ("amount", "double", False),
        ("event_time", "timestamp", True),
        ("key1", "string", False),
        ("key2", "string", False),
        ("key3", "string", False),
    ]
    assert schema.event_key == "event_id"
    assert schema.event_time_field == "event_time"
    assert schema.event_type_field == "event_type"


def test_seed_article_schema_loads() -> None:
    schema = seed_schema()
    assert schema == EventSchema(
        "events",  # a plain schema file declares the one table "events"
        (EventField("key1", "string"), EventField("key2", "string"), EventField("key3", "string")),
    )
    assert (schema.event_key, schema.event_time_field, schema.event_type_field) == (None,) * 3


def test_arrow_schema_has_event_fields_only() -> None:
    assert demo_schema().arrow_schema() == pa.schema(
        [
            pa.field("event_id", pa.string(), nullable=False),
            pa.field("event_type", pa.string(), nullable=False),
            pa.field("user_id", pa.string()),
            pa.field("amount", pa.float64()),
            pa.field("event_time", pa.timestamp("us", tz="UTC"), nullable=False),
            pa.field("key1", pa.string()),
            pa.field("key2", pa.string()),
            pa.field("key3", pa.string()),
        ]
    )


def test_every_type_maps_to_arrow() -> None:
    types = ["string", "long", "int", "double", "float", "boolean", "timestamp", "date"]
    fields = [EventField(f"f_{t}", t) for t in types] + [EventField("f_dec", "decimal( 10 , 2 )")]
    schema = EventSchema("all_types", fields)
    assert schema.fields[-1].type == "decimal(10,2)"
    assert schema.arrow_schema().types == [
        pa.string(),
        pa.int64(),
        pa.int32(),
        pa.float64(),
        pa.float32(),
        pa.bool_(),
        pa.timestamp("us", tz="UTC"),
        pa.date32(),
        pa.decimal128(10, 2),
    ]


def test_dict_round_trip_is_json_able_and_lossless() -> None:
    schema = demo_schema()
    shipped = json.loads(json.dumps(schema.to_dict()))
    assert EventSchema.from_dict(shipped) == schema
    assert shipped["fields"][0] == {"name": "event_id", "type": "string", "required": True}


def test_schema_is_hashable_and_frozen() -> None:
    schema = demo_schema()
    assert hash(schema) == hash(demo_schema())
    with pytest.raises(AttributeError):
        schema.name = "other"  # type: ignore[misc]


VALID_FIELDS = """
fields:
  - {name: id, type: string, required: true}
  - {name: kind, type: string, required: true}
  - {name: at, type: timestamp, required: true}
  - {name: n, type: double}
"""

# (YAML document, message after "<path>: ")
INVALID = {
    "unknown type": (
        "name: s\nfields:\n  - {name: amount, type: doubel}\n",
        f"field 'amount': unknown type 'doubel'; allowed types: {ALLOWED}",
    ),
    "type not a string": (
        "name: s\nfields:\n  - {name: amount, type: 3}\n",
        "field 'amount': type must be a string, got int",
    ),
    "decimal precision": (
        "name: s\nfields:\n  - {name: amount, type: 'decimal(39,2)'}\n",
        "field 'amount': decimal precision must be between 1 and 38, got 39",
    ),
    "decimal scale": (
        "name: s\nfields:\n  - {name: amount, type: 'decimal(5,6)'}\n",
        "field 'amount': decimal scale must be between 0 and the precision, got 6",
    ),
    "required not boolean": (
        "name: s\nfields:\n  - {name: a, type: string, required: maybe}\n",
        "field 'a': required must be true or false, got 'maybe'",
    ),
    "duplicate field": (
        "name: s\nfields:\n  - {name: a, type: string}\n  - {name: A, type: long}\n",
        "field 'A': duplicate of field 'a' (column names are case-insensitive in Spark)",
    ),
    "reserved field": (
        "name: s\nfields:\n  - {name: parsed_at, type: timestamp}\n",
        "field 'parsed_at': name is reserved for a pipeline column; reserved names: "
        "approximate_arrival_timestamp, event_timestamp, parsed_at, sequence_number, "
        "shard_id, stream_name, sub_sequence_number",
    ),
    "invalid field name": (
        "name: s\nfields:\n  - {name: user-id, type: string}\n",
        "field name 'user-id' is not a valid column name: use letters, digits and "
        "underscores, not starting with a digit",
    ),
    "boolean field name": (
        "name: s\nfields:\n  - {name: on, type: string}\n",
        "field name must be a string, got boolean True (YAML reads unquoted "
        "yes/no/on/off/true/false as booleans: quote it)",
    ),
    "numeric schema name": (
        "name: 7\nfields:\n  - {name: a, type: string}\n",
        "schema name must be a string, got int 7",
    ),
    "missing name": (
        "fields:\n  - {name: a, type: string}\n",
        "schema: missing required key 'name'",
    ),
    "missing fields": ("name: s\n", "schema: missing required key 'fields'"),
    "unknown top-level key": (
        "name: s\nevent_keys: a\nfields:\n  - {name: a, type: string}\n",
        "schema: unknown key 'event_keys'; allowed keys: name, fields, event_key, "
        "event_time_field, event_type_field",
    ),
    "unknown field key": (
        "name: s\nfields:\n  - {name: a, type: string, requried: true}\n",
        "fields[0]: unknown key 'requried'; allowed keys: name, type, required, fields, items, "
        "values",
    ),
    "field without type": (
        "name: s\nfields:\n  - {name: a, type: string}\n  - {name: b}\n",
        "fields[1]: missing required key 'type'",
    ),
    "field not a mapping": (
        "name: s\nfields:\n  - a\n",
        "fields[0] must be a mapping with keys name, type, required, fields, items, values, "
        "got str",
    ),
    "fields not a list": (
        "name: s\nfields: {name: a, type: string}\n",
        "fields must be a list of {name, type, required} mappings, got dict",
    ),
    "no fields": ("name: s\nfields: []\n", "fields: declare at least one field"),
    "document not a mapping": (
        "- name: s\n",
        "the declaration must be a mapping: an event schema (name, fields) or a lake "
        "(tables: [...]), got list",
    ),
    "empty document": (
        "",
        "the declaration must be a mapping: an event schema (name, fields) or a lake "
        "(tables: [...]), got NoneType",
    ),
    "event_key undeclared": (
        f"name: s\nevent_key: uid\n{VALID_FIELDS}",
        "event_key 'uid' is not a declared field; declared fields: id, kind, at, n",
    ),
    "event_key wrong type": (
        f"name: s\nevent_key: n\n{VALID_FIELDS}",
        "event_key 'n' has type double; allowed types: int, long, string",
    ),
    "event_key optional": (
        "name: s\nevent_key: id\nfields:\n  - {name: id, type: string}\n",
        "event_key 'id' must be declared required: true (every event needs a key to dedupe on)",
    ),
    "event_key not a name": (
        f"name: s\nevent_key: [id]\n{VALID_FIELDS}",
        "event_key must be a field name, got ['id']",
    ),
    "event_time_field wrong type": (
        f"name: s\nevent_time_field: id\n{VALID_FIELDS}",
        "event_time_field 'id' has type string; allowed types: timestamp",
    ),
    "event_time_field optional": (
        "name: s\nevent_time_field: at\nfields:\n  - {name: at, type: timestamp}\n",
        "event_time_field 'at' must be declared required: true "
        "(every event needs a time to be placed in)",
    ),
    "event_type_field undeclared": (
        f"name: s\nevent_type_field: type\n{VALID_FIELDS}",
        "event_type_field 'type' is not a declared field; declared fields: id, kind, at, n",
    ),
    "event_type_field wrong type": (
        f"name: s\nevent_type_field: at\n{VALID_FIELDS}",
        "event_type_field 'at' has type timestamp; allowed types: string",
    ),
}


@pytest.mark.parametrize(("document", "message"), INVALID.values(), ids=INVALID.keys())
def test_validation_errors_name_file_field_and_allowed_values(
    tmp_path: Path, document: str, message: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(document)
    with pytest.raises(EventSchemaError) as caught:
        load_declaration(path)
    assert str(caught.value) == f"{path}: {message}"


def test_valid_roles_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "ok.yaml"
    path.write_text(
        f"name: s\nevent_key: id\nevent_time_field: at\nevent_type_field: kind\n{VALID_FIELDS}"
    )
    (table,) = load_declaration(str(path)).tables
    schema = table.schema
    assert (schema.event_key, schema.event_time_field, schema.event_type_field) == (
        "id",
        "at",
        "kind",
    )


def test_integer_event_key_is_accepted() -> None:
    schema = EventSchema("s", [EventField("seq", "long", required=True)], event_key="seq")
    assert schema.event_key == "seq"


def test_invalid_yaml_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("name: s\nfields: [\n")
    with pytest.raises(EventSchemaError, match=rf"^{re.escape(str(path))}: invalid YAML: "):
        load_declaration(path)


def test_missing_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.yaml"
    with pytest.raises(
        EventSchemaError, match=rf"^{re.escape(str(path))}: cannot read the declaration: "
    ):
        load_declaration(path)


def test_code_built_schemas_are_validated_too() -> None:
    with pytest.raises(EventSchemaError, match=r"^field 'x': unknown type 'text'"):
        EventField("x", "text")
    with pytest.raises(EventSchemaError, match=r"^fields: declare at least one field$"):
        EventSchema("s", ())


@pytest.mark.parametrize("path", sorted(SCHEMAS.glob("*.yaml")), ids=lambda path: path.name)
def test_every_shipped_schema_loads(path: Path) -> None:
    assert load_declaration(path).tables
