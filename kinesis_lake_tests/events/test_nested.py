"""Nested objects and arrays: declared as structs and lists, parsed, stored and read back."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from kinesis_lake.events.parse import parse_events
from kinesis_lake.events.schema import EventField, EventSchema, EventSchemaError
from kinesis_lake.events.tables import parsed_partition_spec, parsed_table_schema
from kinesis_lake.iceberg.commit import commit_files
from kinesis_lake.iceberg.data_files import TableWriteTarget, write_data_files
from kinesis_lake.iceberg.tables import ensure_table, type_text
from kinesis_lake_tests.events.raw import NOW, raw_table

SCHEMA = EventSchema.from_dict(
    {
        "name": "clicks",
        "fields": [
            {"name": "id", "type": "string", "required": True},
            {
                "name": "context",
                "type": "struct",
                "fields": [
                    {
                        "name": "device",
                        "type": "struct",
                        "fields": [
                            {"name": "os", "type": "string", "required": True},
                            {"name": "version", "type": "int"},
                        ],
                    },
                    {"name": "locale", "type": "string"},
                ],
            },
            {"name": "tags", "type": "list<string>"},
            {
                "name": "items",
                "type": "list",
                "items": {
                    "type": "struct",
                    "fields": [
                        {"name": "sku", "type": "string", "required": True},
                        {"name": "price", "type": "decimal(9,2)"},
                        {"name": "seen", "type": "timestamp"},
                    ],
                },
            },
        ],
    }
)

FULL = {
    "id": "a",
    "context": {"device": {"os": "ios", "version": 17, "model": "ignored"}, "locale": "nl"},
    "tags": ["x", None, "y"],
    "items": [
        {"sku": "s1", "price": "9.99", "seen": "2024-05-01T10:00:00Z"},
        {"sku": "s2", "price": 1},
    ],
}
SPARSE = {"id": "b", "context": None, "tags": [], "items": None}


def _parse(*records: object):
    return parse_events(raw_table([json.dumps(r).encode() for r in records]), SCHEMA, now=NOW)


def test_nested_objects_and_arrays_round_trip_through_an_iceberg_table(catalog):
    parsed, quarantine = _parse(FULL, SPARSE)
    assert quarantine.num_rows == 0, quarantine.to_pylist()

    schema = parsed_table_schema(SCHEMA)
    table = ensure_table(
        catalog, "lake.clicks", schema, partition_spec=parsed_partition_spec(schema)
    )
    # As the Spark sink writes: our Parquet writer, then a commit of the files.
    written = write_data_files(
        TableWriteTarget.from_table(table), parsed.to_batches(), file_prefix="t"
    )
    commit_files(table, written, writer_id="test", batch_id=0)

    rows = {r["id"]: r for r in table.scan().to_arrow().to_pylist()}
    full = rows["a"]
    assert full["context"] == {"device": {"os": "ios", "version": 17}, "locale": "nl"}
    assert full["tags"] == ["x", None, "y"]
    assert [(i["sku"], str(i["price"])) for i in full["items"]] == [("s1", "9.99"), ("s2", "1.00")]
    assert full["items"][0]["seen"].isoformat() == "2024-05-01T10:00:00+00:00"
    assert (rows["b"]["context"], rows["b"]["tags"]) == (None, [])
    # The file keeps a missing list as null (what Spark and Iceberg Java read); pyiceberg
    # 0.12's scan turns a null list of structs into [] on the way out.
    (path,) = [file.path for file in written]
    assert pq.read_table(path.removeprefix("file://")).column("items").to_pylist()[1] is None
    assert type_text(table.schema().find_field("items").field_type) == (
        "list<struct<sku: required string, price: decimal(9, 2), seen: timestamptz>>"
    )


BAD = {
    "a struct that is a string": (
        {"id": "c", "context": "ios"},
        "field 'context': expected struct, got string \"ios\"",
        "context",
    ),
    "a required nested field missing": (
        {"id": "c", "context": {"device": {"version": 1}}},
        "required field 'context.device.os' is missing",
        "context.device.os",
    ),
    "a nested wrong type": (
        {"id": "c", "context": {"device": {"os": "ios", "version": "17"}}},
        "field 'context.device.version': expected int, got string \"17\"",
        "context.device.version",
    ),
    "a list that is an object": (
        {"id": "c", "tags": {"a": 1}},
        "field 'tags': expected list, got object",
        "tags",
    ),
    "a bad item": (
        {"id": "c", "tags": ["ok", 5]},
        "field 'tags[]': expected string, got integer 5",
        "tags[]",
    ),
    "a bad field of an item": (
        {"id": "c", "items": [{"sku": "s", "price": "1.234"}]},
        "field 'items[].price': value \"1.234\" has more than 2 fraction digits",
        "items[].price",
    ),
}


@pytest.mark.parametrize(("record", "message", "where"), BAD.values(), ids=BAD.keys())
def test_a_bad_nested_value_quarantines_the_record_naming_its_path(record, message, where):
    parsed, quarantine = _parse(FULL, record)
    assert parsed.column("id").to_pylist() == ["a"]
    (row,) = quarantine.to_pylist()
    assert row["error"].startswith(message), row["error"]
    assert row["error_field"] == where


def test_nested_declarations_are_checked():
    with pytest.raises(EventSchemaError, match="a struct declares its fields"):
        EventField("x", "struct")
    with pytest.raises(EventSchemaError, match="a list declares its items"):
        EventField("x", "list")
    with pytest.raises(EventSchemaError, match="only a struct has fields"):
        EventField("x", "string", fields=(EventField("y", "string"),))
    with pytest.raises(EventSchemaError, match=r"fields\[0\].fields\[1\]: unknown key 'typ'"):
        EventSchema.from_dict(
            {
                "name": "s",
                "fields": [
                    {
                        "name": "a",
                        "type": "struct",
                        "fields": [{"name": "b", "type": "int"}, {"name": "c", "typ": "int"}],
                    }
                ],
            }
        )
    assert EventField("x", "list<decimal(5, 1)>").items == EventField("element", "decimal(5,1)")


def test_a_nested_schema_survives_the_trip_to_the_executors():
    assert EventSchema.from_dict(SCHEMA.to_dict()) == SCHEMA
