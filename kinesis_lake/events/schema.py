"""The event schema: declared in YAML, validated once, shipped to executors as a plain dict.

A schema names the JSON fields worth keeping and their types; the parser turns each record into
one typed row or one quarantine row from it, and ``tables.py`` derives the Iceberg tables from it.
Keeping it in configuration means a new stream (or a new optional field) needs no code change.

Validation happens when the dataclasses are constructed, so a schema built in code is checked
exactly like one loaded from a file; ``declaration.load_declaration`` only adds the file name
(and line) to messages.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from kinesis_lake.errors import ConfigurationError
from kinesis_lake.events.columns import RESERVED_COLUMNS
from kinesis_lake.events.field_types import arrow_type, normalize_type

# Unquoted identifiers: names become Iceberg/Spark columns and must work in SQL without quoting.
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

_SCHEMA_KEYS = ("name", "fields", "event_key", "event_time_field", "event_type_field")
_FIELD_KEYS = ("name", "type", "required", "fields", "items", "values")
_ITEM_KEYS = ("type", "required", "fields", "items", "values")
_LIST_SHORTHAND = re.compile(r"list<(.+)>")
_MAP_SHORTHAND = re.compile(r"map<(.+)>")
LIST_ELEMENT = "element"
"""The name a list's items carry (Iceberg's and Parquet's)."""
MAP_VALUE = "value"
"""The name a map's values carry (Arrow's and Iceberg's); its keys are strings."""
NESTED_TYPES = ("struct", "list", "map")

# Per role: the types it may have, and why the field must be required.
_ROLES: dict[str, tuple[frozenset[str], str]] = {
    "event_key": (frozenset({"string", "long", "int"}), "every event needs a key to dedupe on"),
    "event_time_field": (frozenset({"timestamp"}), "every event needs a time to be placed in"),
    "event_type_field": (frozenset({"string"}), "every event needs a type to be counted under"),
}


class EventSchemaError(ConfigurationError):
    """An invalid schema declaration.

    Messages are written for whoever edits the YAML: they name the file (when there is one),
    the field and the allowed values.
    """


def _check_name(value: object, what: str) -> None:
    if isinstance(value, bool):
        raise EventSchemaError(
            f"{what} must be a string, got boolean {value!r} "
            "(YAML reads unquoted yes/no/on/off/true/false as booleans: quote it)"
        )
    if not isinstance(value, str):
        raise EventSchemaError(f"{what} must be a string, got {type(value).__name__} {value!r}")
    if not _IDENTIFIER.fullmatch(value):
        raise EventSchemaError(
            f"{what} {value!r} is not a valid column name: use letters, digits and underscores, "
            "not starting with a digit"
        )


def check_keys(
    data: object, allowed: tuple[str, ...], required: tuple[str, ...], where: str
) -> Mapping[str, Any]:
    """Reject non-mappings, unknown keys (typos such as ``requried``) and missing keys."""
    if not isinstance(data, Mapping):
        raise EventSchemaError(
            f"{where} must be a mapping with keys {', '.join(allowed)}, got {type(data).__name__}"
        )
    for key in data:
        if key not in allowed:
            raise EventSchemaError(
                f"{where}: unknown key {key!r}; allowed keys: {', '.join(allowed)}"
            )
    for key in required:
        if key not in data:
            raise EventSchemaError(f"{where}: missing required key {key!r}")
    return data


@dataclass(frozen=True)
class EventField:
    """One declared JSON field: its name (also the column name), type and whether it must be
    present and non-null (rows without it are quarantined).

    ``type: struct`` declares a nested object with ``fields``; ``type: list`` an array whose
    ``items`` are declared as a field of their own (named ``element``); ``list<T>`` is short
    for a list of optional ``T``. ``type: map`` an object of any keys (strings) whose
    ``values`` are declared the same way (named ``value``); ``map<T>`` is short for one of
    optional ``T``: what an Avro map or a JSON Schema object of ``additionalProperties``
    becomes.
    """

    name: str
    type: str
    required: bool = False
    fields: tuple[EventField, ...] = ()
    items: EventField | None = None
    values: EventField | None = None

    def __post_init__(self) -> None:
        _check_name(self.name, "field name")
        if not isinstance(self.type, str):
            raise EventSchemaError(
                f"field {self.name!r}: type must be a string, got {type(self.type).__name__}"
            )
        shorthand = _LIST_SHORTHAND.fullmatch(self.type.strip())
        if shorthand and self.items is None:
            object.__setattr__(self, "items", EventField(LIST_ELEMENT, shorthand[1].strip()))
            object.__setattr__(self, "type", "list")
        map_shorthand = _MAP_SHORTHAND.fullmatch(self.type.strip())
        if map_shorthand and self.values is None:
            object.__setattr__(self, "values", EventField(MAP_VALUE, map_shorthand[1].strip()))
            object.__setattr__(self, "type", "map")
        if self.type == "struct":
            object.__setattr__(self, "fields", tuple(self.fields))
            if not self.fields:
                raise EventSchemaError(f"field {self.name!r}: a struct declares its fields")
            _check_unique(self.fields, f"struct {self.name!r}")
        elif self.fields:
            raise EventSchemaError(f"field {self.name!r}: only a struct has fields")
        for kind, inner, key in (("list", self.items, "items"), ("map", self.values, "values")):
            if self.type == kind and inner is None:
                raise EventSchemaError(
                    f"field {self.name!r}: a {kind} declares its {key} ({key}: {{type: ...}}) "
                    f"or is spelled {kind}<type>"
                )
            if self.type != kind and inner is not None:
                raise EventSchemaError(f"field {self.name!r}: only a {kind} has {key}")
        if self.type not in NESTED_TYPES:
            try:
                canonical = normalize_type(self.type)
            except ValueError as exc:
                raise EventSchemaError(f"field {self.name!r}: {exc}") from None
            # Canonical spelling so equal schemas compare and evolve as equal.
            object.__setattr__(self, "type", canonical)
        if not isinstance(self.required, bool):
            raise EventSchemaError(
                f"field {self.name!r}: required must be true or false, got {self.required!r}"
            )

    @property
    def is_nested(self) -> bool:
        return self.type in NESTED_TYPES

    def arrow_field(self) -> pa.Field:
        return pa.field(self.name, self.arrow_type(), nullable=not self.required)

    def arrow_type(self) -> pa.DataType:
        if self.type == "struct":
            return pa.struct([child.arrow_field() for child in self.fields])
        if self.items is not None:
            return pa.list_(self.items.arrow_field())
        if self.values is not None:
            return pa.map_(pa.string(), self.values.arrow_field())
        return arrow_type(self.type)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"name": self.name, "type": self.type, "required": self.required}
        if self.fields:
            data["fields"] = [child.to_dict() for child in self.fields]
        if self.items is not None:
            data["items"] = {k: v for k, v in self.items.to_dict().items() if k != "name"}
        if self.values is not None:
            data["values"] = {k: v for k, v in self.values.to_dict().items() if k != "name"}
        return data

    @classmethod
    def from_dict(cls, data: object, where: str) -> EventField:
        item = check_keys(data, _FIELD_KEYS, ("name", "type"), where)
        raw_fields = item.get("fields", [])
        if not isinstance(raw_fields, list):
            raise EventSchemaError(f"{where}: fields must be a list of field mappings")
        return cls(
            item["name"],
            item["type"],
            item.get("required", False),
            tuple(cls.from_dict(f, f"{where}.fields[{i}]") for i, f in enumerate(raw_fields)),
            cls._inner(item.get("items"), LIST_ELEMENT, f"{where}.items"),
            cls._inner(item.get("values"), MAP_VALUE, f"{where}.values"),
        )

    @classmethod
    def _inner(cls, raw: object, name: str, where: str) -> EventField | None:
        """A list's items or a map's values: a field without a name of its own."""
        if raw is None:
            return None
        inner = check_keys(raw, _ITEM_KEYS, ("type",), where)
        return cls.from_dict({"name": name, **inner}, where)


def _check_unique(fields: tuple[EventField, ...], where: str) -> None:
    seen: dict[str, str] = {}
    for field in fields:
        if field.name.lower() in seen:
            raise EventSchemaError(
                f"{where}: field {field.name!r} duplicates field {seen[field.name.lower()]!r} "
                "(column names are case-insensitive in Spark)"
            )
        seen[field.name.lower()] = field.name


@dataclass(frozen=True)
class EventSchema:
    """A validated event schema.

    ``event_key`` (dedupe), ``event_time_field`` (event time, else Kinesis arrival time) and
    ``event_type_field`` (aggregate grouping, else ``"all"``) are optional roles that must name
    required fields of a suitable type.
    """

    name: str
    fields: tuple[EventField, ...]
    event_key: str | None = None
    event_time_field: str | None = None
    event_type_field: str | None = None

    def __post_init__(self) -> None:
        _check_name(self.name, "schema name")
        # Accept any sequence but store a tuple, so the schema stays hashable.
        object.__setattr__(self, "fields", tuple(self.fields))
        if not self.fields:
            raise EventSchemaError("fields: declare at least one field")
        seen: dict[str, str] = {}
        for field in self.fields:
            if field.name.lower() in RESERVED_COLUMNS:
                raise EventSchemaError(
                    f"field {field.name!r}: name is reserved for a pipeline column; "
                    f"reserved names: {', '.join(sorted(RESERVED_COLUMNS))}"
                )
            if field.name.lower() in seen:
                raise EventSchemaError(
                    f"field {field.name!r}: duplicate of field {seen[field.name.lower()]!r} "
                    "(column names are case-insensitive in Spark)"
                )
            seen[field.name.lower()] = field.name
        by_name = {field.name: field for field in self.fields}
        for role, (types, why) in _ROLES.items():
            self._check_role(role, by_name, types, why)

    def _check_role(
        self, role: str, by_name: dict[str, EventField], types: frozenset[str], why: str
    ) -> None:
        target = getattr(self, role)
        if target is None:
            return
        if not isinstance(target, str):
            raise EventSchemaError(f"{role} must be a field name, got {target!r}")
        field = by_name.get(target)
        if field is None:
            raise EventSchemaError(
                f"{role} {target!r} is not a declared field; declared fields: {', '.join(by_name)}"
            )
        if field.type not in types:
            allowed = ", ".join(sorted(types))
            raise EventSchemaError(
                f"{role} {target!r} has type {field.type}; allowed types: {allowed}"
            )
        if not field.required:
            raise EventSchemaError(f"{role} {target!r} must be declared required: true ({why})")

    def arrow_schema(self) -> pa.Schema:
        """Arrow schema of the event fields alone, in declared order."""
        return pa.schema([field.arrow_field() for field in self.fields])

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form, the same shape as the YAML, for shipping to Spark executors."""
        return {
            "name": self.name,
            "fields": [field.to_dict() for field in self.fields],
            "event_key": self.event_key,
            "event_time_field": self.event_time_field,
            "event_type_field": self.event_type_field,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EventSchema:
        """Build and validate a schema from ``to_dict()`` output or a parsed YAML document."""
        data = check_keys(data, _SCHEMA_KEYS, ("name", "fields"), "schema")
        raw_fields = data["fields"]
        if not isinstance(raw_fields, list):
            raise EventSchemaError(
                "fields must be a list of {name, type, required} mappings, "
                f"got {type(raw_fields).__name__}"
            )
        fields = [
            EventField.from_dict(raw, f"fields[{index}]") for index, raw in enumerate(raw_fields)
        ]
        return cls(
            name=data["name"],
            fields=tuple(fields),
            event_key=data.get("event_key"),
            event_time_field=data.get("event_time_field"),
            event_type_field=data.get("event_type_field"),
        )
