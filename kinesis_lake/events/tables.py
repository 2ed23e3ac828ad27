"""Iceberg and Arrow schemas of the derived tables: parsed events, quarantine and aggregate.

Field ids are fixed for the pipeline columns and assigned in declared order after them for the
event fields, so they depend only on the ``EventSchema`` and an appended YAML field never renumbers
an existing column. Evolution itself matches columns by name (``union_by_name``), so a new optional
field becomes a new column at the end of the existing table whatever its id here; writers must
therefore write by name, not by position.

Each Arrow schema is the exact shape ``parse.py`` produces and mirrors its Iceberg schema
(timestamptz <-> ``timestamp[us, tz=UTC]``, required <-> non-nullable).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import (
    BucketTransform,
    DayTransform,
    HourTransform,
    IdentityTransform,
    MonthTransform,
    Transform,
    TruncateTransform,
    YearTransform,
)
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestamptzType,
)

from kinesis_lake.events.columns import (
    ARRIVAL_TIMESTAMP,
    ERROR,
    ERROR_FIELD,
    EVENT_COUNT,
    EVENT_TIMESTAMP,
    EVENT_TYPE,
    PARSED_AT,
    PAYLOAD,
    QUARANTINED_AT,
    RESOLVED_AT,
    RESOLVED_INTO,
    SEQUENCE_NUMBER,
    SHARD_ID,
    STREAM_NAME,
    SUB_SEQUENCE_NUMBER,
    TARGET_TABLE,
    UPDATED_AT,
    WINDOW_START,
)
from kinesis_lake.events.declaration import DAILY, PartitionDeclaration
from kinesis_lake.events.field_types import TIMESTAMP_ARROW_TYPE, decimal_params
from kinesis_lake.events.schema import EventField, EventSchema

_ICEBERG_TYPES: dict[str, IcebergType] = {
    "string": StringType(),
    "long": LongType(),
    "int": IntegerType(),
    "double": DoubleType(),
    "float": FloatType(),
    "boolean": BooleanType(),
    "timestamp": TimestamptzType(),
    "date": DateType(),
}

# Iceberg requires partition field ids to start at 1000.
_FIRST_PARTITION_FIELD_ID = 1000

# Parsed table: fixed ids for the pipeline columns, then the event fields from this id on.
_EVENT_TIMESTAMP_ID = 6
_PARSED_AT_ID = 7
_FIRST_EVENT_FIELD_ID = 8


# Ids of fields inside structs and lists: far above the top-level ones, in declared order.
_FIRST_NESTED_FIELD_ID = 10_000


def _iceberg_type(field: EventField, nested_ids: Iterator[int]) -> IcebergType:
    if field.type == "struct":
        return StructType(
            *(
                NestedField(
                    next(nested_ids), child.name, _iceberg_type(child, nested_ids), child.required
                )
                for child in field.fields
            )
        )
    if field.items is not None:
        element_id = next(nested_ids)
        return ListType(element_id, _iceberg_type(field.items, nested_ids), field.items.required)
    if field.values is not None:
        key_id, value_id = next(nested_ids), next(nested_ids)
        value_type = _iceberg_type(field.values, nested_ids)
        return MapType(key_id, StringType(), value_id, value_type, field.values.required)
    params = decimal_params(field.type)
    return DecimalType(*params) if params else _ICEBERG_TYPES[field.type]


def _identity_fields() -> list[NestedField]:
    """The Kinesis record identity (ids 1-4) and arrival time (id 5), shared by both tables."""
    return [
        NestedField(1, STREAM_NAME, StringType(), required=True),
        NestedField(2, SHARD_ID, StringType(), required=True),
        # Kinesis sequence numbers are decimal strings of up to 129 digits: too wide for any
        # Iceberg number type.
        NestedField(3, SEQUENCE_NUMBER, StringType(), required=True),
        NestedField(4, SUB_SEQUENCE_NUMBER, LongType(), required=True),
        NestedField(5, ARRIVAL_TIMESTAMP, TimestamptzType(), required=False),
    ]


def _identity_arrow_fields() -> list[pa.Field]:
    return [
        pa.field(STREAM_NAME, pa.string(), nullable=False),
        pa.field(SHARD_ID, pa.string(), nullable=False),
        pa.field(SEQUENCE_NUMBER, pa.string(), nullable=False),
        pa.field(SUB_SEQUENCE_NUMBER, pa.int64(), nullable=False),
        pa.field(ARRIVAL_TIMESTAMP, TIMESTAMP_ARROW_TYPE, nullable=True),
    ]


def _day_spec(schema: Schema, column: str) -> PartitionSpec:
    """Partition by day of ``column``, resolved by name so it also fits catalog-renumbered
    schemas (``create_table`` assigns fresh ids)."""
    return PartitionSpec(
        PartitionField(
            source_id=schema.find_field(column).field_id,
            field_id=_FIRST_PARTITION_FIELD_ID,
            transform=DayTransform(),
            name=f"{column}_day",
        )
    )


def parsed_table_schema(event_schema: EventSchema) -> Schema:
    """Identity, arrival time, the declared fields in order, event time and parse time."""
    nested_ids = itertools.count(_FIRST_NESTED_FIELD_ID)
    event_fields = [
        NestedField(
            _FIRST_EVENT_FIELD_ID + position,
            field.name,
            _iceberg_type(field, nested_ids),
            required=field.required,
        )
        for position, field in enumerate(event_schema.fields)
    ]
    return Schema(
        *_identity_fields(),
        *event_fields,
        NestedField(_EVENT_TIMESTAMP_ID, EVENT_TIMESTAMP, TimestamptzType(), required=True),
        NestedField(_PARSED_AT_ID, PARSED_AT, TimestamptzType(), required=False),
    )


_TRANSFORMS: dict[str, Callable[[int | None], Transform[Any, Any]]] = {
    "identity": lambda _: IdentityTransform(),
    "year": lambda _: YearTransform(),
    "month": lambda _: MonthTransform(),
    "day": lambda _: DayTransform(),
    "hour": lambda _: HourTransform(),
    "truncate": lambda width: TruncateTransform(width or 1),
    "bucket": lambda width: BucketTransform(width or 1),
}


def parsed_partition_spec(
    schema: Schema, partition: tuple[PartitionDeclaration, ...] = DAILY
) -> PartitionSpec:
    """The declared partitioning (default: days of event time, what time queries, dedup and
    the aggregate filter on), resolved by name like ``_day_spec``."""
    return PartitionSpec(
        *(
            PartitionField(
                source_id=schema.find_field(spec.field).field_id,
                field_id=_FIRST_PARTITION_FIELD_ID + position,
                transform=_TRANSFORMS[spec.transform](spec.width),
                name=spec.name,
            )
            for position, spec in enumerate(partition)
        )
    )


def parsed_arrow_schema(event_schema: EventSchema) -> pa.Schema:
    return pa.schema(
        [
            *_identity_arrow_fields(),
            *event_schema.arrow_schema(),
            pa.field(EVENT_TIMESTAMP, TIMESTAMP_ARROW_TYPE, nullable=False),
            pa.field(PARSED_AT, TIMESTAMP_ARROW_TYPE, nullable=True),
        ]
    )


def quarantine_table_schema() -> Schema:
    """Malformed records with their raw bytes, so they can be inspected and replayed."""
    return Schema(
        *_identity_fields(),
        NestedField(6, PAYLOAD, BinaryType(), required=False),
        NestedField(7, ERROR, StringType(), required=True),
        NestedField(8, ERROR_FIELD, StringType(), required=False),
        NestedField(9, QUARANTINED_AT, TimestamptzType(), required=False),
        NestedField(10, TARGET_TABLE, StringType(), required=False),
        NestedField(11, RESOLVED_AT, TimestamptzType(), required=False),
        NestedField(12, RESOLVED_INTO, StringType(), required=False),
    )


def quarantine_partition_spec(schema: Schema) -> PartitionSpec:
    """Daily partitions of arrival time: a malformed record may have no usable event time."""
    return _day_spec(schema, ARRIVAL_TIMESTAMP)


def quarantine_arrow_schema() -> pa.Schema:
    return pa.schema(
        [
            *_identity_arrow_fields(),
            pa.field(PAYLOAD, pa.binary(), nullable=True),
            pa.field(ERROR, pa.string(), nullable=False),
            pa.field(ERROR_FIELD, pa.string(), nullable=True),
            pa.field(QUARANTINED_AT, TIMESTAMP_ARROW_TYPE, nullable=True),
            pa.field(TARGET_TABLE, pa.string(), nullable=True),
            pa.field(RESOLVED_AT, TIMESTAMP_ARROW_TYPE, nullable=True),
            pa.field(RESOLVED_INTO, pa.string(), nullable=True),
        ]
    )


def aggregate_table_schema() -> Schema:
    """Event counts per minute and type; (window_start, event_type) identifies a row so a
    recomputed window can be upserted."""
    return Schema(
        NestedField(1, WINDOW_START, TimestamptzType(), required=True),
        NestedField(2, EVENT_TYPE, StringType(), required=True),
        NestedField(3, EVENT_COUNT, LongType(), required=True),
        NestedField(4, UPDATED_AT, TimestamptzType(), required=False),
        identifier_field_ids=[1, 2],
    )


def aggregate_partition_spec(schema: Schema) -> PartitionSpec:
    return _day_spec(schema, WINDOW_START)


def aggregate_arrow_schema() -> pa.Schema:
    return pa.schema(
        [
            pa.field(WINDOW_START, TIMESTAMP_ARROW_TYPE, nullable=False),
            pa.field(EVENT_TYPE, pa.string(), nullable=False),
            pa.field(EVENT_COUNT, pa.int64(), nullable=False),
            pa.field(UPDATED_AT, TIMESTAMP_ARROW_TYPE, nullable=True),
        ]
    )
