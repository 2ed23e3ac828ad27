"""The table fields of a Protobuf message (each of its fields becomes a column).

Messages become structs, repeated fields lists, maps maps (keys as strings), enums strings
(the value's name), ``google.protobuf.Timestamp`` ``timestamp`` and the wrappers
(``google.protobuf.Int64Value``...) their optional value. Integers keep their width (a
``uint32`` needs a ``long``; a ``uint64`` past a long's range is quarantined).

Proto3 has no ``required``: any field may be absent on the wire, and a field added by a
newer version of the schema is absent from every record written before it. A plain scalar
still always has a value (its default when not sent), so it is a required column; every
other field whose absence can be told (a message field, ``optional``, a member of a
``oneof``; in proto2 what is not ``required``) is an optional column, null when not sent.
The one exception is the table's event time (``event_time_column``). What has no column
type (``bytes``, a recursive message, a message without fields, the other well-known types)
stops the load naming the .proto's line, the path and what to do instead.
"""

from __future__ import annotations

import functools
from dataclasses import replace

from google.protobuf.descriptor import Descriptor, FieldDescriptor, FileDescriptor
from google.protobuf.descriptor_pb2 import FileDescriptorProto

from kinesis_lake.events.proto_schemas import ProtoSchema
from kinesis_lake.events.schema import LIST_ELEMENT, MAP_VALUE, EventField
from kinesis_lake.events.schema_mapping import at_path, recursive, refuse

_F = FieldDescriptor
SCALARS = {
    _F.TYPE_DOUBLE: "double",
    _F.TYPE_FLOAT: "float",
    _F.TYPE_INT64: "long",
    _F.TYPE_SINT64: "long",
    _F.TYPE_SFIXED64: "long",
    _F.TYPE_UINT64: "long",
    _F.TYPE_FIXED64: "long",
    _F.TYPE_INT32: "int",
    _F.TYPE_SINT32: "int",
    _F.TYPE_SFIXED32: "int",
    _F.TYPE_UINT32: "long",
    _F.TYPE_FIXED32: "long",
    _F.TYPE_BOOL: "boolean",
    _F.TYPE_STRING: "string",
    _F.TYPE_ENUM: "string",
}
TIMESTAMP = "google.protobuf.Timestamp"
WRAPPERS = {
    f"google.protobuf.{name}Value": kind
    for name, kind in (
        ("Double", "double"),
        ("Float", "float"),
        ("Int64", "long"),
        ("UInt64", "long"),
        ("Int32", "int"),
        ("UInt32", "long"),
        ("Bool", "boolean"),
        ("String", "string"),
    )
}
"""Each wrapper's value type: a wrapper is how proto3 said "optional" before it could."""


def proto_table_fields(
    origin: str, schema: ProtoSchema, message: str | None
) -> tuple[EventField, ...]:
    """The columns of ``message`` (None: the file's first) of ``schema``; ``origin`` names
    the schema in messages."""
    return _ProtoMapper(origin, schema).table_fields(message)


def is_optional(field: FieldDescriptor) -> bool:
    """Whether a record without the field has it null, not its default (see the module's
    docstring)."""
    if field.containing_oneof is not None:  # proto3 ``optional`` is a oneof of its own
        return True
    if is_proto2(field.file):
        return not field.is_required
    return field.message_type is not None


def event_time_column(fields: tuple[EventField, ...], name: str | None) -> tuple[EventField, ...]:
    """``fields`` with the event time column ``name`` required: a .proto cannot say a field
    is required, yet every event needs a time, so a record without it is quarantined as a
    JSON record without its (required) event time is, rather than the load refusing it."""
    return tuple(
        replace(field, required=True) if field.name == name and field.type == "timestamp" else field
        for field in fields
    )


@functools.cache
def is_proto2(file: FileDescriptor) -> bool:
    """Whether ``file`` is proto2 (upb's descriptors do not say: its descriptor proto does)."""
    return FileDescriptorProto.FromString(file.serialized_pb).syntax in ("", "proto2")


class _ProtoMapper:
    def __init__(self, origin: str, schema: ProtoSchema) -> None:
        self.origin = origin
        self.schema = schema
        self.open: set[str] = set()

    def table_fields(self, message: str | None) -> tuple[EventField, ...]:
        return self.message("record", self.schema.message(message), "", True).fields

    def message(self, name: str, message: Descriptor, path: str, required: bool) -> EventField:
        if message.full_name in self.open:
            raise recursive(self.origin, path, f"message {message.full_name}")
        self.open.add(message.full_name)
        try:
            children = tuple(self.field(field, path) for field in message.fields)
        finally:
            self.open.discard(message.full_name)
        if not children:
            raise refuse(
                self.origin,
                path or message.full_name,
                "a message without fields has no columns",
                "drop it",
            )
        return EventField(name, "struct", required, children)

    def field(self, field: FieldDescriptor, parent: str) -> EventField:
        path = f"{parent}.{field.name}" if parent else field.name
        line = self.schema.field_line(field.containing_type.full_name, field.index)
        where = self.origin if line is None else f"{self.origin}, line {line}"
        origin, self.origin = self.origin, where
        try:
            with at_path(where, path):
                return self._field(field, path)
        finally:
            self.origin = origin

    def _field(self, field: FieldDescriptor, path: str) -> EventField:
        entry = field.message_type
        if entry is not None and entry.GetOptions().map_entry:
            value = entry.fields_by_name["value"]  # keys (integers, bools) become strings
            values = self.value(MAP_VALUE, value, f"{path}{{}}", True)
            return EventField(field.name, "map", True, values=values)
        if field.is_repeated:
            items = self.value(LIST_ELEMENT, field, f"{path}[]", True)
            return EventField(field.name, "list", True, items=items)
        return self.value(field.name, field, path, not is_optional(field))

    def value(self, name: str, field: FieldDescriptor, path: str, required: bool) -> EventField:
        """One value of ``field`` (a whole field, a list's element or a map's value)."""
        if field.type in SCALARS:
            return EventField(name, SCALARS[field.type], required)
        if field.type == _F.TYPE_BYTES:
            raise refuse(
                self.origin,
                path,
                "protobuf bytes have no column type",
                "send the value as a string (e.g. base64)",
            )
        message = field.message_type
        if message.full_name == TIMESTAMP:
            return EventField(name, "timestamp", required)
        if message.full_name in WRAPPERS:
            return EventField(name, WRAPPERS[message.full_name], False)
        if message.full_name.startswith("google.protobuf."):
            raise refuse(
                self.origin,
                path,
                f"{message.full_name} has no column type",
                "use a message of your own, a scalar or google.protobuf.Timestamp",
            )
        return self.message(name, message, path, required)
