"""Turn one declared field of many decoded JSON objects into one typed Arrow column.

Work is column-wise: a list comprehension screens JSON types, then pyarrow converts the whole
column at once; per-value Python work happens only for types without a vectorised equivalent
(timestamps, dates, decimals) or on the slow path that pins down which rows failed. A value that
cannot be converted never raises: its row gets an error in ``RowErrors`` (and is later routed to
quarantine) and the value becomes null so the rest of the column still converts.

Accepted JSON values per type (anything else is a "wrong type" error):

- string: strings. boolean: ``true``/``false``.
- long, int: integers within range. Fractional notation such as ``3.0`` is rejected even when the
  value is integral, so a producer that sends floats fails consistently rather than only on the
  rows that happen to have a fraction.
- double, float: any finite number (integers included) within range.
- timestamp: an ISO-8601 string with a ``Z`` or ``+HH:MM`` offset (whatever Python 3.11's
  ``datetime.fromisoformat`` reads; fractions beyond microseconds are truncated), or a number of
  milliseconds since the Unix epoch. Strings without an offset are rejected: their zone is unknown.
  Numbers whose magnitude is below ``AMBIGUOUS_EPOCH_BELOW`` (10**11 ms, 1973-03-03) are rejected
  as ambiguous: read as milliseconds they are dates in 1966-1973, but they are what a producer
  sending epoch *seconds* for any date up to year 5138 sends, and a silently wrong time is worse
  than a quarantined record. Times must lie in 0001-01-01 .. 9999-12-30 UTC: the last day of
  year 9999 is refused because the derived tables bound every event by the end of its day and
  minute, which do not exist for it.
  An aware ``datetime`` (what an Avro timestamp decodes to, ``payloads.py``) is taken as it is;
  a naive one (an Avro local-timestamp) is refused, its zone unknown.
- date: an ISO-8601 date string (or a ``date``, an Avro date). decimal(p,s): a number or
  numeric string with at most ``s`` fraction digits and ``p - s`` integer digits (never rounded).
"""

from __future__ import annotations

import copy
import re
import sys
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from decimal import Context, Decimal, InvalidOperation
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from kinesis_lake.events.field_types import TIMESTAMP_ARROW_TYPE, arrow_type, decimal_params
from kinesis_lake.events.row_errors import HugeNumber, RowErrors, excerpt, json_kind
from kinesis_lake.events.schema import MAP_VALUE, EventField

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MIN_TIMESTAMP = pa.scalar(datetime.min.replace(tzinfo=UTC), TIMESTAMP_ARROW_TYPE)
# The last event time whose day (and minute) still has an end that datetime can represent.
LATEST_EVENT_TIME = datetime(9999, 12, 30, 23, 59, 59, 999999, tzinfo=UTC)
_MAX_TIMESTAMP = pa.scalar(LATEST_EVENT_TIME, TIMESTAMP_ARROW_TYPE)
AMBIGUOUS_EPOCH_BELOW = 10**11
_FLOAT32_MAX = 3.4028234663852886e38
_INTEGER_RANGES = {"long": (-(2**63), 2**63 - 1), "int": (-(2**31), 2**31 - 1)}
_FLOAT_LIMITS = {"double": sys.float_info.max, "float": _FLOAT32_MAX}
# Wide enough to quantize any decimal(38, s) value exactly.
_DECIMAL_CONTEXT = Context(prec=100)

# JSON types each declared type accepts; Decimal appears when the schema has decimal fields,
# because then every JSON fraction is decoded as a Decimal to keep its exact digits.
_STRING = frozenset({str})
_BOOLEAN = frozenset({bool})
_INTEGER = frozenset({int})
_NUMBER = frozenset({int, float, Decimal, HugeNumber})
_TIMESTAMP = frozenset({str, int, float, Decimal, HugeNumber, datetime})
_DATE = frozenset({str, date})
_DECIMAL = frozenset({int, Decimal, str})


def _wrong_type(field: EventField, value: Any) -> str:
    message = (
        f"field {field.name!r}: expected {field.type}, got {json_kind(value)} {excerpt(value)}"
    )
    if field.type in _INTEGER_RANGES and isinstance(value, (float, Decimal)):
        message += " (integer fields do not accept fractional notation such as 3.0)"
    return message


def _out_of_range(field: EventField, value: Any) -> str:
    return f"field {field.name!r}: value {excerpt(value)} out of range for {field.type}"


def _reject(
    rows: list[int],
    values: list[Any],
    field: EventField,
    errors: RowErrors,
    message: Callable[[EventField, Any], str],
) -> None:
    for row in rows:
        errors.add(row, message(field, values[row]), field.name)
        values[row] = None


def _screen(
    values: list[Any], accepted: frozenset[type], field: EventField, errors: RowErrors
) -> None:
    """Null out and report every value whose JSON type the field cannot hold."""
    bad = [
        row for row, value in enumerate(values) if value is not None and type(value) not in accepted
    ]
    _reject(bad, values, field, errors, _wrong_type)


def _strings(values: list[Any], field: EventField, errors: RowErrors) -> pa.Array:
    _screen(values, _STRING, field, errors)
    try:
        return pa.array(values, pa.string())
    except UnicodeEncodeError:
        bad = [row for row, value in enumerate(values) if value is not None and not _is_utf8(value)]
        _reject(bad, values, field, errors, _invalid_unicode)
        return pa.array(values, pa.string())


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _invalid_unicode(field: EventField, value: Any) -> str:
    return f"field {field.name!r}: string {excerpt(value)} is not valid Unicode (lone surrogate)"


def _booleans(values: list[Any], field: EventField, errors: RowErrors) -> pa.Array:
    _screen(values, _BOOLEAN, field, errors)
    return pa.array(values, pa.bool_())


def _integers(values: list[Any], field: EventField, errors: RowErrors) -> pa.Array:
    _screen(values, _INTEGER, field, errors)
    low, high = _INTEGER_RANGES[field.type]
    try:
        array = pa.array(values, pa.int64())
        bounds = pc.min_max(array)
        in_range = array.null_count == len(array) or (
            low <= bounds["min"].as_py() and bounds["max"].as_py() <= high
        )
    except OverflowError:  # beyond int64: pyarrow cannot even hold it
        in_range = False
    if not in_range:
        bad = [
            row
            for row, value in enumerate(values)
            if value is not None and not low <= value <= high
        ]
        _reject(bad, values, field, errors, _out_of_range)
        array = pa.array(values, pa.int64())
    return array.cast(arrow_type(field.type))


def _floats(values: list[Any], field: EventField, errors: RowErrors) -> pa.Array:
    _screen(values, _NUMBER, field, errors)
    try:
        array = pa.array(values, pa.float64())
    except (pa.ArrowInvalid, OverflowError):
        # Integers beyond 2**53 and Decimals need Python's (rounding) conversion.
        array = pa.array([v if v is None else _to_float(v) for v in values], pa.float64())
    # JSON has no infinity, but 1e999 decodes to it.
    too_big = pc.greater(pc.abs(array), _FLOAT_LIMITS[field.type])
    if pc.any(too_big).as_py():
        _reject(pc.indices_nonzero(too_big).to_pylist(), values, field, errors, _out_of_range)
        array = pc.if_else(too_big, pa.scalar(None, pa.float64()), array)
    return array.cast(arrow_type(field.type))


def _to_float(value: int | float | Decimal) -> float:
    try:
        return float(value)
    except OverflowError:  # an integer beyond the double range
        return float("inf")


def _parse_each(
    values: list[Any],
    parse: Callable[[Any], Any],
    field: EventField,
    errors: RowErrors,
    describe: Callable[[EventField, Any, Exception], str],
) -> list[Any]:
    """Apply ``parse`` to every non-null value; failures (``ValueError``/``OverflowError``)
    are reported with ``describe`` and become null.

    The comprehension is the fast path for the usual all-valid column; only a column with a
    failure pays for the per-row loop that finds which rows failed.
    """
    try:
        return [value if value is None else parse(value) for value in values]
    except (ValueError, OverflowError):
        pass
    parsed = []
    for row, value in enumerate(values):
        try:
            parsed.append(None if value is None else parse(value))
        except (ValueError, OverflowError) as exc:
            errors.add(row, describe(field, value, exc), field.name)
            parsed.append(None)
    return parsed


def _timestamps(values: list[Any], field: EventField, errors: RowErrors) -> pa.Array:
    _screen(values, _TIMESTAMP, field, errors)
    array = pa.array(
        _parse_each(values, _to_datetime, field, errors, _bad_timestamp), TIMESTAMP_ARROW_TYPE
    )
    # An offset can push a valid local time outside the range of Python and Spark timestamps.
    outside = pc.or_(pc.less(array, _MIN_TIMESTAMP), pc.greater(array, _MAX_TIMESTAMP))
    if pc.any(outside).as_py():
        _reject(pc.indices_nonzero(outside).to_pylist(), values, field, errors, _outside_years)
        array = pc.if_else(outside, pa.scalar(None, TIMESTAMP_ARROW_TYPE), array)
    return array


class _AmbiguousEpochError(ValueError):
    """A number that reads as a plausible time both in seconds and in milliseconds."""


_DIGITS = re.compile(r"[+-]?[0-9]+(\.[0-9]*)?")


def _to_datetime(value: str | int | float | Decimal | datetime) -> datetime:
    if not isinstance(value, str):
        if isinstance(value, datetime):  # decoded from Avro, already a moment (or naive)
            if value.tzinfo is None:
                raise ValueError("no UTC offset (an Avro local-timestamp has no zone)")
            return value
        if -AMBIGUOUS_EPOCH_BELOW < value < AMBIGUOUS_EPOCH_BELOW:
            raise _AmbiguousEpochError
        return _EPOCH + timedelta(milliseconds=value if type(value) is int else float(value))
    if _DIGITS.fullmatch(value):
        # fromisoformat would read some as basic-format dates and report e.g. the month.
        raise ValueError(
            "a string of digits is not a timestamp; send epoch milliseconds as a JSON number, "
            "or an ISO-8601 string with an offset"
        )
    parsed = datetime.fromisoformat(value)
    if parsed.tzinfo is None:
        raise ValueError("no UTC offset (append Z or +HH:MM)")
    return parsed


def _outside_years(field: EventField, value: Any) -> str:
    return (
        f"field {field.name!r}: timestamp {excerpt(value)} is not between 0001-01-01 and "
        "9999-12-30 in UTC (the last day of 9999 has no day or minute end to window it in)"
    )


def _bad_timestamp(field: EventField, value: Any, exc: Exception) -> str:
    if isinstance(exc, _AmbiguousEpochError):
        return (
            f"field {field.name!r}: number {excerpt(value)} is an ambiguous time: numbers are "
            f"read as epoch milliseconds and any below {AMBIGUOUS_EPOCH_BELOW:,} (1973-03-03) "
            "look like epoch seconds; send milliseconds or an ISO-8601 string"
        )
    if isinstance(value, str):
        return f"field {field.name!r}: unparseable timestamp {excerpt(value)}: {exc}"
    if isinstance(value, datetime):  # a naive one: the Avro decoder's local-timestamp
        return f"field {field.name!r}: timestamp {excerpt(value)}: {exc}"
    return f"field {field.name!r}: epoch milliseconds {excerpt(value)} out of range"


def _dates(values: list[Any], field: EventField, errors: RowErrors) -> pa.Array:
    _screen(values, _DATE, field, errors)
    parse = _to_date if date in set(map(type, values)) else date.fromisoformat
    parsed = _parse_each(values, parse, field, errors, _bad_date)
    return pa.array(parsed, pa.date32())


def _to_date(value: str | date) -> date:
    return value if type(value) is date else date.fromisoformat(value)  # type: ignore[arg-type]


def _bad_date(field: EventField, value: Any, exc: Exception) -> str:
    return f"field {field.name!r}: unparseable date {excerpt(value)}: {exc}"


def _decimals(
    values: list[Any], field: EventField, errors: RowErrors, precision: int, scale: int
) -> pa.Array:
    _screen(values, _DECIMAL, field, errors)
    parse = _decimal_parser(precision, scale)
    return pa.array(_parse_each(values, parse, field, errors, _bad_decimal), arrow_type(field.type))


def _decimal_parser(precision: int, scale: int) -> Callable[[int | str | Decimal], Decimal]:
    quantum = Decimal(1).scaleb(-scale)

    def parse(value: int | str | Decimal) -> Decimal:
        """The exact decimal, or ``ValueError`` saying why it would need rounding."""
        try:
            number = Decimal(value)
        except InvalidOperation:
            raise ValueError("is not a decimal number") from None
        if not number.is_finite():
            raise ValueError("is not a finite decimal number")
        if number and number.adjusted() >= precision - scale:
            raise ValueError(f"has more than {precision - scale} integer digits")
        # Cannot fail: the integer digits fit, so the result has at most 38 digits.
        exact = number.quantize(quantum, context=_DECIMAL_CONTEXT)
        if exact != number:
            raise ValueError(f"has more than {scale} fraction digits")
        return exact

    return parse


def _bad_decimal(field: EventField, value: Any, exc: Exception) -> str:
    return f"field {field.name!r}: value {excerpt(value)} {exc} for {field.type}"


_CONVERTERS: dict[str, Callable[[list[Any], EventField, RowErrors], pa.Array]] = {
    "string": _strings,
    "boolean": _booleans,
    "long": _integers,
    "int": _integers,
    "double": _floats,
    "float": _floats,
    "timestamp": _timestamps,
    "date": _dates,
}


_OBJECT = frozenset({dict})
_ARRAY = frozenset({list})


def _labelled(field: EventField, label: str) -> EventField:
    """``field`` under its dotted path, so messages and ``error_field`` say where in the
    record it is (not validated again: a path has dots, a name may not)."""
    labelled = copy.copy(field)
    object.__setattr__(labelled, "name", label)
    return labelled


def _require(values: list[Any], objects: list[Any], field: EventField, errors: RowErrors) -> None:
    """Report each row whose object (when there is one) lacks ``field`` or holds null."""
    name = field.name.rpartition(".")[2]
    for row, value in enumerate(values):
        if value is None and objects[row] is not None:
            state = "is null" if name in objects[row] else "is missing"
            errors.add(row, f"required field {field.name!r} {state}", field.name)


def _convert(values: list[Any], field: EventField, errors: RowErrors) -> pa.Array:
    if field.type == "struct":
        return _structs(values, field, errors)
    if field.type == "list":
        return _lists(values, field, errors)
    if field.type == "map":
        return _maps(values, field, errors)
    params = decimal_params(field.type)
    if params:
        return _decimals(values, field, errors, *params)
    return _CONVERTERS[field.type](values, field, errors)


def _structs(values: list[Any], field: EventField, errors: RowErrors) -> pa.Array:
    """Each declared child converted as a column of its own; undeclared keys are ignored."""
    _screen(values, _OBJECT, field, errors)
    children = []
    for child in field.fields:
        labelled = _labelled(child, f"{field.name}.{child.name}")
        child_values = [None if value is None else value.get(child.name) for value in values]
        if child.required:
            _require(child_values, values, labelled, errors)
        children.append(_convert(child_values, labelled, errors))
    return pa.StructArray.from_arrays(
        children,
        fields=[child.arrow_field() for child in field.fields],
        mask=pa.array([value is None for value in values], pa.bool_()),
    )


def _lists(values: list[Any], field: EventField, errors: RowErrors) -> pa.Array:
    """All items of all rows converted as one column; an item's error is its row's."""
    _screen(values, _ARRAY, field, errors)
    items = field.items
    assert items is not None
    flat: list[Any] = []
    owners: list[int] = []
    offsets = [0]
    for row, value in enumerate(values):
        if value is not None:
            flat.extend(value)
            owners.extend([row] * len(value))
        offsets.append(len(flat))
    converted = _inner_column(flat, owners, items, f"{field.name}[]", "item", errors)
    return pa.ListArray.from_arrays(
        pa.array(offsets, pa.int32()),
        converted,
        type=pa.list_(items.arrow_field()),
        mask=pa.array([value is None for value in values], pa.bool_()),
    )


def _maps(values: list[Any], field: EventField, errors: RowErrors) -> pa.Array:
    """All values of all rows' objects converted as one column, keyed by their (string) keys;
    a value's error is its row's, at ``field{}``."""
    _screen(values, _OBJECT, field, errors)
    inner = field.values
    assert inner is not None
    keys: list[str] = []
    flat: list[Any] = []
    owners: list[int] = []
    offsets = [0]
    for row, value in enumerate(values):
        if value is not None:
            keys.extend(str(key) for key in value)
            flat.extend(value.values())
            owners.extend([row] * len(value))
        offsets.append(len(flat))
    key_field = EventField(MAP_VALUE, "string", required=True)
    key_array = _inner_column(keys, owners, key_field, f"{field.name}{{}} key", "key", errors)
    converted = _inner_column(flat, owners, inner, f"{field.name}{{}}", "value", errors)
    return pa.MapArray.from_arrays(
        pa.array(offsets, pa.int32()),
        key_array.fill_null(""),
        converted,
        type=field.arrow_type(),
        mask=pa.array([value is None for value in values], pa.bool_()),
    )


def _inner_column(
    flat: list[Any],
    owners: list[int],
    inner: EventField,
    label: str,
    noun: str,
    errors: RowErrors,
) -> pa.Array:
    """A list's items or a map's keys or values, of all rows as one column under ``label``;
    each one's error (a null where it is required included) is its owner row's."""
    labelled = _labelled(inner, label)
    inner_errors = RowErrors(len(flat))
    if inner.required:
        for index in [index for index, item in enumerate(flat) if item is None]:
            inner_errors.add(index, f"{label!r} holds a null {noun}", label)
    converted = _convert(flat, labelled, inner_errors)
    for index, message in enumerate(inner_errors.messages):
        if message is not None:
            errors.add(owners[index], message, inner_errors.fields[index])
    return converted


def convert_field(objects: list[dict[str, Any]], field: EventField, errors: RowErrors) -> pa.Array:
    """The typed column of ``field`` across ``objects``; failing rows are reported and null.

    Keys match field names exactly (case-sensitive); keys not declared are ignored, also
    inside nested objects.
    """
    name = field.name
    values = [obj.get(name) for obj in objects]
    if field.required:
        for row in [row for row, value in enumerate(values) if value is None]:
            if name in objects[row]:
                errors.add(row, f"required field {name!r} is null", name)
            else:
                errors.add(row, f"missing required field {name!r}", name)
    return _convert(values, field, errors)
