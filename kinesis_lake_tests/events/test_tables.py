"""The derived tables' Iceberg schemas, on a real pyiceberg SqlCatalog."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import DayTransform
from pyiceberg.types import DoubleType, LongType, StringType, TimestamptzType

from kinesis_lake.events.parse import parse_events
from kinesis_lake.events.schema import EventField, EventSchema
from kinesis_lake.events.tables import (
    aggregate_arrow_schema,
    aggregate_partition_spec,
    aggregate_table_schema,
    parsed_arrow_schema,
    parsed_partition_spec,
    parsed_table_schema,
    quarantine_partition_spec,
    quarantine_table_schema,
)
from kinesis_lake_tests.events.raw import (
    ALL_TYPES,
    GOOD,
    NOW,
    SCHEMAS,
    demo_schema,
    load_event_schema,
    raw_table,
)

PIPELINE_COLUMNS = ["stream_name", "shard_id", "sequence_number", "sub_sequence_number"]


def _ids(schema: EventSchema) -> dict[str, int]:
    return {field.name: field.field_id for field in parsed_table_schema(schema).fields}


def test_parsed_schema_layout_and_ids() -> None:
    iceberg = parsed_table_schema(demo_schema())
    assert iceberg.column_names == [
        *PIPELINE_COLUMNS,
        "approximate_arrival_timestamp",
        *(field.name for field in demo_schema().fields),
        "event_timestamp",
        "parsed_at",
    ]
    assert [f.name for f in iceberg.fields if f.required] == [
        *PIPELINE_COLUMNS,
        "event_id",
        "event_type",
        "event_time",
        "event_timestamp",
    ]
    assert iceberg.find_field("amount").field_type == DoubleType()
    assert iceberg.find_field("event_timestamp").field_type == TimestamptzType()
    assert _ids(demo_schema()) == _ids(load_event_schema(SCHEMAS / "events.yaml"))
    assert _ids(demo_schema())["event_id"] == 8


def test_appending_a_yaml_field_keeps_every_existing_id() -> None:
    old = demo_schema()
    new = replace(old, fields=(*old.fields, EventField("key4", "string")))
    old_ids, new_ids = _ids(old), _ids(new)
    assert {name: new_ids[name] for name in old_ids} == old_ids
    assert new_ids["key4"] == max(old_ids.values()) + 1


def test_partition_specs_follow_names() -> None:
    for spec, schema, column in [
        (parsed_partition_spec, parsed_table_schema(demo_schema()), "event_timestamp"),
        (quarantine_partition_spec, quarantine_table_schema(), "approximate_arrival_timestamp"),
        (aggregate_partition_spec, aggregate_table_schema(), "window_start"),
    ]:
        (field,) = spec(schema).fields
        assert field.source_id == schema.find_field(column).field_id
        assert field.transform == DayTransform()
        assert field.name == f"{column}_day"


def test_aggregate_identifier_fields() -> None:
    schema = aggregate_table_schema()
    assert schema.identifier_field_names() == {"window_start", "event_type"}
    assert schema.find_field("event_count").field_type == LongType()


def _create(
    catalog: SqlCatalog, name: str, schema: Schema, spec: Callable[[Schema], PartitionSpec]
) -> Table:
    """Create through the catalog, which renumbers ids: specs must still resolve by name."""
    return catalog.create_table(f"lake.{name}", schema=schema, partition_spec=spec(schema))


def test_parse_outputs_append_to_created_tables(catalog: SqlCatalog) -> None:
    payloads = [
        json.dumps(p).encode()
        for p in [
            {
                "s": "x",
                "l": 1,
                "i": 2,
                "d": 3.5,
                "f": 4.5,
                "b": True,
                "t": "2024-05-01T10:00:00Z",
                "dt": "2024-05-01",
                "m": "1.25",
            },
            {"l": 1.5},
        ]
    ]
    parsed, quarantine = parse_events(raw_table(payloads), ALL_TYPES, now=NOW)
    tables = {
        "parsed": _create(catalog, "parsed", parsed_table_schema(ALL_TYPES), parsed_partition_spec),
        "quarantine": _create(
            catalog, "quarantine", quarantine_table_schema(), quarantine_partition_spec
        ),
        "aggregate": _create(
            catalog, "aggregate", aggregate_table_schema(), aggregate_partition_spec
        ),
    }
    outputs = {
        "parsed": parsed,
        "quarantine": quarantine,
        "aggregate": pa.Table.from_pylist(
            [{"window_start": NOW, "event_type": "click", "event_count": 2, "updated_at": NOW}],
            schema=aggregate_arrow_schema(),
        ),
    }
    for name, table in tables.items():
        table.append(outputs[name])
        assert table.scan().to_arrow().to_pylist() == outputs[name].to_pylist()
    assert tables["aggregate"].schema().identifier_field_names() == {"window_start", "event_type"}


def test_new_optional_yaml_field_evolves_by_union_by_name(
    catalog: SqlCatalog, tmp_path: Path
) -> None:
    old = demo_schema()
    table = _create(catalog, "events", parsed_table_schema(old), parsed_partition_spec)
    table.append(parse_events(raw_table([json.dumps(GOOD).encode()]), old, now=NOW)[0])

    yaml = (
        (SCHEMAS / "events.yaml")
        .read_text()
        .replace(
            "  - {name: key3, type: string}\n",
            "  - {name: key3, type: string}\n  - {name: country, type: string}\n",
        )
    )
    (tmp_path / "events_v2.yaml").write_text(yaml)
    new = load_event_schema(tmp_path / "events_v2.yaml")

    with table.update_schema() as update:
        update.union_by_name(parsed_table_schema(new))
    evolved = table.schema()
    assert evolved.column_names == [*parsed_table_schema(old).column_names, "country"]
    assert evolved.find_field("country").field_type == StringType()
    assert not evolved.find_field("country").required

    payload = json.dumps({**GOOD, "event_id": "e2", "country": "NL"}).encode()
    table.append(parse_events(raw_table([payload]), new, now=NOW)[0])
    rows = table.scan().to_arrow().sort_by("event_id").select(["event_id", "country"])
    assert rows.to_pylist() == [
        {"event_id": "e1", "country": None},
        {"event_id": "e2", "country": "NL"},
    ]


def test_promotions_evolve_and_incompatible_changes_are_refused(catalog: SqlCatalog) -> None:
    old = EventSchema("s", [EventField("n", "int"), EventField("x", "float")])
    new = EventSchema("s", [EventField("n", "long"), EventField("x", "double")])
    table = _create(catalog, "promoted", parsed_table_schema(old), parsed_partition_spec)
    with table.update_schema() as update:
        update.union_by_name(parsed_table_schema(new))
    assert parsed_arrow_schema(new).field("n").type == pa.int64()
    assert table.schema().find_field("n").field_type == LongType()
    assert table.schema().find_field("x").field_type == DoubleType()

    required = replace(new, fields=(*new.fields, EventField("y", "string", required=True)))
    with pytest.raises(ValueError, match="required"), table.update_schema() as update:
        update.union_by_name(parsed_table_schema(required))
