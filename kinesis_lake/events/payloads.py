"""Binary payloads -> the Python values the converters take (``convert.py``).

Each stream's records are decoded by its declared format (``payload_formats.py``): JSON by
the parser's own decoder, Avro with fastavro, Protobuf with the protobuf library
(``proto_payloads.py``), the Glue Schema Registry's wire format by its header and then by
the schema version it names (JSON ones validated against their JSON Schema too). Avro
values come out as the JSON path's do (records as dicts, arrays as lists, enums as strings)
except for the logical types, which are already typed: timestamps as aware datetimes, dates
as dates, decimals as Decimals; the converters take those as they are.

Runs on the executors, so like the JSON decoder it never raises on bad data: a record that
does not decode gets a reason naming the format and, when known, the schema version, and the
shared empty placeholder object. Only a registry that cannot be asked at all raises
(:class:`~kinesis_lake.events.glue_registry.SchemaRegistryError`): that is configuration.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Mapping
from typing import Any
from uuid import UUID

import fastavro

from kinesis_lake.events.glue_registry import (
    SchemaVersion,
    WireFormatError,
    is_known,
    schema_version,
    unframe,
)
from kinesis_lake.events.json_schema_validation import json_schema_validator
from kinesis_lake.events.payload_formats import (
    AVRO,
    GLUE_SCHEMA_REGISTRY,
    JSON,
    JSON_FORMAT,
    PROTOBUF,
    PayloadFormat,
)
from kinesis_lake.events.proto_payloads import proto_reader, registry_proto_reader
from kinesis_lake.events.proto_schemas import ProtoSchema
from kinesis_lake.events.row_errors import RowErrors

JsonDecoder = Callable[[list[bytes | None], list[str | None], RowErrors], list[dict[str, Any]]]
"""The parser's JSON decoding: payloads and source errors in, one object per row out."""

_NO_OBJECT: dict[str, Any] = {}
MAX_UNKNOWN_VERSIONS_ASKED = 8
"""New versions the registry turns out not to know that one batch may ask it about; records
naming more are quarantined unasked, so random bytes after the header cannot throttle the
registry and fail every retry of the batch. Answers are remembered (found or not), so a
version already answered costs nothing and never counts: a version registered since
still gets asked about however much garbage the batch holds before it."""
_Reader = Callable[[bytes], Any]
_READERS: dict[tuple[str, str], _Reader] = {}


def decode_streams(
    streams: list[str | None],
    payloads: list[bytes | None],
    source_errors: list[str | None],
    formats: Mapping[str, PayloadFormat],
    decode_json: JsonDecoder,
    errors: RowErrors,
) -> list[dict[str, Any]]:
    """One object per row, each decoded by the format of its row's stream (JSON when the
    stream declares none); rows that fail get an error and an empty placeholder."""
    groups: dict[str | None, list[int]] = {}
    for row, stream in enumerate(streams):
        groups.setdefault(stream, []).append(row)
    objects: list[dict[str, Any]] = [_NO_OBJECT] * len(payloads)
    for stream, rows in groups.items():
        fmt = formats.get(stream, JSON_FORMAT) if stream is not None else JSON_FORMAT
        part = RowErrors(len(rows))
        part_payloads = [payloads[row] for row in rows]
        part_errors = [source_errors[row] for row in rows]
        if fmt.kind == JSON:
            decoded = decode_json(part_payloads, part_errors, part)
        else:
            decoded = decode_binary(part_payloads, part_errors, fmt, decode_json, part)
        _merge(rows, decoded, part, objects, errors)
    return objects


def _merge(
    rows: list[int],
    decoded: list[dict[str, Any]],
    part: RowErrors,
    objects: list[dict[str, Any]],
    errors: RowErrors,
) -> None:
    for index, row in enumerate(rows):
        objects[row] = decoded[index]
        message = part.messages[index]
        if message is not None:
            errors.add(row, message, part.fields[index])


def unreadable(payload: bytes | None, source_error: str | None, expected: str) -> str:
    """Why a row with a source error or no payload bytes has nothing to decode."""
    if source_error is not None:
        return f"kinesis source error: {source_error}"
    if payload is None:
        return "record has no payload (data is null)"
    return f"record payload is empty (0 bytes); expected {expected}"


def decode_binary(
    payloads: list[bytes | None],
    source_errors: list[str | None],
    fmt: PayloadFormat,
    decode_json: JsonDecoder,
    errors: RowErrors,
) -> list[dict[str, Any]]:
    """Payloads of an ``avro``, ``protobuf`` or ``glue-schema-registry`` stream, one object
    per row."""
    objects: list[dict[str, Any]] = [_NO_OBJECT] * len(payloads)
    wrapped_json: dict[UUID, list[tuple[int, bytes]]] = {}
    versions: dict[UUID, SchemaVersion | None] = {}
    readers: dict[UUID, _Reader | str] = {}
    labels: dict[UUID, str] = {}  # a version's label, made once: most rows are read well
    unknown_asked = 0
    plain = _plain_reader(fmt)
    for row, (payload, source_error) in enumerate(zip(payloads, source_errors, strict=True)):
        if source_error is not None or not payload:
            errors.add(row, unreadable(payload, source_error, f"{fmt.kind} data"))
        elif plain is not None:
            objects[row] = _record(payload, plain, fmt.kind, errors, row)
        else:
            try:
                version_id, body = unframe(payload)
            except WireFormatError as exc:
                errors.add(row, f"{GLUE_SCHEMA_REGISTRY}: {exc}")
                continue
            if version_id not in versions:
                asked_before = is_known(version_id, fmt.region, fmt.endpoint_url)
                if not asked_before and unknown_asked >= MAX_UNKNOWN_VERSIONS_ASKED:
                    errors.add(row, _not_asked(version_id))
                    continue
                found = schema_version(version_id, fmt.region, fmt.endpoint_url)
                unknown_asked += found is None and not asked_before
                versions[version_id] = found
            version = versions[version_id]
            if version is None:
                errors.add(
                    row,
                    f"{GLUE_SCHEMA_REGISTRY}: schema version {version_id} is not in the "
                    "registry (deleted, or another registry's)",
                )
            elif version.data_format in _BINARY:
                if version_id not in readers:
                    readers[version_id] = _registered_reader(version, fmt)
                    name = _BINARY[version.data_format]
                    labels[version_id] = f"{GLUE_SCHEMA_REGISTRY}: {version.describe()}: {name}"
                reader, label = readers[version_id], labels[version_id]
                if isinstance(reader, str):
                    errors.add(row, f"{label} {reader}")
                else:
                    objects[row] = _record(body, reader, label, errors, row)
            elif version.data_format == "JSON":
                wrapped_json.setdefault(version_id, []).append((row, body))
            else:
                errors.add(
                    row,
                    f"{GLUE_SCHEMA_REGISTRY}: {version.describe()}: data format "
                    f"{version.data_format} is unknown (AVRO, JSON and PROTOBUF are known)",
                )
    for version_id, entries in wrapped_json.items():
        version = versions[version_id]
        assert version is not None
        label = f"{GLUE_SCHEMA_REGISTRY}: {version.describe()}: "
        _decode_wrapped_json(entries, decode_json, label, objects, errors)
        _validate(entries, json_schema_validator(version.definition), label, objects, errors)
    return objects


_BINARY = {"AVRO": "Avro", "PROTOBUF": "Protobuf"}
"""The registry's binary data formats, as reasons name them."""


def _plain_reader(fmt: PayloadFormat) -> _Reader | None:
    """The reader of an ``avro`` or ``protobuf`` stream's records (None: a registry's)."""
    if fmt.kind == AVRO:
        return _reader(fmt.schema, None)
    if fmt.kind == PROTOBUF:
        return proto_reader(ProtoSchema(**fmt.schema), fmt.message)
    return None


def _validate(
    entries: list[tuple[int, bytes]],
    validate: Callable[[Any], str | None] | str,
    label: str,
    objects: list[dict[str, Any]],
    errors: RowErrors,
) -> None:
    """Rows of ``entries`` that decoded, checked against their version's JSON Schema."""
    for row, _ in entries:
        if objects[row] is _NO_OBJECT:
            continue
        reason = validate if isinstance(validate, str) else validate(objects[row])
        if reason is not None:
            errors.add(row, label + reason)
            objects[row] = _NO_OBJECT


def _not_asked(version_id: UUID) -> str:
    return (
        f"{GLUE_SCHEMA_REGISTRY}: schema version {version_id} not asked: more than "
        f"{MAX_UNKNOWN_VERSIONS_ASKED} versions in this batch are not in the registry (random "
        "bytes after the header, or a producer of another registry)"
    )


def _decode_wrapped_json(
    entries: list[tuple[int, bytes]],
    decode_json: JsonDecoder,
    label: str,
    objects: list[dict[str, Any]],
    errors: RowErrors,
) -> None:
    """JSON payloads behind the registry's header, by the JSON path, reasons labelled."""
    part = RowErrors(len(entries))
    decoded = decode_json([body for _, body in entries], [None] * len(entries), part)
    for index, (row, _) in enumerate(entries):
        objects[row] = decoded[index]
        message = part.messages[index]
        if message is not None:
            errors.add(row, label + message, part.fields[index])


def _record(
    payload: bytes, read: _Reader, label: str, errors: RowErrors, row: int
) -> dict[str, Any]:
    try:
        value = read(payload)
    except Exception as exc:  # fastavro and protobuf fail corrupt data with many types
        errors.add(row, f"{label} payload does not decode: {type(exc).__name__}: {exc}")
        return _NO_OBJECT
    if type(value) is not dict:
        errors.add(row, f"{label} payload is {type(value).__name__}, expected a record")
        return _NO_OBJECT
    return value


def _reader_schema(fmt: PayloadFormat, version: SchemaVersion) -> Any:
    """The schema ``version``'s records are read as: the stream's own reader's schema, else
    the version of its schema the tables were declared from, when not older than the
    writer's (a version registered since is read as written: its new fields are simply not
    columns yet, and a widened type still fits the converters)."""
    if fmt.schema is not None:
        return fmt.schema
    declared = (fmt.readers or {}).get(version.schema_arn)
    if declared is None or (version.number or 0) > (declared["number"] or 0):
        return None
    return declared["schema"]


def _registered_reader(version: SchemaVersion, fmt: PayloadFormat) -> _Reader | str:
    """The reader of a registered Avro or Protobuf version, or why there is none: the
    registry's own validation is not to be relied on (moto's has none)."""
    try:
        if version.data_format == "PROTOBUF":
            return registry_proto_reader(version.definition)
        return _reader(json.loads(version.definition), _reader_schema(fmt, version))
    except Exception as exc:  # invalid JSON or .proto, or any of fastavro's schema errors
        return f"schema does not parse: {type(exc).__name__}: {exc}"


def _reader(writer: Any, reader: Any) -> _Reader:
    """A function that reads one datum written with ``writer`` as ``reader`` (when given)
    and refuses bytes left over, which mean the wrong schema; parsed once per pair."""
    key = (json.dumps(writer, sort_keys=True), json.dumps(reader, sort_keys=True))
    known = _READERS.get(key)
    if known is not None:
        return known
    parsed_writer = fastavro.parse_schema(_without_uuid(writer))
    # A reader's schema equal to the writer's resolves nothing, and fastavro's resolving
    # read costs more: 0.73 s against 0.42 s per 10,000 of the demo's records (bench).
    same = reader is None or _without_uuid(reader) == _without_uuid(writer)
    parsed_reader = None if same else fastavro.parse_schema(_without_uuid(reader))

    def read(payload: bytes) -> Any:
        buffer = io.BytesIO(payload)
        value = fastavro.schemaless_reader(buffer, parsed_writer, parsed_reader)
        left = len(payload) - buffer.tell()
        if left:
            raise ValueError(f"{left} bytes follow the datum (written with another schema?)")
        return value

    _READERS[key] = read
    return read


def _without_uuid(schema: Any) -> Any:
    """``schema`` without the uuid logical type, so such strings stay strings (a declared
    ``string`` field takes them) instead of becoming ``UUID`` objects."""
    if isinstance(schema, list):
        return [_without_uuid(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    return {
        key: _without_uuid(value)
        for key, value in schema.items()
        if not (key == "logicalType" and value == "uuid")
    }
