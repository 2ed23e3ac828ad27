"""The Arrow form of an Iceberg table's schema, and batches brought into it.

Every writer and reader of our tables meets Arrow through this module: the schema
(:func:`table_arrow_schema`) that data files are written with and that queries, the
incremental readers and the upsert build their tables in, and :func:`conform_batch`,
which fits a batch from a producer, a Spark task or a SQL query to it before it is written.

Invariant: A CONFORMED BATCH HAS EXACTLY THE TABLE'S COLUMNS, ORDER, TYPES AND
NULLABILITY, OR IT IS REFUSED. A column the table lacks, a null in a required column or
a value that does not fit its type without loss raises; only a missing optional column is
filled (with nulls), and a required child of an absent struct or list gets its type's zero,
which Iceberg reads as absent.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.schema import Schema


def table_arrow_schema(schema: Schema) -> pa.Schema:
    """The Arrow form of an Iceberg schema that writers and readers of our files share.

    Field ids are kept in the field metadata (engines resolve columns by id), and
    strings, binaries and lists use 32-bit offsets: Spark and most producers build those,
    and pyiceberg's 64-bit defaults would force a copy of every batch.
    """
    with_ids = schema_to_pyarrow(schema, include_field_ids=True)
    return pa.schema([_small_field(f) for f in with_ids], metadata=with_ids.metadata)


def _small_field(arrow_field: pa.Field) -> pa.Field:
    return arrow_field.with_type(_small_type(arrow_field.type))


def _small_type(arrow_type: pa.DataType) -> pa.DataType:
    if pa.types.is_large_string(arrow_type):
        return pa.string()
    if pa.types.is_large_binary(arrow_type):
        return pa.binary()
    if pa.types.is_map(arrow_type):
        return pa.map_(_small_field(arrow_type.key_field), _small_field(arrow_type.item_field))
    if pa.types.is_large_list(arrow_type) or pa.types.is_list(arrow_type):
        return pa.list_(_small_field(arrow_type.value_field))
    if pa.types.is_struct(arrow_type):
        return pa.struct([_small_field(f) for f in arrow_type])
    return arrow_type


def conform_batch(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` with exactly ``schema``'s columns, order, types and nullability.

    Raises:
        ValueError: a column is not in the table, a required column is missing or has
            nulls, or a value does not fit the column type without loss.
    """
    if batch.schema.equals(schema) and not any(_has_required_children(f.type) for f in schema):
        return batch
    extra = set(batch.schema.names) - set(schema.names)
    if extra:
        raise ValueError(
            f"Columns {sorted(extra)} are not in the table schema; add them to the table "
            "first (ensure_table evolves the schema)."
        )
    columns = []
    for target_field in schema:
        index = batch.schema.get_field_index(target_field.name)
        if index < 0:
            if not target_field.nullable:
                raise ValueError(f"Required column {target_field.name!r} is missing.")
            columns.append(pa.nulls(batch.num_rows, target_field.type))
            continue
        column = batch.column(index)
        if not target_field.nullable and column.null_count:
            raise ValueError(
                f"Required column {target_field.name!r} has {column.null_count} null values."
            )
        if column.type != target_field.type or _has_required_children(target_field.type):
            column = _conformed(column, target_field.type)
        columns.append(column)
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _zero(arrow: pa.DataType) -> pa.Scalar:
    if pa.types.is_struct(arrow):
        return pa.scalar({f.name: _zero(f.type).as_py() for f in arrow}, arrow)
    if pa.types.is_list(arrow) or pa.types.is_large_list(arrow):
        return pa.scalar([], arrow)
    if pa.types.is_string(arrow) or pa.types.is_large_string(arrow):
        return pa.scalar("", arrow)
    if pa.types.is_binary(arrow) or pa.types.is_large_binary(arrow):
        return pa.scalar(b"", arrow)
    if pa.types.is_boolean(arrow):
        return pa.scalar(False, arrow)
    return pa.scalar(0, pa.int64()).cast(arrow)  # numbers, decimals, dates, timestamps


def _has_required_children(arrow: pa.DataType) -> bool:
    if pa.types.is_struct(arrow):
        return any(not f.nullable or _has_required_children(f.type) for f in arrow)
    if pa.types.is_list(arrow):
        return not arrow.value_field.nullable or _has_required_children(arrow.value_type)
    return False


def _conformed(column: pa.Array, target: pa.DataType) -> pa.Array:
    """``column`` as ``target``, nested levels rebuilt child by child (matched by name).

    A row without a struct or list has nothing in that parent's required children, which
    Iceberg reads as absent (the parent is null); but Arrow refuses to cast nulls into, or
    write them to Parquet in, a non-nullable column at any depth. Any value will do there,
    so the type's zero goes in.
    """
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if pa.types.is_struct(target) and pa.types.is_struct(column.type):
        children = []
        for field in target:
            index = column.type.get_field_index(field.name)
            child = (
                _conformed(column.field(index), field.type)
                if index >= 0
                else pa.nulls(len(column), field.type)
            )
            if not field.nullable and child.null_count:
                child = pc.fill_null(child, _zero(field.type))
            children.append(child)
        return pa.StructArray.from_arrays(children, fields=list(target), mask=column.is_null())
    if pa.types.is_list(target) and pa.types.is_list(column.type):
        values = _conformed(column.values, target.value_type)
        if not target.value_field.nullable and values.null_count:
            values = pc.fill_null(values, _zero(target.value_type))
        offsets = column.offsets
        return pa.ListArray.from_arrays(offsets, values, type=target, mask=column.is_null())
    return column if column.type == target else column.cast(target)
