"""Raw Kinesis records -> typed events or quarantine rows, plus per-minute counts and dedupe.

Runs inside Spark executors (``mapInArrow``) on Arrow batches, so it never raises on bad data:
every input row ends up in exactly one of the two outputs, and a quarantined row carries its raw
payload and the first reason it failed (see ``convert.py`` for what each type accepts). JSON keys
that the schema does not declare are ignored, so producers can add fields before the schema does;
a key repeated in one object keeps its last value, as ``json`` does.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from decimal import Decimal
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
from kinesis_lake.events.convert import RowErrors, convert_field, json_kind
from kinesis_lake.events.field_types import TIMESTAMP_ARROW_TYPE, decimal_params
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


def _decoder(schema: EventSchema) -> json.JSONDecoder:
    """Strict JSON (Python otherwise accepts NaN and Infinity); fractions are decoded as
    ``Decimal`` only when a decimal field needs their exact digits, because it is slower."""
    exact = any(decimal_params(field.type) for field in schema.fields)
    return json.JSONDecoder(
        parse_constant=_reject_constant, parse_float=Decimal if exact else float
    )


def _decode(
    payloads: list[bytes | None],
    source_errors: list[str | None],
    decoder: json.JSONDecoder,
    errors: RowErrors,
) -> list[dict[str, Any]]:
    """One JSON object per row; rows that fail get an error and an empty placeholder object."""
    decode = decoder.decode
    objects = []
    append = objects.append
    for row, (payload, source_error) in enumerate(zip(payloads, source_errors, strict=True)):
        if source_error is not None:
            errors.add(row, f"kinesis source error: {source_error}")
        elif payload is None:
            errors.add(row, "record has no payload (data is null)")
        else:
            try:
                # Decoding explicitly, rather than handing bytes to json, rules out UTF-16/32.
                value = decode(payload.decode("utf-8"))
            except UnicodeDecodeError as exc:
                errors.add(row, f"invalid UTF-8 at byte {exc.start}: {exc.reason}")
            except ValueError as exc:  # malformed, NaN/Infinity, integers over 4300 digits
                errors.add(row, f"invalid JSON: {exc}")
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


def _utc(now: datetime | None) -> datetime:
    if now is None:
        return datetime.now(timezone.utc)
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
    stamp = _utc(now)
    columns = _raw_columns(raw)
    size = len(columns[DATA])
    errors = RowErrors(size)
    objects = _decode(
        columns[DATA].to_pylist(), columns[SOURCE_ERROR].to_pylist(), _decoder(schema), errors
    )
    fields = [convert_field(objects, field, errors) for field in schema.fields]

    arrival = columns[ARRIVAL_TIMESTAMP]
    if schema.event_time_field is None:
        event_time = arrival
        if arrival.null_count:
            for row in pc.indices_nonzero(arrival.is_null()).to_pylist():
                errors.add(row, f"no event time: {ARRIVAL_TIMESTAMP} is null")
    else:
        names = [field.name for field in schema.fields]
        event_time = fields[names.index(schema.event_time_field)]

    failures = [row for row, message in enumerate(errors.messages) if message is not None]
    ok = errors.ok_mask()
    identity = [columns[name] for name in (*IDENTITY_COLUMNS, ARRIVAL_TIMESTAMP)]
    parsed = pa.Table.from_arrays(
        [
            *(column.filter(ok) for column in (*identity, *fields, event_time)),
            _constant(stamp, size - len(failures)),
        ],
        schema=parsed_arrow_schema(schema),
    )
    failed = pc.invert(ok)
    quarantine = pa.Table.from_arrays(
        [
            *(column.filter(failed) for column in (*identity, columns[DATA])),
            pa.array([errors.messages[row] for row in failures], pa.string()),
            pa.array([errors.fields[row] for row in failures], pa.string()),
            _constant(stamp, len(failures)),
        ],
        schema=quarantine_arrow_schema(),
    )
    return parsed, quarantine
