"""Records in the Glue Schema Registry's wire format, built here from its documentation and
fastavro's writer (not with the project's code), and schemas registered on moto's Glue."""

from __future__ import annotations

import io
import json
import uuid
import zlib
from typing import Any

import boto3
import fastavro

NONE, ZLIB = 0, 5


def avro_datum(schema: dict[str, Any], record: dict[str, Any]) -> bytes:
    """One Avro datum, binary encoded, as the registry's Avro serializer writes it."""
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, fastavro.parse_schema(schema), record)
    return buffer.getvalue()


def framed(version: uuid.UUID, body: bytes, compression: int = NONE) -> bytes:
    """The documented header: version byte 3, compression byte, the version's 16 bytes."""
    if compression == ZLIB:
        body = zlib.compress(body)
    return bytes([3, compression]) + version.bytes + body


class Registry:
    """One fresh registry on moto's Glue, named uniquely: the shared endpoint outlives tests.
    Use it as a context manager: moto's Glue, like AWS, holds at most ten registries, and
    the endpoint is shared by the whole test session."""

    def __init__(self, endpoint_url: str) -> None:
        self.endpoint_url = endpoint_url
        self.glue = boto3.client("glue", region_name="us-east-1", endpoint_url=endpoint_url)
        self.name = f"registry-{uuid.uuid4().hex[:10]}"
        self.glue.create_registry(RegistryName=self.name)

    def __enter__(self) -> Registry:
        return self

    def __exit__(self, *_: object) -> None:
        self.glue.delete_registry(RegistryId={"RegistryName": self.name})

    def create(self, schema_name: str, definition: Any, data_format: str = "AVRO") -> uuid.UUID:
        """A new schema; its first version's id."""
        answer = self.glue.create_schema(
            RegistryId={"RegistryName": self.name},
            SchemaName=schema_name,
            DataFormat=data_format,
            Compatibility="BACKWARD",
            SchemaDefinition=_text(definition),
        )
        return uuid.UUID(answer["SchemaVersionId"])

    def register(self, schema_name: str, definition: Any) -> uuid.UUID:
        """A new version of an existing schema; its id."""
        answer = self.glue.register_schema_version(
            SchemaId={"RegistryName": self.name, "SchemaName": schema_name},
            SchemaDefinition=_text(definition),
        )
        return uuid.UUID(answer["SchemaVersionId"])


def _text(definition: Any) -> str:
    """A definition as registered: .proto text as it is, a JSON schema as JSON text."""
    return definition if isinstance(definition, str) else json.dumps(definition)
