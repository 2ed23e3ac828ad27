"""ensure_table: create, evolve in place, or refuse with an actionable message."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import DayTransform
from pyiceberg.types import (
    IntegerType,
    LongType,
    NestedField,
    StringType,
    StructType,
    TimestamptzType,
)

from kinesis_lake.iceberg.tables import SchemaEvolutionError, ensure_table, evolved_schema

V1 = Schema(
    NestedField(1, "id", StringType(), required=True),
    NestedField(2, "at", TimestamptzType(), required=True),
    NestedField(3, "count", IntegerType(), required=False),
)
SPEC = PartitionSpec(PartitionField(2, 1000, DayTransform(), "at_day"))


def test_creates_a_missing_table_with_spec_and_properties(catalog: Catalog) -> None:
    table = ensure_table(catalog, "lake.t", V1, partition_spec=SPEC, properties={"a": "1"})

    assert [f.name for f in table.schema().fields] == ["id", "at", "count"]
    assert [(f.name, str(f.transform)) for f in table.spec().fields] == [("at_day", "day")]
    assert table.properties["a"] == "1"


def test_evolves_by_adding_columns_and_promoting_types(catalog: Catalog) -> None:
    ensure_table(catalog, "lake.t", V1, properties={"a": "1"})
    table = catalog.load_table("lake.t")
    table.append(
        pa.table(
            {"id": ["x"], "at": pa.array([0], pa.timestamp("us", tz="UTC")), "count": [1]},
            schema=pa.schema(
                [
                    pa.field("id", pa.string(), nullable=False),
                    pa.field("at", pa.timestamp("us", tz="UTC"), nullable=False),
                    pa.field("count", pa.int32()),
                ]
            ),
        )
    )
    with table.transaction() as tx:
        tx.set_properties({"a": "changed-by-user"})
    v2 = Schema(
        NestedField(1, "id", StringType(), required=True),
        NestedField(2, "at", TimestamptzType(), required=True),
        NestedField(3, "count", LongType(), required=False),
        NestedField(4, "label", StringType(), required=False),
        NestedField(5, "ctx", StructType(NestedField(6, "ip", StringType(), required=True))),
    )

    evolved = ensure_table(catalog, "lake.t", v2, properties={"a": "1", "b": "2"})

    fields = {f.name: f for f in evolved.schema().fields}
    assert list(fields) == ["id", "at", "count", "label", "ctx"]
    assert fields["count"].field_type == LongType()
    assert evolved.properties["a"] == "changed-by-user"
    assert evolved.properties["b"] == "2"
    # Metadata-only: the old file is still the only one, its rows read the new column as null.
    rows = evolved.scan().to_arrow().to_pylist()
    assert rows == [{"id": "x", "at": rows[0]["at"], "count": 1, "label": None, "ctx": None}]
    assert len(list(evolved.scan().plan_files())) == 1


def test_same_schema_again_commits_nothing(catalog: Catalog) -> None:
    first = ensure_table(catalog, "lake.t", V1, properties={"a": "1"})
    again = ensure_table(catalog, "lake.t", V1, properties={"a": "1"})
    assert again.metadata_location == first.metadata_location


def test_narrower_declared_type_keeps_the_wider_column(catalog: Catalog) -> None:
    wide = Schema(*V1.fields[:2], NestedField(3, "count", LongType(), required=False))
    ensure_table(catalog, "lake.t", wide)
    table = ensure_table(catalog, "lake.t", V1)
    assert table.schema().find_field("count").field_type == LongType()


def test_the_evolved_schema_is_what_ensure_table_then_commits_and_commits_nothing(
    catalog: Catalog,
) -> None:
    """A fresh read takes the schema the next refresh will give the table from
    ``evolved_schema``: a new column declared between old ones goes last, a widened type is
    the wider, a column the declaration dropped stays; ids included. And the table is
    unchanged until ``ensure_table`` runs."""
    table = ensure_table(catalog, "lake.t", V1)
    declared = Schema(
        V1.fields[0],
        NestedField(4, "label", StringType(), required=False),
        V1.fields[1],
    )
    widened = Schema(*V1.fields[:2], NestedField(3, "count", LongType(), required=False))

    expected = evolved_schema(table, declared)
    assert catalog.load_table("lake.t").metadata_location == table.metadata_location
    assert [(f.name, f.field_type) for f in expected.fields] == [
        ("id", StringType()),
        ("at", TimestamptzType()),
        ("count", IntegerType()),
        ("label", StringType()),
    ]
    assert ensure_table(catalog, "lake.t", declared).schema() == expected
    evolved = catalog.load_table("lake.t")
    assert evolved_schema(evolved, widened).find_field("count").field_type == LongType()
    assert evolved_schema(evolved, widened) == ensure_table(catalog, "lake.t", widened).schema()
    with pytest.raises(SchemaEvolutionError, match=r"lake\.t cannot be evolved"):
        evolved_schema(evolved, Schema(V1.fields[0], V1.fields[2]))


@pytest.mark.parametrize(
    ("declared", "expected"),
    [
        (
            Schema(*V1.fields[:2], NestedField(3, "count", StringType(), required=False)),
            ["lake.t", "'count'", "int", "string", "cannot promote"],
        ),
        (
            Schema(V1.fields[0], V1.fields[2]),
            ["lake.t", "required column 'at'", "timestamptz", "missing"],
        ),
        (
            Schema(*V1.fields[:2], NestedField(3, "count", IntegerType(), required=True)),
            ["lake.t", "'count'", "optional in the table but required", "Declare it optional"],
        ),
        (
            Schema(*V1.fields, NestedField(4, "new", StringType(), required=True)),
            ["lake.t", "new column 'new'", "required", "Declare it optional"],
        ),
    ],
    ids=["type-change", "required-removed", "made-required", "new-required"],
)
def test_incompatible_changes_are_refused_with_a_clear_message(
    catalog: Catalog, declared: Schema, expected: list[str]
) -> None:
    ensure_table(catalog, "lake.t", V1)

    with pytest.raises(SchemaEvolutionError) as error:
        ensure_table(catalog, "lake.t", declared)

    for fragment in expected:
        assert fragment in str(error.value)
    assert catalog.load_table("lake.t").schema() == ensure_table(catalog, "lake.t", V1).schema()
