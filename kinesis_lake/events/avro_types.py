"""The table fields of an Avro schema (a record: each of its fields becomes a column).

Records become structs, arrays lists, maps maps, enums strings; a union with null
(``["null", T]``) is the optional ``T``, and so is a field with a default (records of older
versions may lack it); anything else is required. ``timestamp-millis``/``-micros`` become
``timestamp``, ``date`` ``date``, ``decimal`` ``decimal(p,s)``. What has no column type (a
union of two types, bytes, fixed, a recursive type, a time of day, a local timestamp) stops
the load naming the path inside the schema and what to do instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kinesis_lake.events.schema import LIST_ELEMENT, MAP_VALUE, EventField
from kinesis_lake.events.schema_mapping import (
    SchemaSourceError,
    at_path,
    one_type,
    recursive,
    refuse,
)

_MAX_DECIMAL_PRECISION = 38
_AVRO_PRIMITIVES = {
    "boolean": "boolean",
    "int": "int",
    "long": "long",
    "float": "float",
    "double": "double",
    "string": "string",
}
_NO_ZONE = "local-timestamp-millis", "local-timestamp-micros"
_TIME_OF_DAY = "time-millis", "time-micros"


def avro_table_fields(origin: str, schema: Any) -> tuple[EventField, ...]:
    """The columns of Avro record ``schema``; ``origin`` names it in messages."""
    return _AvroMapper(origin).table_fields(schema)


class _AvroMapper:
    """One Avro schema's walk: named types are remembered as they are defined, so later
    references by name resolve, and a type that contains itself is refused."""

    def __init__(self, origin: str) -> None:
        self.origin = origin
        self.named: dict[str, Any] = {}
        self.open: set[str] = set()
        self.namespace: str | None = None

    def table_fields(self, schema: Any) -> tuple[EventField, ...]:
        if not isinstance(schema, Mapping) or schema.get("type") != "record":
            raise SchemaSourceError(
                f"{self.origin}: the Avro schema must be a record (type: record): each of its "
                "fields becomes a column"
            )
        struct = self.field("record", schema, "", required=True)
        return struct.fields

    def field(self, name: str, avro: Any, path: str, required: bool = True) -> EventField:
        with at_path(self.origin, path):
            return self._field(name, avro, path, required)

    def _field(self, name: str, avro: Any, path: str, required: bool) -> EventField:
        if isinstance(avro, list):
            return self._union(name, avro, path, required)
        if isinstance(avro, str):
            return self._named(name, avro, path, required)
        if not isinstance(avro, Mapping) or "type" not in avro:
            raise refuse(self.origin, path, f"{avro!r} is not an Avro type", "fix the schema")
        logical = avro.get("logicalType")
        if logical is not None:
            mapped = self._logical(name, avro, logical, path, required)
            if mapped is not None:
                return mapped
        kind = avro["type"]
        if kind == "record":
            return self._record(name, avro, path, required)
        if kind == "enum":
            self._define(avro, path)
            return EventField(name, "string", required)
        if kind == "array":
            items = self.field(LIST_ELEMENT, avro.get("items"), f"{path}[]")
            return EventField(name, "list", required, items=items)
        if kind == "map":
            values = self.field(MAP_VALUE, avro.get("values"), f"{path}{{}}")
            return EventField(name, "map", required, values=values)
        if kind == "fixed":
            self._define(avro, path)
            raise refuse(
                self.origin,
                path,
                "Avro fixed (raw bytes) has no column type",
                "give it logicalType decimal, or send the value as a string",
            )
        return self.field(name, kind, path, required)

    def _union(self, name: str, members: list[Any], path: str, required: bool) -> EventField:
        member, nullable = one_type(self.origin, path, members, "the union", '["null", T]')
        return self.field(name, member, path, required and not nullable)

    def _named(self, name: str, avro: str, path: str, required: bool) -> EventField:
        if avro in _AVRO_PRIMITIVES:
            return EventField(name, _AVRO_PRIMITIVES[avro], required)
        if avro == "null":
            raise refuse(
                self.origin, path, "a field that is always null has no column type", "drop it"
            )
        if avro == "bytes":
            raise refuse(
                self.origin,
                path,
                "Avro bytes have no column type",
                "give them logicalType decimal, or send the value as a string",
            )
        if avro in self.open:
            raise recursive(self.origin, path, f"type {avro!r}")
        if avro not in self.named:
            raise refuse(
                self.origin,
                path,
                f"type {avro!r} is not defined before it is used",
                "define it earlier in the schema",
            )
        return self.field(name, self.named[avro], path, required)

    def _define(self, avro: Mapping[str, Any], path: str) -> tuple[str, ...]:
        """Remember a named type under its full name (namespaces inherited from the
        enclosing record, as Avro's spec says) and its short name; both are returned."""
        name = avro.get("name")
        if not isinstance(name, str):
            raise refuse(self.origin, path, "a named Avro type has no name", "name it")
        namespace = avro.get("namespace", self.namespace)
        full = name if "." in name or not namespace else f"{namespace}.{name}"
        names = (full, full.rpartition(".")[2])
        for each in names:
            self.named[each] = avro
        return names

    def _record(self, name: str, avro: Mapping[str, Any], path: str, required: bool) -> EventField:
        names = self._define(avro, path)
        enclosing, self.namespace = self.namespace, names[0].rpartition(".")[0] or None
        self.open.update(names)
        try:
            children = []
            for child in avro.get("fields") or []:
                child_name = child.get("name") if isinstance(child, Mapping) else None
                if not isinstance(child_name, str):
                    raise refuse(
                        self.origin, path, f"record field {child!r} has no name", "name it"
                    )
                child_path = f"{path}.{child_name}" if path else child_name
                # A field with a default may be missing from records of older versions, and
                # a column added to a table with rows must be optional: so it is optional.
                required_child = "default" not in child
                children.append(
                    self.field(child_name, child.get("type"), child_path, required_child)
                )
        finally:
            self.open.difference_update(names)
            self.namespace = enclosing
        if not children:
            raise refuse(
                self.origin, path or names[0], "a record without fields has no columns", "drop it"
            )
        return EventField(name, "struct", required, tuple(children))

    def _logical(
        self, name: str, avro: Mapping[str, Any], logical: str, path: str, required: bool
    ) -> EventField | None:
        base = avro["type"]
        if logical in ("timestamp-millis", "timestamp-micros") and base == "long":
            return EventField(name, "timestamp", required)
        if logical == "date" and base == "int":
            return EventField(name, "date", required)
        if logical == "decimal" and base in ("bytes", "fixed"):
            if base == "fixed":
                self._define(avro, path)
            precision, scale = avro.get("precision"), avro.get("scale", 0)
            if not isinstance(precision, int) or not 1 <= precision <= _MAX_DECIMAL_PRECISION:
                raise refuse(
                    self.origin,
                    path,
                    f"decimal precision {precision!r} does not fit a column "
                    f"(1 to {_MAX_DECIMAL_PRECISION} digits)",
                    "send wider values as strings",
                )
            return EventField(name, f"decimal({precision},{scale})", required)
        if logical in _NO_ZONE:
            raise refuse(
                self.origin,
                path,
                f"{logical} has no zone, and timestamp columns hold moments",
                "use timestamp-millis or timestamp-micros (UTC)",
            )
        if logical in _TIME_OF_DAY:
            raise refuse(
                self.origin,
                path,
                f"{logical} (a time of day) has no column type",
                "send it without the logical type (a number) or as a string",
            )
        return None  # uuid, or a logical type Avro readers ignore: the underlying type
