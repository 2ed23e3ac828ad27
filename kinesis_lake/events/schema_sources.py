"""A table's fields derived from a schema it names instead of listing ``fields:``.

A table may say ``schema_file:`` (an Avro ``.avsc``, a JSON Schema or a ``.proto`` file,
relative to the declaration file) or ``registry_schema:`` (a schema in the AWS Glue Schema
Registry, at a version number or the latest). Its fields are then derived here, as the
``EventField``s a hand-written ``fields:`` list would give, so routing, dedup,
partitioning, upserts and SQL tables treat the table like any other, and a new registry
version evolves it the way a new declared field does (the declaration is loaded afresh by
every refresh).

How each schema maps to columns, and what it refuses: ``avro_types.py``,
``json_schema_types.py`` and ``proto_types.py`` (a .proto's table is its first message, or
the ``message`` the table or its ``registry_schema:`` names; its event time is required).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kinesis_lake.events.avro_types import avro_table_fields
from kinesis_lake.events.glue_registry import SchemaRegistryError, named_schema_version
from kinesis_lake.events.json_schema_types import json_schema_table_fields
from kinesis_lake.events.proto_schemas import (
    ProtoSchema,
    ProtoSchemaError,
    compile_proto,
    compile_proto_file,
)
from kinesis_lake.events.proto_types import event_time_column, proto_table_fields
from kinesis_lake.events.schema import EventField, check_keys
from kinesis_lake.events.schema_mapping import SchemaSourceError

AVRO = "AVRO"
JSON_SCHEMA = "JSON"
PROTOBUF = "PROTOBUF"


@dataclass(frozen=True)
class SchemaOrigin:
    """The schema a table's fields were derived from."""

    label: str
    """How messages name it: ``schema_file 'x.avsc'`` or ``registry shop, schema orders``."""
    data_format: str
    """AVRO, JSON (a JSON Schema) or PROTOBUF."""
    definition: Any
    """The schema itself, parsed: for a registry schema, the reader's schema of its records;
    for Protobuf the compiled file (``ProtoSchema``'s fields) and the table's ``message``."""
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


def derive_fields(origin: SchemaOrigin, event_time: str | None = None) -> DerivedSchema:
    """The table fields of a parsed Avro schema, JSON Schema or .proto message, whose event
    time is the field ``event_time``."""
    where = origin.describe()
    if origin.data_format == AVRO:
        fields = avro_table_fields(where, origin.definition)
    elif origin.data_format == JSON_SCHEMA:
        fields = json_schema_table_fields(where, origin.definition)
    elif origin.data_format == PROTOBUF:
        definition = dict(origin.definition)
        message = definition.pop("message")
        try:
            fields = proto_table_fields(where, ProtoSchema(**definition), message)
            fields = event_time_column(fields, event_time)
        except ProtoSchemaError as exc:
            raise SchemaSourceError(f"{where}: {exc}") from None
    else:
        raise SchemaSourceError(
            f"{where}: data format {origin.data_format} cannot declare a table (AVRO, JSON and "
            "PROTOBUF can); list the table's fields: instead"
        )
    return DerivedSchema(fields, origin)


_REF_KEYS = ("registry", "schema", "version", "region", "endpoint_url", "message")
DEFAULT_REGISTRY = "default-registry"
"""The registry the Glue Schema Registry's serializers use when none is named."""


def fields_from_registry(
    ref: object, region: str | None, endpoint_url: str | None, event_time: str | None = None
) -> DerivedSchema:
    """A ``registry_schema: {registry, schema, version, region, endpoint_url}``: the version
    (a number, or ``latest``, the default) fetched now; ``region`` and ``endpoint_url`` are
    the defaults (the table's stream's ``registry:``); ``message`` picks a Protobuf schema's
    message (its first by default)."""
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
    message = entry.get("message")
    if message is not None and (found.data_format != PROTOBUF or not isinstance(message, str)):
        raise SchemaSourceError("registry_schema: message names a message of a Protobuf schema")
    if found.data_format == PROTOBUF:
        try:
            compiled = compile_proto(found.definition)
        except ProtoSchemaError as exc:
            raise SchemaSourceError(f"{label}: {exc}") from None
        definition: Any = {**compiled.to_dict(), "message": message}
    else:
        try:
            definition = json.loads(found.definition)
        except json.JSONDecodeError as exc:
            raise SchemaSourceError(
                f"{label}: the registered definition is not JSON: {exc}"
            ) from None
    origin = SchemaOrigin(label, found.data_format, definition, found.number, found.schema_arn)
    return derive_fields(origin, event_time)


def fields_from_file(
    path: Path, shown: str, message: str | None = None, event_time: str | None = None
) -> DerivedSchema:
    """A ``schema_file:``: a ``.proto`` file (its ``message``, by default its first), else an
    Avro schema (a record, usually ``.avsc``) or a JSON Schema (an object with
    ``properties``), told apart by content; ``shown`` is how the file is named."""
    if path.suffix == ".proto":
        try:
            compiled = compile_proto_file(path, shown)
        except ProtoSchemaError as exc:
            raise SchemaSourceError(f"schema_file {shown!r}: {exc}") from None
        definition = {**compiled.to_dict(), "message": message}
        origin = SchemaOrigin(f"schema_file {shown!r}", PROTOBUF, definition)
        return derive_fields(origin, event_time)
    try:
        definition = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise SchemaSourceError(f"schema_file {shown!r} cannot be read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise SchemaSourceError(f"schema_file {shown!r} is not JSON: {exc}") from None
    is_avro = isinstance(definition, Mapping) and definition.get("type") == "record"
    data_format = AVRO if is_avro else JSON_SCHEMA
    return derive_fields(SchemaOrigin(f"schema_file {shown!r}", data_format, definition))
