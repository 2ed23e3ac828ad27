"""The raw table's definition: schema, Arrow twin, partitioning, sort order, properties."""

from __future__ import annotations

from pyiceberg.catalog import Catalog

from kinesis_lake.iceberg.arrow_schema import table_arrow_schema
from kinesis_lake.iceberg.raw_table import (
    RAW_ARROW_SCHEMA,
    RAW_SCHEMA,
    RAW_TABLE_PROPERTIES,
    ensure_raw_table,
)


def test_arrow_schema_mirrors_the_iceberg_schema_exactly() -> None:
    derived = table_arrow_schema(RAW_SCHEMA)
    assert [(f.name, f.type, f.nullable) for f in RAW_ARROW_SCHEMA] == [
        (f.name, f.type, f.nullable) for f in derived
    ]


def test_raw_table_definition(catalog: Catalog) -> None:
    table = ensure_raw_table(catalog, "lake.raw")
    schema = table.schema()

    assert [f.name for f in schema.fields] == [
        "stream_name",
        "shard_id",
        "sequence_number",
        "sub_sequence_number",
        "partition_key",
        "approximate_arrival_timestamp",
        "data",
        "aggregated",
        "source_error",
        "ingested_at",
        "batch_id",
    ]
    assert [f.name for f in schema.fields if not f.required] == ["source_error"]
    assert [schema.find_column_name(i) for i in schema.identifier_field_ids] == [
        "stream_name",
        "shard_id",
        "sequence_number",
        "sub_sequence_number",
    ]
    assert [
        (f.name, schema.find_column_name(f.source_id), str(f.transform))
        for f in table.spec().fields
    ] == [("arrival_day", "approximate_arrival_timestamp", "day")]
    assert [schema.find_column_name(f.source_id) for f in table.sort_order().fields] == [
        "shard_id",
        "sequence_number",
        "sub_sequence_number",
    ]
    assert RAW_TABLE_PROPERTIES.items() <= table.properties.items()
