"""Declarations evolve tables in place: new optional fields, Iceberg's widenings (int to long,
float to double, wider decimals), new nested fields; anything else is refused by name."""

from __future__ import annotations

import json

import pytest

from kinesis_lake.events.parse import parse_events
from kinesis_lake.events.schema import EventSchema
from kinesis_lake.events.tables import parsed_table_schema
from kinesis_lake.iceberg.commit import commit_files
from kinesis_lake.iceberg.data_files import TableWriteTarget, write_data_files
from kinesis_lake.iceberg.tables import SchemaEvolutionError, ensure_table, type_text
from kinesis_lake_tests.events.raw import NOW, raw_table

IDENTIFIER = "lake.orders"


def _schema(*fields: dict) -> EventSchema:
    return EventSchema.from_dict(
        {"name": "orders", "fields": [{"name": "id", "type": "string"}, *fields]}
    )


V1 = _schema(
    {"name": "quantity", "type": "int"},
    {"name": "ratio", "type": "float"},
    {"name": "price", "type": "decimal(9,2)"},
    {"name": "shipping", "type": "struct", "fields": [{"name": "days", "type": "int"}]},
)
V2 = _schema(
    {"name": "quantity", "type": "long"},
    {"name": "ratio", "type": "double"},
    {"name": "price", "type": "decimal(18,2)"},
    {
        "name": "shipping",
        "type": "struct",
        "fields": [{"name": "days", "type": "long"}, {"name": "carrier", "type": "string"}],
    },
    {"name": "coupon", "type": "string"},
)


def _write(table, schema: EventSchema, *records: dict) -> None:
    parsed, quarantine = parse_events(
        raw_table([json.dumps(r).encode() for r in records]), schema, now=NOW
    )
    assert quarantine.num_rows == 0, quarantine.to_pylist()
    written = write_data_files(
        TableWriteTarget.from_table(table),
        parsed.to_batches(),
        file_prefix=f"t{len(table.metadata.snapshots)}",
    )
    commit_files(table, written, writer_id="test", batch_id=len(table.metadata.snapshots))


def test_widenings_and_new_fields_apply_to_a_table_with_data_without_rewriting_it(catalog):
    table = ensure_table(catalog, IDENTIFIER, parsed_table_schema(V1))
    _write(
        table,
        V1,
        {"id": "a", "quantity": 2, "ratio": 0.5, "price": "9.99", "shipping": {"days": 3}},
    )
    files_before = {task.file.file_path for task in table.scan().plan_files()}

    table = ensure_table(catalog, IDENTIFIER, parsed_table_schema(V2))
    _write(
        table,
        V2,
        {
            "id": "b",
            "quantity": 2**40,
            "ratio": 1e300,
            "price": "1234567890.12",
            "shipping": {"days": 2**40, "carrier": "ups"},
            "coupon": "X",
        },
    )

    columns = {f.name: type_text(f.field_type) for f in table.schema().fields}
    assert (columns["quantity"], columns["ratio"], columns["price"]) == (
        "long",
        "double",
        "decimal(18, 2)",
    )
    assert columns["shipping"] == "struct<days: long, carrier: string>"
    assert {task.file.file_path for task in table.scan().plan_files()} >= files_before
    rows = {r["id"]: r for r in table.scan().to_arrow().to_pylist()}
    assert (rows["a"]["quantity"], str(rows["a"]["price"]), rows["a"]["coupon"]) == (
        2,
        "9.99",
        None,
    )
    assert rows["a"]["shipping"] == {"days": 3, "carrier": None}
    assert rows["b"]["quantity"] == 2**40 and rows["b"]["shipping"]["carrier"] == "ups"


def test_an_incompatible_change_names_the_table_the_field_and_the_way_out(catalog):
    ensure_table(catalog, IDENTIFIER, parsed_table_schema(V1))
    narrowed = _schema(
        {"name": "quantity", "type": "string"},
        {"name": "ratio", "type": "float"},
        {"name": "price", "type": "decimal(9,3)"},
        {"name": "shipping", "type": "struct", "fields": [{"name": "days", "type": "int"}]},
    )

    with pytest.raises(SchemaEvolutionError) as caught:
        ensure_table(catalog, IDENTIFIER, parsed_table_schema(narrowed))

    message = str(caught.value)
    assert message.startswith(f"Table {IDENTIFIER} cannot be evolved to the declared schema")
    assert "column 'quantity' is int in the table and string in the declared schema" in message
    assert "column 'price' is decimal(9, 2) in the table and decimal(9, 3)" in message
    assert "Keep the type int, or add a new column with the new type and migrate" in message
