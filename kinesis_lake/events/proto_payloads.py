"""Protobuf payloads -> the Python values the converters take, as ``proto_types.py`` types
them: messages as dicts of their fields (a scalar not sent has its default, or None when its
absence is a value; a message not sent is left out, as a JSON record leaves out what it
lacks, so a missing event time is told as JSON's is), repeated fields as lists, maps as
dicts with string keys, enums as their value's name (an unknown number as its digits),
``google.protobuf.Timestamp`` as an aware datetime and a wrapper as its value.

The Glue Schema Registry's Protobuf serializer writes, after its header, the index of the
message among every message of the schema (nested ones too, level by level, sorted by full
name) as an unsigned varint, then the message (``MessageIndexFinder`` and
``ProtobufWireFormatEncoder`` of awslabs/aws-glue-schema-registry).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor

from kinesis_lake.events.proto_schemas import (
    ProtoSchema,
    all_messages,
    compile_proto,
    message_class,
)
from kinesis_lake.events.proto_types import TIMESTAMP, WRAPPERS, is_optional

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
Reader = Callable[[bytes], dict[str, Any]]


def proto_reader(schema: ProtoSchema, message: str | None) -> Reader:
    """Reads one ``message`` (None: the file's first) of ``schema`` from its bytes."""
    descriptor = schema.message(message)
    parse, convert = message_class(descriptor).FromString, _converter(descriptor)
    return lambda payload: convert(parse(payload))


def registry_proto_reader(definition: str) -> Reader:
    """Reads a registry record's body (message index, then the message) written with the
    .proto ``definition``; raises ProtoSchemaError when the definition does not compile."""
    messages = sorted(all_messages(compile_proto(definition).file()), key=_full_name)
    readers = [(message_class(m).FromString, _converter(m)) for m in messages]

    def read(body: bytes) -> dict[str, Any]:
        index, start = _varint(body)
        if index >= len(readers):
            raise ValueError(f"message index {index} is past the schema's {len(readers)} messages")
        parse, convert = readers[index]
        return convert(parse(body[start:]))

    return read


def _varint(body: bytes) -> tuple[int, int]:
    """The unsigned varint at the start of ``body`` (as Java's ``readUInt32`` reads the
    index: at most 5 bytes), and where it ends."""
    value = 0
    for position, byte in enumerate(body[:5]):
        value |= (byte & 0x7F) << (7 * position)
        if not byte & 0x80:
            return value, position + 1
    raise ValueError("the message index is not a varint (truncated, or over 5 bytes)")


def _full_name(message: Descriptor) -> str:
    return message.full_name


_CONVERTERS: dict[Descriptor, Callable[[Any], dict[str, Any]]] = {}


def _converter(message: Descriptor) -> Callable[[Any], dict[str, Any]]:
    """A function from a parsed ``message`` to its dict; made once per message type."""
    known = _CONVERTERS.get(message)
    if known is None:
        known = _CONVERTERS[message] = _build(message)
    return known


def _of_message(inner: Descriptor) -> Callable[[Any], Any]:
    if inner.full_name == TIMESTAMP:
        return _timestamp
    if inner.full_name in WRAPPERS:
        return _wrapped
    # Looked up when first used: a message may contain itself.
    return lambda value: _converter(inner)(value)


def _build(message: Descriptor) -> Callable[[Any], dict[str, Any]]:
    defaults: dict[str, Any] = {}
    empty_lists: list[str] = []
    empty_maps: list[str] = []
    fields: dict[Any, tuple[str, Callable[[Any], Any] | None]] = {}
    for field in message.fields:
        entry = field.message_type
        if entry is not None and entry.GetOptions().map_entry:
            fields[field] = (field.name, _map(_value(entry.fields_by_name["value"])))
            empty_maps.append(field.name)
        elif field.is_repeated:
            value = _value(field)
            fields[field] = (field.name, list if value is None else _each(value))
            empty_lists.append(field.name)
        else:
            fields[field] = (field.name, _value(field))
            if field.message_type is None:
                defaults[field.name] = _default(field)

    def convert(parsed: Any) -> dict[str, Any]:
        row = dict(defaults)
        for name in empty_lists:
            row[name] = []
        for name in empty_maps:
            row[name] = {}
        for field, value in parsed.ListFields():
            known = fields.get(field)
            if known is not None:  # (not an extension)
                name, change = known
                row[name] = value if change is None else change(value)
        return row

    return convert


def _value(field: FieldDescriptor) -> Callable[[Any], Any] | None:
    """How one value of ``field`` changes (None: it is taken as it is)."""
    if field.type == FieldDescriptor.TYPE_ENUM:
        names = {number: value.name for number, value in field.enum_type.values_by_number.items()}
        return lambda number: names.get(number, str(number))
    if field.message_type is not None:
        return _of_message(field.message_type)
    return None


def _default(field: FieldDescriptor) -> Any:
    if is_optional(field):
        return None
    if field.type == FieldDescriptor.TYPE_ENUM:
        value = field.enum_type.values_by_number.get(field.default_value)
        return str(field.default_value) if value is None else value.name
    return field.default_value


def _each(change: Callable[[Any], Any]) -> Callable[[Any], list[Any]]:
    return lambda values: [change(value) for value in values]


def _map(change: Callable[[Any], Any] | None) -> Callable[[Any], dict[str, Any]]:
    def convert(entries: Any) -> dict[str, Any]:
        return {
            _key(key): value if change is None else change(value) for key, value in entries.items()
        }

    return convert


def _key(key: Any) -> str:
    if isinstance(key, bool):
        return "true" if key else "false"
    return str(key)


def _timestamp(value: Any) -> datetime:
    return _EPOCH + timedelta(seconds=value.seconds, microseconds=value.nanos // 1000)


def _wrapped(value: Any) -> Any:
    return value.value
