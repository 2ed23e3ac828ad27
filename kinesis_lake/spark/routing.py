"""Routing raw records to their tables on Spark's executors, in one pass per slice of raw.

Each executor task parses its Arrow batches with the declaration's own code
(:func:`kinesis_lake.events.parse.route_events`) and emits one union row per output row:
the target's name in :data:`TARGET`, a declared table's columns in that table's struct
column, the quarantine's columns at the top. The driver then splits the union by target
(:func:`declared_rows`, :func:`quarantined_rows`), so a slice is read and parsed once
however many tables it feeds. It lives in the Spark layer because it is executor code:
the worker daemon preloads this module, and the pipeline jobs compose it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from kinesis_lake.events.declaration import LakeDeclaration
from kinesis_lake.events.parse import route_events
from kinesis_lake.events.tables import parsed_arrow_schema, quarantine_arrow_schema

TARGET = "__target"
"""Column of a routed row: the name of the table it goes to."""

QUARANTINE = "__quarantine"
"""The quarantine's name as a target; no declared table has it."""


def route_on_executors(raw_rows: DataFrame, declaration: LakeDeclaration) -> DataFrame:
    """Route and parse once: one row per output row, its target named in :data:`TARGET`, a
    declared table's columns in that table's struct column, quarantine columns at the top."""
    declared = declaration.to_dict()
    union = _union_schema(declaration)

    def route_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        lake = LakeDeclaration.from_dict(declared)
        for batch in batches:
            routed = route_events(batch, lake)
            for position, table in enumerate(lake.tables):
                rows = routed.tables[table.name]
                yield from _to_union(rows, union, table.name, _struct(position)).to_batches()
            yield from _to_union(routed.quarantine, union, QUARANTINE, None).to_batches()

    return raw_rows.mapInArrow(route_partition, from_arrow_schema(union))


def declared_rows(routed: DataFrame, declaration: LakeDeclaration, name: str) -> DataFrame:
    """The rows ``routed`` sends to declared table ``name``, in that table's columns."""
    position = declaration.names.index(name)
    return routed.filter(F.col(TARGET) == name).select(f"{_struct(position)}.*")


def quarantined_rows(routed: DataFrame) -> DataFrame:
    """The rows ``routed`` sends to the quarantine, in the quarantine's columns."""
    columns = quarantine_arrow_schema().names
    return routed.filter(F.col(TARGET) == QUARANTINE).select(*columns)


def _struct(position: int) -> str:
    return f"__table_{position}"


def _nullable(field: pa.Field) -> pa.Field:
    """``field`` with every level nullable: a row of one target leaves the others' columns
    null, and Spark's Arrow hand-over checks no nullability anyway (the sink restores it)."""
    arrow = field.type
    if pa.types.is_struct(arrow):
        arrow = pa.struct([_nullable(child) for child in arrow])
    elif pa.types.is_list(arrow):
        arrow = pa.list_(_nullable(arrow.value_field))
    elif pa.types.is_map(arrow):  # keys stay required: Arrow's maps have no null keys
        arrow = pa.map_(arrow.key_field, _nullable(arrow.item_field))
    return field.with_type(arrow).with_nullable(True)


def _union_schema(declaration: LakeDeclaration) -> pa.Schema:
    return pa.schema(
        [
            pa.field(TARGET, pa.string(), nullable=False),
            *(_nullable(field) for field in quarantine_arrow_schema()),
            *(
                pa.field(
                    _struct(position),
                    pa.struct([_nullable(f) for f in parsed_arrow_schema(table.schema)]),
                )
                for position, table in enumerate(declaration.tables)
            ),
        ]
    )


def _to_union(rows: pa.Table, union: pa.Schema, target: str, struct: str | None) -> pa.Table:
    size = rows.num_rows
    columns = []
    for field in union:
        if field.name == TARGET:
            columns.append(pa.array([target] * size, pa.string()))
        elif field.name == struct:
            arrays = [rows.column(f.name).combine_chunks().cast(f.type) for f in field.type]
            columns.append(pa.StructArray.from_arrays(arrays, fields=list(field.type)))
        elif struct is None and field.name in rows.column_names:
            columns.append(rows.column(field.name).cast(field.type))
        else:
            columns.append(pa.nulls(size, field.type))
    return pa.Table.from_arrays(columns, schema=union)
