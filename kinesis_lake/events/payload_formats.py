"""What a stream's record payloads are: a stream's ``format:`` in the declaration file.

* ``json`` (the default): one JSON object per record, decoded as it always was.
* ``avro``: one Avro datum per record (binary encoding, no container file), written with the
  schema the stream declares inline (``schema:``) or in a file (``schema_file:``, relative to
  the declaration file).
* ``protobuf``: one Protobuf message per record, of the .proto given in a file
  (``schema_file:``) or inline (``schema:``, the .proto text), compiled at load time
  (``proto_schemas.py``); ``message:`` names which of its messages (default: its first).
* ``glue-schema-registry``: the AWS Glue Schema Registry's wire format (its serializers'
  header, then an Avro, JSON or Protobuf payload); each record names its schema version, which is
  fetched from the registry (``registry: {region, endpoint_url}``, else boto3's own
  resolution). A ``schema:`` or ``schema_file:`` there is the reader's schema: every writer's
  version is resolved against it, so records of older versions come out in today's shape.

Schemas are read and checked when the declaration loads, so the executors receive them in the
declaration itself and a schema that cannot be used stops the load, not the ingestion.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fastavro

from kinesis_lake.errors import ConfigurationError
from kinesis_lake.events.proto_schemas import ProtoSchemaError, compile_proto, compile_proto_file

JSON = "json"
AVRO = "avro"
PROTOBUF = "protobuf"
GLUE_SCHEMA_REGISTRY = "glue-schema-registry"
FORMATS = (JSON, AVRO, PROTOBUF, GLUE_SCHEMA_REGISTRY)
PRODUCED_FORMATS = (JSON, AVRO, GLUE_SCHEMA_REGISTRY)
"""The formats ``kinesis-lake produce`` and the demo write the demo's events in (Avro behind
the registry's header); a Protobuf stream's records come from its own producers."""
FORMAT_KEYS = ("format", "schema", "schema_file", "registry", "message")
"""A stream entry's keys that describe its payloads."""
_REGISTRY_KEYS = ("region", "endpoint_url")


class PayloadFormatError(ConfigurationError):
    """A stream's ``format:`` entry that cannot be used; the message says the fix."""


@dataclass(frozen=True)
class PayloadFormat:
    """How one stream's payloads decode: the format, the Avro (reader's) schema as parsed
    JSON or the compiled .proto (``ProtoSchema.to_dict``), and where the schema registry is."""

    kind: str = JSON
    schema: Any = None
    region: str | None = None
    endpoint_url: str | None = None
    readers: Any = None
    """Without ``schema``: per registry schema ARN, the version its tables were declared
    from, ``{"number": n, "schema": parsed Avro}``, the reader's schema of its records."""
    message: str | None = None
    """A ``protobuf`` stream's message (None: the .proto's first)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "schema": self.schema,
            "region": self.region,
            "endpoint_url": self.endpoint_url,
            "readers": self.readers,
            "message": self.message,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PayloadFormat:
        return cls(**data)


JSON_FORMAT = PayloadFormat()


def payload_format(entry: Mapping[str, Any], base: Path | None) -> PayloadFormat:
    """The format a stream entry declares (``json`` when it names none); ``base`` is the
    declaration file's folder, where ``schema_file`` is looked up."""
    kind = entry.get("format", JSON)
    if kind not in FORMATS:
        raise PayloadFormatError(f"format {kind!r} is unknown; use one of {', '.join(FORMATS)}")
    if kind == JSON:
        extra = [key for key in ("schema", "schema_file", "registry", "message") if key in entry]
        if extra:
            raise PayloadFormatError(
                f"{extra[0]} applies to format avro, protobuf or {GLUE_SCHEMA_REGISTRY}, and the "
                "format is json; set format: or remove it"
            )
        return JSON_FORMAT
    if kind == PROTOBUF:
        return _protobuf(entry, base)
    if "message" in entry:
        raise PayloadFormatError(f"message applies to format protobuf, and the format is {kind}")
    schema = _schema(entry, base, kind)
    if schema is not None:
        if not isinstance(schema, dict) or schema.get("type") != "record":
            raise PayloadFormatError(
                "the Avro schema must be a record (type: record), as each record of the "
                "stream becomes a row"
            )
        try:
            fastavro.parse_schema(schema)
        except Exception as exc:  # fastavro raises several types, none of them shared
            raise PayloadFormatError(f"the Avro schema does not parse: {exc!r}") from None
    region, endpoint_url = _registry(entry.get("registry"), kind)
    return PayloadFormat(kind, schema, region, endpoint_url)


def _protobuf(entry: Mapping[str, Any], base: Path | None) -> PayloadFormat:
    inline, file, message = entry.get("schema"), entry.get("schema_file"), entry.get("message")
    if "registry" in entry:
        raise PayloadFormatError(f"registry applies to format {GLUE_SCHEMA_REGISTRY} only")
    if (inline is None) == (file is None) or not isinstance(inline or file, str):
        raise PayloadFormatError(
            "format protobuf needs the .proto schema, once: schema_file: (a .proto file) or "
            "schema: (the .proto text)"
        )
    if message is not None and not isinstance(message, str):
        raise PayloadFormatError("message must be a message name of the .proto")
    try:
        if file is not None:
            compiled = compile_proto_file(Path(file) if base is None else base / file, file)
        else:
            compiled = compile_proto(str(inline))
        compiled.message(message)
    except ProtoSchemaError as exc:
        raise PayloadFormatError(str(exc)) from None
    return PayloadFormat(PROTOBUF, compiled.to_dict(), message=message)


def _schema(entry: Mapping[str, Any], base: Path | None, kind: str) -> Any:
    inline, file = entry.get("schema"), entry.get("schema_file")
    if inline is not None and file is not None:
        raise PayloadFormatError("give the Avro schema once: schema or schema_file, not both")
    if file is not None:
        if not isinstance(file, str):
            raise PayloadFormatError("schema_file must be a path (relative to this file)")
        path = Path(file) if base is None else base / file
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            raise PayloadFormatError(f"schema_file {file!r} cannot be read: {exc}") from None
        except json.JSONDecodeError as exc:
            raise PayloadFormatError(f"schema_file {file!r} is not JSON: {exc}") from None
    if isinstance(inline, str):  # an Avro schema written as JSON text
        try:
            return json.loads(inline)
        except json.JSONDecodeError as exc:
            raise PayloadFormatError(f"schema is not JSON: {exc}") from None
    if inline is None and kind == AVRO:
        raise PayloadFormatError(
            "format avro needs the writers' schema: schema: (inline) or schema_file: (an .avsc)"
        )
    return inline


def _registry(raw: object, kind: str) -> tuple[str | None, str | None]:
    if raw is None:
        return None, None
    if kind != GLUE_SCHEMA_REGISTRY:
        raise PayloadFormatError(f"registry applies to format {GLUE_SCHEMA_REGISTRY} only")
    if not isinstance(raw, Mapping) or any(key not in _REGISTRY_KEYS for key in raw):
        raise PayloadFormatError(
            f"registry must be a mapping with {' and/or '.join(_REGISTRY_KEYS)}, got {raw!r}"
        )
    values = [raw.get(key) for key in _REGISTRY_KEYS]
    if any(value is not None and not isinstance(value, str) for value in values):
        raise PayloadFormatError("registry: region and endpoint_url must be strings")
    return values[0], values[1]
