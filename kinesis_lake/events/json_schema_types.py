"""The table fields of a JSON Schema (an object: each of its properties becomes a column).

Objects become structs (objects of ``additionalProperties`` only maps), arrays lists, string
enums strings; a property is required only when ``required`` lists it, and a list of types
with null (``type: [T, "null"]``, ``anyOf`` with ``{type: null}``) is the optional ``T``.
Strings of ``format: date-time``/``date`` become ``timestamp``/``date``. What has no column
type (two types, a recursive ``$ref``, an object without properties) stops the load naming
the path inside the schema and what to do instead.
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

_JSON_PRIMITIVES = {"boolean": "boolean", "integer": "long", "number": "double"}
_JSON_STRING_FORMATS = {"date-time": "timestamp", "date": "date"}


def json_schema_table_fields(origin: str, root: Any) -> tuple[EventField, ...]:
    """The columns of JSON Schema ``root``; ``origin`` names it in messages."""
    return _JsonSchemaMapper(origin, root).table_fields()


class _JsonSchemaMapper:
    """One JSON Schema's walk; local ``$ref``s (``#/$defs/...``, ``#/definitions/...``)
    resolve, a reference to itself is refused."""

    def __init__(self, origin: str, root: Any) -> None:
        self.origin = origin
        self.root = root
        self.open: set[str] = set()

    def table_fields(self) -> tuple[EventField, ...]:
        root = self.root
        if not isinstance(root, Mapping) or not isinstance(root.get("properties"), Mapping):
            raise SchemaSourceError(
                f"{self.origin}: the JSON Schema must describe an object with properties: each "
                "property becomes a column"
            )
        return self.field("record", root, "", required=True).fields

    def field(self, name: str, node: Any, path: str, required: bool) -> EventField:
        with at_path(self.origin, path):
            return self._field(name, node, path, required)

    def _field(self, name: str, node: Any, path: str, required: bool) -> EventField:
        if not isinstance(node, Mapping):
            raise refuse(self.origin, path, f"{node!r} is not a schema", "fix the schema")
        if "$ref" in node:
            return self._ref(name, node["$ref"], path, required)
        for key in ("anyOf", "oneOf"):
            if key in node:
                return self._alternatives(name, node[key], key, path, required)
        kinds = node.get("type")
        if kinds is None and "enum" in node:
            kinds = "string" if all(isinstance(v, str) for v in node["enum"]) else None
        if kinds is None and "properties" in node:
            kinds = "object"
        if isinstance(kinds, list):
            kinds, nullable = one_type(self.origin, path, kinds, "type", '[T, "null"]')
            required = required and not nullable
        return self._typed(name, node, kinds, path, required)

    def _typed(
        self, name: str, node: Mapping[str, Any], kind: Any, path: str, required: bool
    ) -> EventField:
        if kind in _JSON_PRIMITIVES:
            return EventField(name, _JSON_PRIMITIVES[kind], required)
        if kind == "string":
            return EventField(
                name, _JSON_STRING_FORMATS.get(str(node.get("format")), "string"), required
            )
        if kind == "array":
            items = node.get("items")
            if not isinstance(items, Mapping):
                raise refuse(
                    self.origin,
                    path,
                    "an array without one items schema has no column type",
                    "give it items: {type: ...}",
                )
            nullable = self._nullable(items)
            element = self.field(LIST_ELEMENT, items, f"{path}[]", required=not nullable)
            return EventField(name, "list", required, items=element)
        if kind == "object":
            return self._object(name, node, path, required)
        if kind == "null":
            raise refuse(
                self.origin, path, "a field that is always null has no column type", "drop it"
            )
        raise refuse(
            self.origin,
            path,
            "has no type" if kind is None else f"type {kind!r} is not a JSON Schema type",
            "give it a type: string, integer, number, boolean, object or array",
        )

    def _object(self, name: str, node: Mapping[str, Any], path: str, required: bool) -> EventField:
        properties = node.get("properties")
        if isinstance(properties, Mapping) and properties:
            listed = node.get("required") or []
            children = tuple(
                self.field(key, value, f"{path}.{key}" if path else key, key in listed)
                for key, value in properties.items()
            )
            return EventField(name, "struct", required, children)
        extra = node.get("additionalProperties")
        if isinstance(extra, Mapping):
            nullable = self._nullable(extra)
            values = self.field(MAP_VALUE, extra, f"{path}{{}}", required=not nullable)
            return EventField(name, "map", required, values=values)
        raise refuse(
            self.origin,
            path,
            "an object without properties has no columns",
            "declare its properties, or additionalProperties: {type: ...} for a map",
        )

    def _alternatives(
        self, name: str, options: Any, key: str, path: str, required: bool
    ) -> EventField:
        options = options if isinstance(options, list) else []
        others = [option for option in options if not self._is_null(option)]
        if len(others) != 1:
            raise refuse(
                self.origin,
                path,
                f"{key} of {len(others)} non-null schemas has no column type",
                f"use one schema, or {key}: [T, {{type: null}}] for an optional T",
            )
        return self.field(name, others[0], path, required and len(others) == len(options))

    def _ref(self, name: str, ref: Any, path: str, required: bool) -> EventField:
        prefixes = ("#/$defs/", "#/definitions/")
        if not isinstance(ref, str) or not ref.startswith(prefixes):
            raise refuse(
                self.origin,
                path,
                f"$ref {ref!r} is not a local definition",
                "put the definition under $defs in the same schema",
            )
        if ref in self.open:
            raise recursive(self.origin, path, ref)
        section, _, key = ref[2:].partition("/")
        target = (self.root.get(section) or {}).get(key)
        if target is None:
            raise refuse(self.origin, path, f"$ref {ref} is not defined", "define it")
        self.open.add(ref)
        try:
            return self.field(name, target, path, required)
        finally:
            self.open.discard(ref)

    def _nullable(self, node: Mapping[str, Any]) -> bool:
        kinds = node.get("type")
        options = node.get("anyOf") or node.get("oneOf") or []
        return (isinstance(kinds, list) and "null" in kinds) or any(
            self._is_null(option) for option in options
        )

    @staticmethod
    def _is_null(node: Any) -> bool:
        return isinstance(node, Mapping) and node.get("type") == "null"
