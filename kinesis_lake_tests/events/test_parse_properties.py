"""Property tests: over random mixes of good and bad records, no row is lost or duplicated,
and a row's fate does not depend on the rows batched with it."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kinesis_lake.events.parse import parse_events
from kinesis_lake.events.schema import EventSchema
from kinesis_lake.events.tables import parsed_arrow_schema, quarantine_arrow_schema
from kinesis_lake_tests.events.raw import ALL_TYPES, NOW, demo_schema, raw_table

OFFSETS = st.sampled_from(
    [UTC, timezone(timedelta(hours=2)), timezone(-timedelta(hours=5, minutes=30))]
)
JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
# Values each type accepts, plus near misses; any JSON value may also appear instead.
PLAUSIBLE = {
    "string": st.text(max_size=8),
    "long": st.integers(min_value=-(2**64), max_value=2**64),
    "int": st.integers(min_value=-(2**32), max_value=2**32),
    "double": st.floats(allow_nan=False, allow_infinity=False) | st.integers(),
    "float": st.floats(allow_nan=False, allow_infinity=False),
    "boolean": st.booleans(),
    "timestamp": st.datetimes(timezones=OFFSETS).map(datetime.isoformat)
    | st.datetimes().map(datetime.isoformat)
    | st.integers(min_value=-(10**15), max_value=10**15),
    "date": st.dates().map(str) | st.text(max_size=10),
    "decimal(10,2)": st.decimals(allow_nan=False, places=3).map(str)
    | st.floats(min_value=-1e9, max_value=1e9),
}


def _weighted(*choices: tuple[int, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """``one_of`` with weights (``one_of`` itself picks a branch uniformly)."""
    return st.sampled_from([s for weight, s in choices for _ in range(weight)]).flatmap(lambda s: s)


def _objects(schema: EventSchema, *, complete: bool) -> st.SearchStrategy[dict[str, Any]]:
    """Objects whose values are mostly plausible; ``complete`` ones have every required field."""
    values = {
        field.name: _weighted((4, PLAUSIBLE[field.type]), (1, JSON_VALUES))
        for field in schema.fields
    }
    required = {f.name: values.pop(f.name) for f in schema.fields if f.required and complete}
    return st.fixed_dictionaries(required, optional=values)


def _payloads(schema: EventSchema) -> st.SearchStrategy[bytes | None]:
    values = _weighted(
        (6, _objects(schema, complete=True)),
        (1, _objects(schema, complete=False)),
        (1, JSON_VALUES),
    )
    return _weighted(
        (8, values.map(lambda value: json.dumps(value).encode())),
        (1, st.binary(max_size=12)),
        (1, st.none()),
    )


def _raw(schema: EventSchema) -> st.SearchStrategy[pa.Table]:
    rows = st.lists(
        st.tuples(_payloads(schema), _weighted((4, st.none()), (1, st.text(max_size=5)))),
        max_size=25,
    )
    return rows.map(
        lambda rows: raw_table(
            [payload for payload, _ in rows], source_errors=[error for _, error in rows]
        )
    )


def _outcomes(raw: pa.Table, schema: EventSchema) -> dict[str, Any]:
    """Per sequence number: the parsed row (minus parsed_at) or the (error, error_field)."""
    parsed, quarantine = parse_events(raw, schema, now=NOW)
    assert parsed.schema == parsed_arrow_schema(schema)
    assert quarantine.schema == quarantine_arrow_schema()
    outcomes: dict[str, Any] = {}
    for row in parsed.to_pylist():
        outcomes[row["sequence_number"]] = ("parsed", row)
    for row in quarantine.to_pylist():
        assert row["sequence_number"] not in outcomes, "a row landed in both outputs"
        assert row["error"]
        outcomes[row["sequence_number"]] = ("quarantined", row["error"], row["error_field"])
    return outcomes


def _check_conservation(raw: pa.Table, schema: EventSchema) -> None:
    outcomes = _outcomes(raw, schema)
    assert sorted(outcomes) == sorted(raw.column("sequence_number").to_pylist())
    for row, error in enumerate(raw.column("source_error").to_pylist()):
        if error is not None:
            assert outcomes[str(row + 1)] == ("quarantined", f"kinesis source error: {error}", None)
    # Each row alone gets the same outcome as in the batch: the column-wise fast and slow
    # paths never let one row's failure change another row's result.
    for row in range(raw.num_rows):
        alone = _outcomes(raw.slice(row, 1), schema)
        assert alone == {str(row + 1): outcomes[str(row + 1)]}


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(st.data())
def test_demo_schema_conserves_rows(data: st.DataObject) -> None:
    _check_conservation(data.draw(_raw(demo_schema())), demo_schema())


@SETTINGS
@given(st.data())
def test_all_types_schema_conserves_rows(data: st.DataObject) -> None:
    _check_conservation(data.draw(_raw(ALL_TYPES)), ALL_TYPES)
