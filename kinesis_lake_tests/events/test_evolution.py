"""check_evolution: which schema changes the derived tables can absorb in place."""

from __future__ import annotations

from dataclasses import replace

from kinesis_lake.events.schema import EventField, EventSchema, check_evolution
from kinesis_lake_tests.events.raw import demo_schema

BASE = EventSchema(
    "s",
    (
        EventField("id", "string", required=True),
        EventField("kind", "string", required=True),
        EventField("at", "timestamp", required=True),
        EventField("count", "int"),
        EventField("ratio", "float"),
        EventField("label", "string"),
    ),
    event_key="id",
    event_time_field="at",
    event_type_field="kind",
)


def _with_fields(*fields: EventField) -> EventSchema:
    return replace(BASE, fields=fields)


def test_identical_schema_is_compatible() -> None:
    assert check_evolution(demo_schema(), demo_schema()) == []


def test_compatible_changes() -> None:
    new = _with_fields(
        EventField("label", "string"),  # reordered: columns are matched by name
        *BASE.fields[:3],
        EventField("count", "long"),
        EventField("ratio", "double"),
        EventField("country", "string"),
    )
    assert check_evolution(BASE, new) == []


def test_new_optional_field_in_demo_yaml_is_compatible() -> None:
    old = demo_schema()
    new = replace(old, fields=(*old.fields, EventField("key4", "string")))
    assert check_evolution(old, new) == []


def test_incompatible_changes_are_all_reported() -> None:
    new = EventSchema(
        "renamed",
        (
            EventField("id", "long", required=True),
            EventField("kind", "string", required=True),
            EventField("at", "timestamp", required=True),
            EventField("count", "double"),
            EventField("ratio", "float", required=True),
            EventField("other_id", "string", required=True),
        ),
        event_key="other_id",
        event_time_field="at",
        event_type_field=None,
    )
    assert check_evolution(BASE, new) == [
        "schema name changed from 's' to 'renamed'",
        "field 'id' changed type from string to long; "
        "only int -> long and float -> double are compatible",
        "field 'count' changed type from int to double; "
        "only int -> long and float -> double are compatible",
        "field 'ratio' changed from optional to required; "
        "existing rows and readers rely on the old nullability",
        "field 'label' was removed",
        "new field 'other_id' is required; existing rows have no value for it, declare it optional",
        "event_key changed from 'id' to 'other_id'; it would change the meaning of existing rows",
        "event_type_field changed from 'kind' to None; "
        "it would change the meaning of existing rows",
    ]


def test_narrowing_and_relaxing_are_incompatible() -> None:
    old = _with_fields(*BASE.fields[:3], EventField("count", "long"), EventField("ratio", "double"))
    new = _with_fields(
        BASE.fields[0],
        EventField("kind", "string", required=True),
        EventField("at", "timestamp", required=True),
        EventField("count", "int"),
        EventField("ratio", "float"),
    )
    assert check_evolution(old, new) == [
        "field 'count' changed type from long to int; "
        "only int -> long and float -> double are compatible",
        "field 'ratio' changed type from double to float; "
        "only int -> long and float -> double are compatible",
    ]
    untyped = replace(BASE, event_type_field=None)
    relaxed = replace(
        untyped, fields=(BASE.fields[0], EventField("kind", "string"), *BASE.fields[2:])
    )
    assert check_evolution(untyped, relaxed) == [
        "field 'kind' changed from required to optional; "
        "existing rows and readers rely on the old nullability"
    ]


def test_decimal_precision_change_is_incompatible() -> None:
    old = EventSchema("s", [EventField("amount", "decimal(10,2)")])
    new = EventSchema("s", [EventField("amount", "decimal(12,2)")])
    assert check_evolution(old, new) == [
        "field 'amount' changed type from decimal(10,2) to decimal(12,2); "
        "only int -> long and float -> double are compatible"
    ]
