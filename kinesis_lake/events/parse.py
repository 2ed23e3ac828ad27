"""Raw Kinesis records -> typed events or quarantine rows, plus per-minute counts and dedupe.

Runs inside Spark executors (``mapInArrow``) on Arrow batches, so it never raises on bad data:
every input row ends up in exactly one of the two outputs, and a quarantined row carries its raw
payload and the first reason it failed (see ``convert.py`` for what each type accepts). JSON keys
that the schema does not declare are ignored, so producers can add fields before the schema does.
A key repeated in one object (at any depth) quarantines the record: JSON leaves its meaning open
and silently keeping one value would store a guess. A string ``event_key`` must not be empty.
Streams declared with another payload format (Avro, the Glue Schema Registry's wire format)
are decoded by ``payloads.py`` into the same kind of objects, with the same promise.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from kinesis_lake.events.columns import (
    ARRIVAL_TIMESTAMP,
    DATA,
    IDENTITY_COLUMNS,
    SEQUENCE_NUMBER,
    SHARD_ID,
    SOURCE_ERROR,
    STREAM_NAME,
    SUB_SEQUENCE_NUMBER,
)
from kinesis_lake.events.convert import convert_field
from kinesis_lake.events.declaration import LakeDeclaration
from kinesis_lake.events.field_types import TIMESTAMP_ARROW_TYPE, decimal_params
from kinesis_lake.events.payload_formats import JSON
from kinesis_lake.events.payloads import decode_streams, unreadable
from kinesis_lake.events.routes import NO_ROUTE
from kinesis_lake.events.row_errors import RowErrors, excerpt, json_kind, parse_json_float
from kinesis_lake.events.schema import EventSchema
from kinesis_lake.events.tables import (
    parsed_arrow_schema,
    quarantine_arrow_schema,
)

# The raw columns the parser reads, with the types it works in; inputs are cast to them so a
# reader that produces e.g. large_binary or int32 still works.
_RAW_TYPES: dict[str, pa.DataType] = {
    STREAM_NAME: pa.string(),
    SHARD_ID: pa.string(),
    SEQUENCE_NUMBER: pa.string(),
    SUB_SEQUENCE_NUMBER: pa.int64(),
    ARRIVAL_TIMESTAMP: TIMESTAMP_ARROW_TYPE,
    DATA: pa.binary(),
    SOURCE_ERROR: pa.string(),
}

# Shared placeholder for rows that never decoded to an object; only ever read.
_NO_OBJECT: dict[str, Any] = {}


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


class _DuplicateKeyError(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKeyError(key)
            seen.add(key)
    return obj


def _checked_int(text: str) -> int:
    """``parse_int`` that names the problem where ``int`` would advise a Python setting."""
    digits = len(text.lstrip("-"))
    limit = sys.get_int_max_str_digits()
    if limit and digits > limit:
        raise ValueError(f"an integer has {digits} digits, more than the {limit} accepted")
    return int(text)


def _exact_decimal(text: str) -> Decimal:
    """``Decimal(text)``, failing as a JSON error does (ValueError) and not with
    ``InvalidOperation``, which an exponent past Decimal's limits raises."""
    try:
        return Decimal(text)
    except InvalidOperation:
        raise ValueError(
            f"number {text[:40]} has an exponent beyond what a decimal can hold"
        ) from None


def _decoder(exact: bool, *, checked_ints: bool = False) -> json.JSONDecoder:
    """Strict JSON (Python otherwise accepts NaN and Infinity); fractions are decoded as
    ``Decimal`` only when a decimal field needs their exact digits (``exact``), because it is
    slower.

    ``checked_ints`` is for re-decoding a payload that failed: it costs a Python call per
    integer, so the usual path keeps ``int``.
    """
    return json.JSONDecoder(
        parse_constant=_reject_constant,
        parse_float=_exact_decimal if exact else parse_json_float,
        parse_int=_checked_int if checked_ints else None,
        object_pairs_hook=_object,
    )


def _decode(
    payloads: list[bytes | None],
    source_errors: list[str | None],
    schemas: list[EventSchema],
    errors: RowErrors,
) -> list[dict[str, Any]]:
    """One JSON object per row; rows that fail get an error and an empty placeholder object.

    Decoded once for every table the records may be routed to, so ``schemas`` decide together
    whether fractions need exact digits and which duplicate keys name a declared field.
    """
    exact = any(decimal_params(field.type) for schema in schemas for field in schema.fields)
    decode = _decoder(exact).decode
    declared = {field.name for schema in schemas for field in schema.fields}
    objects: list[Any] = []
    append = objects.append
    for row, (payload, source_error) in enumerate(zip(payloads, source_errors, strict=True)):
        if source_error is not None or not payload:
            errors.add(row, unreadable(payload, source_error, "a JSON object"))
        else:
            try:
                # Decoding explicitly, rather than handing bytes to json, rules out UTF-16/32.
                text = payload.decode("utf-8")
                value = decode(text)
            except UnicodeDecodeError as exc:
                errors.add(row, f"invalid UTF-8 at byte {exc.start}: {exc.reason}")
            except _DuplicateKeyError as exc:
                errors.add(
                    row,
                    f"duplicate JSON key {excerpt(exc.key)} in one object: which value is meant "
                    "is ambiguous; send each key once",
                    exc.key if exc.key in declared else None,
                )
            except ValueError as exc:  # malformed, NaN/Infinity, integers over 4300 digits
                errors.add(row, _invalid_json(text, exc, exact))
            except RecursionError:
                errors.add(row, "invalid JSON: nested too deeply")
            else:
                if type(value) is dict:
                    append(value)
                    continue
                kind = _with_article(json_kind(value))
                errors.add(row, f"JSON payload is {kind}, expected an object")
        append(_NO_OBJECT)
    return objects


def _invalid_json(text: str, exc: ValueError, exact: bool) -> str:
    if text.startswith("\ufeff"):
        return (
            "payload starts with a UTF-8 byte order mark (EF BB BF); "
            "send JSON without a byte order mark"
        )
    try:  # once more, with integers checked, so the reason is in the record's terms
        _decoder(exact, checked_ints=True).decode(text)
    except ValueError as checked:
        exc = checked
    except RecursionError:
        pass
    return f"invalid JSON: {exc}"


def _with_article(kind: str) -> str:
    if kind == "null":
        return kind
    return f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"


def _raw_columns(raw: pa.RecordBatch | pa.Table) -> dict[str, pa.ChunkedArray]:
    table = pa.Table.from_batches([raw]) if isinstance(raw, pa.RecordBatch) else raw
    missing = [name for name in _RAW_TYPES if name not in table.column_names]
    if missing:
        # A wiring bug, not bad data: fail loudly instead of quarantining everything.
        raise ValueError(f"raw input lacks columns {missing}; expected {list(_RAW_TYPES)}")
    return {name: table.column(name).cast(type_) for name, type_ in _RAW_TYPES.items()}


def _refuse_empty_keys(keys: pa.Array, name: str, errors: RowErrors) -> None:
    """An empty string is no identity: every producer that forgets the key would collide."""
    if not pa.types.is_string(keys.type):
        return
    for row in pc.indices_nonzero(pc.fill_null(pc.equal(keys, ""), False)).to_pylist():
        errors.add(
            row, f"field {name!r}: empty string is not an event key; send a non-empty one", name
        )


def _utc(now: datetime | None) -> datetime:
    if now is None:
        return datetime.now(UTC)
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    return now


def _constant(moment: datetime, size: int) -> pa.Array:
    return pa.repeat(pa.scalar(moment, TIMESTAMP_ARROW_TYPE), size)


def parse_events(
    raw: pa.RecordBatch | pa.Table, schema: EventSchema, *, now: datetime | None = None
) -> tuple[pa.Table, pa.Table]:
    """Split raw records into (parsed, quarantine) tables, preserving input order in each.

    ``now`` stamps ``parsed_at``/``quarantined_at`` (default: the current time).
    """
    columns = _raw_columns(raw)
    errors = RowErrors(len(columns[DATA]))
    objects = _decode(
        columns[DATA].to_pylist(), columns[SOURCE_ERROR].to_pylist(), [schema], errors
    )
    return _convert(columns, objects, errors, schema, _utc(now), target=None)


@dataclass
class RoutedEvents:
    """One raw batch routed: each declared table's typed rows, and every row that failed."""

    tables: dict[str, pa.Table]
    quarantine: pa.Table


def route_events(
    raw: pa.RecordBatch | pa.Table, declaration: LakeDeclaration, *, now: datetime | None = None
) -> RoutedEvents:
    """Decode each record once, then parse it for every table whose route takes it.

    A record that does not decode is quarantined once, with no target table; one that decodes
    but no route takes is quarantined once with ``NO_ROUTE``; one that a table takes but its
    schema rejects is quarantined for that table (``target_table``). So each raw row yields
    one row per table that takes it (typed or quarantined), or exactly one quarantine row.
    """
    stamp = _utc(now)
    columns = _raw_columns(raw)
    size = len(columns[DATA])
    errors = RowErrors(size)
    schemas = [table.schema for table in declaration.tables]
    objects = _decode_payloads(columns, declaration, schemas, errors)
    decoded = [message is None for message in errors.messages]
    routed = [False] * size
    tables: dict[str, pa.Table] = {}
    quarantined: list[pa.Table] = []
    for table in declaration.tables:
        taken = [row for row in range(size) if decoded[row] and table.route.takes(objects[row])]
        for row in taken:
            routed[row] = True
        indices = pa.array(taken, pa.int64())
        subset = {name: column.take(indices) for name, column in columns.items()}
        good, bad = _convert(
            subset,
            [objects[row] for row in taken],
            RowErrors(len(taken)),
            table.schema,
            stamp,
            target=table.name,
        )
        tables[table.name] = good
        quarantined.append(bad)
    for row in range(size):
        if decoded[row] and not routed[row]:
            errors.add(row, NO_ROUTE)
    failed = pa.array([message is not None for message in errors.messages], pa.bool_())
    quarantined.insert(0, _quarantine_rows(columns, failed, errors, stamp, target=None))
    return RoutedEvents(tables, pa.concat_tables(quarantined))


def _decode_payloads(
    columns: dict[str, pa.ChunkedArray],
    declaration: LakeDeclaration,
    schemas: list[EventSchema],
    errors: RowErrors,
) -> list[dict[str, Any]]:
    """Each row's payload decoded by its stream's declared format (``payloads.py``); a lake
    of JSON streams only takes the JSON decoder's path as it always did."""
    payloads = columns[DATA].to_pylist()
    source_errors = columns[SOURCE_ERROR].to_pylist()
    formats = {s.name: s.format for s in declaration.streams if s.format.kind != JSON}
    if not formats:
        return _decode(payloads, source_errors, schemas, errors)

    def decode_json(
        part: list[bytes | None], part_errors: list[str | None], into: RowErrors
    ) -> list[dict[str, Any]]:
        return _decode(part, part_errors, schemas, into)

    streams = columns[STREAM_NAME].to_pylist()
    return decode_streams(streams, payloads, source_errors, formats, decode_json, errors)


def _convert(
    columns: dict[str, pa.ChunkedArray],
    objects: list[dict[str, Any]],
    errors: RowErrors,
    schema: EventSchema,
    stamp: datetime,
    *,
    target: str | None,
) -> tuple[pa.Table, pa.Table]:
    """Typed rows of the decoded ``objects`` and quarantine rows for those ``schema`` rejects
    (or that ``errors`` already holds from decoding)."""
    fields = [convert_field(objects, field, errors) for field in schema.fields]
    names = [field.name for field in schema.fields]
    if schema.event_key is not None:
        _refuse_empty_keys(fields[names.index(schema.event_key)], schema.event_key, errors)

    arrival = columns[ARRIVAL_TIMESTAMP]
    if schema.event_time_field is None:
        event_time = arrival
        if arrival.null_count:
            for row in pc.indices_nonzero(arrival.is_null()).to_pylist():
                errors.add(row, f"no event time: {ARRIVAL_TIMESTAMP} is null")
    else:
        event_time = fields[names.index(schema.event_time_field)]

    ok = errors.ok_mask()
    identity = [columns[name] for name in (*IDENTITY_COLUMNS, ARRIVAL_TIMESTAMP)]
    kept = pc.sum(ok).as_py() or 0
    parsed = pa.Table.from_arrays(
        [
            *(column.filter(ok) for column in (*identity, *fields, event_time)),
            _constant(stamp, kept),
        ],
        schema=parsed_arrow_schema(schema),
    )
    return parsed, _quarantine_rows(columns, pc.invert(ok), errors, stamp, target=target)


def _quarantine_rows(
    columns: dict[str, pa.ChunkedArray],
    failed: pa.Array,
    errors: RowErrors,
    stamp: datetime,
    *,
    target: str | None,
) -> pa.Table:
    rows = pc.indices_nonzero(failed).to_pylist()
    return pa.Table.from_arrays(
        [
            *(columns[name].filter(failed) for name in (*IDENTITY_COLUMNS, ARRIVAL_TIMESTAMP)),
            columns[DATA].filter(failed),
            pa.array([errors.messages[row] for row in rows], pa.string()),
            pa.array([errors.fields[row] for row in rows], pa.string()),
            _constant(stamp, len(rows)),
            pa.array([target] * len(rows), pa.string()),
            pa.nulls(len(rows), TIMESTAMP_ARROW_TYPE),
            pa.nulls(len(rows), pa.string()),
        ],
        schema=quarantine_arrow_schema(),
    )
