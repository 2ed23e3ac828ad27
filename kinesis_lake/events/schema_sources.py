"""A table's fields derived from a schema it names instead of listing ``fields:``.

A table may say ``schema_file:`` (an Avro ``.avsc`` or a JSON Schema file, relative to the
declaration file) or ``registry_schema:`` (a schema in the AWS Glue Schema Registry, at a
version number or the latest). Its fields are then derived here, as the ``EventField``s a
hand-written ``fields:`` list would give, so routing, dedup, partitioning, upserts and SQL
tables treat the table like any other, and a new registry version evolves it the way a new
declared field does (the declaration is loaded afresh by every refresh).

Mapping: records and objects become structs, arrays lists, maps (and objects of
``additionalProperties`` only) maps, enums strings; a union with null (``["null", T]``,
``type: [T, "null"]``, ``anyOf`` with ``{type: null}``) is the optional ``T``, anything else
is required (a JSON Schema property only when ``required`` lists it). Avro's
``timestamp-millis``/``-micros`` become ``timestamp``, ``date`` ``date``, ``decimal``
``decimal(p,s)``; JSON Schema's strings of ``format: date-time``/``date`` the same. What has
no column type (a union of two types, bytes, a recursive type, a time of day, ...) stops the
load naming the path inside the schema and what to do instead.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kinesis_lake.events.glue_registry import SchemaRegistryError, named_schema_version
from kinesis_lake.events.schema import (
    LIST_ELEMENT,
    MAP_VALUE,
    EventField,
    EventSchemaError,
    check_keys,
)

AVRO = "AVRO"
JSON_SCHEMA = "JSON"
_MAX_DECIMAL_PRECISION = 38
_AVRO_PRIMITIVES = {
    "boolean": "boolean",
    "int": "int",
    "long": "long",
    "float": "float",
    "double": "double",
    "string": "string",
}
_JSON_PRIMITIVES = {"boolean": "boolean", "integer": "long", "number": "double"}
_JSON_STRING_FORMATS = {"date-time": "timestamp", "date": "date"}
_NO_ZONE = "local-timestamp-millis", "local-timestamp-micros"
_TIME_OF_DAY = "time-millis", "time-micros"


class SchemaSourceError(EventSchemaError):
    """A schema a table names that cannot be read or mapped; the message says the fix."""


@dataclass(frozen=True)
class SchemaOrigin:
    """The schema a table's fields were derived from."""

    label: str
    """How messages name it: ``schema_file 'x.avsc'`` or ``registry shop, schema orders``."""
    data_format: str
    """AVRO or JSON (a JSON Schema)."""
    definition: Any
    """The schema itself, parsed: for a registry schema, the reader's schema of its records."""
    version: int | None = None
    """A registry schema's version number."""
    schema_arn: str | None = None
    """A registry schema's ARN, as its versions name it."""

    def describe(self) -> str:
        return self.label if self.version is None else f"{self.label}, version {self.version}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "data_format": self.data_format,
            "definition": self.definition,
            "version": self.version,
            "schema_arn": self.schema_arn,
        }


@dataclass(frozen=True)
class DerivedSchema:
    """The fields a schema gives a table, and where they came from."""

    fields: tuple[EventField, ...]
    origin: SchemaOrigin


def derive_fields(origin: SchemaOrigin) -> DerivedSchema:
    """The table fields of a parsed Avro schema or JSON Schema."""
    where = origin.describe()
    if origin.data_format == AVRO:
        fields = _AvroMapper(where).table_fields(origin.definition)
    elif origin.data_format == JSON_SCHEMA:
        fields = _JsonSchemaMapper(where, origin.definition).table_fields()
    else:
        raise SchemaSourceError(
            f"{where}: data format {origin.data_format} cannot declare a table yet (AVRO and "
            "JSON can); list the table's fields: instead"
        )
    return DerivedSchema(fields, origin)


_REF_KEYS = ("registry", "schema", "version", "region", "endpoint_url")
DEFAULT_REGISTRY = "default-registry"
"""The registry the Glue Schema Registry's serializers use when none is named."""


def fields_from_registry(
    ref: object, region: str | None, endpoint_url: str | None
) -> DerivedSchema:
    """A ``registry_schema: {registry, schema, version, region, endpoint_url}``: the version
    (a number, or ``latest``, the default) fetched now; ``region`` and ``endpoint_url`` are
    the defaults (the table's stream's ``registry:``)."""
    entry = check_keys(ref, _REF_KEYS, ("schema",), "registry_schema")
    registry, schema = entry.get("registry", DEFAULT_REGISTRY), entry["schema"]
    if not isinstance(registry, str) or not isinstance(schema, str):
        raise SchemaSourceError("registry_schema: registry and schema must be names (strings)")
    version = entry.get("version", "latest")
    if version != "latest" and (
        not isinstance(version, int) or isinstance(version, bool) or version < 1
    ):
        raise SchemaSourceError(
            f"registry_schema: version must be latest or a version number, got {version!r}"
        )
    region = entry.get("region", region)
    endpoint_url = entry.get("endpoint_url", endpoint_url)
    label = f"registry {registry}, schema {schema}"
    number = None if version == "latest" else version
    try:
        found = named_schema_version(registry, schema, number, region, endpoint_url)
    except SchemaRegistryError as exc:
        raise SchemaSourceError(f"registry_schema ({label}): {exc}") from None
    if found is None:
        raise SchemaSourceError(
            f"registry_schema: {label} has no version {version} in the registry; register it "
            "first, or correct registry:, schema: or version:"
        )
    try:
        definition = json.loads(found.definition)
    except json.JSONDecodeError as exc:
        raise SchemaSourceError(f"{label}: the registered definition is not JSON: {exc}") from None
    origin = SchemaOrigin(label, found.data_format, definition, found.number, found.schema_arn)
    return derive_fields(origin)


def fields_from_file(path: Path, shown: str) -> DerivedSchema:
    """A ``schema_file:``: an Avro schema (a record, usually ``.avsc``) or a JSON Schema (an
    object with ``properties``), told apart by content; ``shown`` is how the file is named."""
    try:
        definition = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise SchemaSourceError(f"schema_file {shown!r} cannot be read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise SchemaSourceError(f"schema_file {shown!r} is not JSON: {exc}") from None
    is_avro = isinstance(definition, Mapping) and definition.get("type") == "record"
    data_format = AVRO if is_avro else JSON_SCHEMA
    return derive_fields(SchemaOrigin(f"schema_file {shown!r}", data_format, definition))


def _refuse(origin: str, path: str, what: str, fix: str) -> SchemaSourceError:
    return SchemaSourceError(f"{origin}: field {path!r}: {what}; {fix}")


def _one_type(
    origin: str, path: str, members: list[Any], what: str, optional: str
) -> tuple[Any, bool]:
    """The one type beside null in a union (Avro) or a list of types (JSON Schema), and
    whether null is among them; more than one type has no column type."""
    others = [member for member in members if member != "null"]
    if len(others) != 1:
        raise _refuse(
            origin,
            path,
            f"{what} {json.dumps(members)} has no column type (a column holds one type)",
            f"use one type, or {optional} for an optional T",
        )
    return others[0], len(others) < len(members)


def _recursive(origin: str, path: str, what: str) -> SchemaSourceError:
    return _refuse(
        origin,
        path,
        f"{what} contains itself, and a table's columns cannot nest without end",
        "cut the recursion (e.g. keep a parent's id instead of the parent)",
    )


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
        with _at(self.origin, path):
            return self._field(name, avro, path, required)

    def _field(self, name: str, avro: Any, path: str, required: bool) -> EventField:
        if isinstance(avro, list):
            return self._union(name, avro, path, required)
        if isinstance(avro, str):
            return self._named(name, avro, path, required)
        if not isinstance(avro, Mapping) or "type" not in avro:
            raise _refuse(self.origin, path, f"{avro!r} is not an Avro type", "fix the schema")
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
            raise _refuse(
                self.origin,
                path,
                "Avro fixed (raw bytes) has no column type",
                "give it logicalType decimal, or send the value as a string",
            )
        return self.field(name, kind, path, required)

    def _union(self, name: str, members: list[Any], path: str, required: bool) -> EventField:
        member, nullable = _one_type(self.origin, path, members, "the union", '["null", T]')
        return self.field(name, member, path, required and not nullable)

    def _named(self, name: str, avro: str, path: str, required: bool) -> EventField:
        if avro in _AVRO_PRIMITIVES:
            return EventField(name, _AVRO_PRIMITIVES[avro], required)
        if avro == "null":
            raise _refuse(
                self.origin, path, "a field that is always null has no column type", "drop it"
            )
        if avro == "bytes":
            raise _refuse(
                self.origin,
                path,
                "Avro bytes have no column type",
                "give them logicalType decimal, or send the value as a string",
            )
        if avro in self.open:
            raise _recursive(self.origin, path, f"type {avro!r}")
        if avro not in self.named:
            raise _refuse(
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
            raise _refuse(self.origin, path, "a named Avro type has no name", "name it")
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
                    raise _refuse(
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
            raise _refuse(
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
                raise _refuse(
                    self.origin,
                    path,
                    f"decimal precision {precision!r} does not fit a column "
                    f"(1 to {_MAX_DECIMAL_PRECISION} digits)",
                    "send wider values as strings",
                )
            return EventField(name, f"decimal({precision},{scale})", required)
        if logical in _NO_ZONE:
            raise _refuse(
                self.origin,
                path,
                f"{logical} has no zone, and timestamp columns hold moments",
                "use timestamp-millis or timestamp-micros (UTC)",
            )
        if logical in _TIME_OF_DAY:
            raise _refuse(
                self.origin,
                path,
                f"{logical} (a time of day) has no column type",
                "send it without the logical type (a number) or as a string",
            )
        return None  # uuid, or a logical type Avro readers ignore: the underlying type


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
        with _at(self.origin, path):
            return self._field(name, node, path, required)

    def _field(self, name: str, node: Any, path: str, required: bool) -> EventField:
        if not isinstance(node, Mapping):
            raise _refuse(self.origin, path, f"{node!r} is not a schema", "fix the schema")
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
            kinds, nullable = _one_type(self.origin, path, kinds, "type", '[T, "null"]')
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
                raise _refuse(
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
            raise _refuse(
                self.origin, path, "a field that is always null has no column type", "drop it"
            )
        raise _refuse(
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
        raise _refuse(
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
            raise _refuse(
                self.origin,
                path,
                f"{key} of {len(others)} non-null schemas has no column type",
                f"use one schema, or {key}: [T, {{type: null}}] for an optional T",
            )
        return self.field(name, others[0], path, required and len(others) == len(options))

    def _ref(self, name: str, ref: Any, path: str, required: bool) -> EventField:
        prefixes = ("#/$defs/", "#/definitions/")
        if not isinstance(ref, str) or not ref.startswith(prefixes):
            raise _refuse(
                self.origin,
                path,
                f"$ref {ref!r} is not a local definition",
                "put the definition under $defs in the same schema",
            )
        if ref in self.open:
            raise _recursive(self.origin, path, ref)
        section, _, key = ref[2:].partition("/")
        target = (self.root.get(section) or {}).get(key)
        if target is None:
            raise _refuse(self.origin, path, f"$ref {ref} is not defined", "define it")
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


@contextmanager
def _at(origin: str, path: str) -> Iterator[None]:
    """A field's own validation failure (a name that is no column name, two names that
    differ in case only) told against its path in the schema."""
    try:
        yield
    except SchemaSourceError:
        raise
    except EventSchemaError as exc:
        raise SchemaSourceError(f"{origin}: field {path or '(top)'!r}: {exc}") from None
