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
from hypothesis import strategies as st

from kinesis_lake.events.payload_formats import PayloadFormat
from kinesis_lake.events.payloads import decode_binary
from kinesis_lake.events.row_errors import RowErrors

NONE, ZLIB = 0, 5
EVENT_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["id"],
    "properties": {
        "id": {"type": "string", "minLength": 2},
        "n": {"type": "integer", "minimum": 0},
        "kind": {"enum": ["a", "b"]},
    },
}
"""A JSON Schema with constraints beyond types, which only validation catches."""
MAYBE = "maybe"
"""A hostile record's fate when corrupt bytes may still decode: decoded or quarantined."""


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


@st.composite
def hostile_framings(
    draw: st.DrawFn, version: uuid.UUID, body: bytes, record: Any, cut_body: Any = None
) -> tuple[bytes, Any]:
    """``body`` behind the header naming ``version``, valid or broken in one of the ways a
    decoder must survive (any header bytes, truncated, a byte flipped, random bytes after
    the header, a version no registry knows), with what must come of it: ``record`` when
    valid, None when it must be quarantined, MAYBE when either may (``cut_body``: the fate
    of a record cut inside its body)."""
    compressed = draw(st.booleans())
    framed_body = zlib.compress(body) if compressed else body
    header = bytes([3, ZLIB if compressed else NONE]) + version.bytes
    kind = draw(st.sampled_from(["valid", "header", "truncate", "flip", "junk", "unknown"]))
    # (a version the registry does not know costs a call per batch: one kind in six)
    if kind == "valid":
        return header + framed_body, record
    if kind == "header":  # any header bytes but the valid ones
        first = draw(
            st.binary(min_size=2, max_size=2).filter(lambda b: b not in (b"\3\0", b"\3\5"))
        )
        return first + version.bytes + framed_body, None
    if kind == "truncate":
        cut = draw(st.integers(min_value=0, max_value=len(header) + len(framed_body) - 1))
        inside = cut > len(header) and not compressed
        return (header + framed_body)[:cut], cut_body if inside else None
    if kind == "unknown":
        return bytes([3, NONE]) + uuid.uuid4().bytes + body, None
    if kind == "junk":
        return header + draw(st.binary(max_size=40)), MAYBE
    data = bytearray(header + framed_body)
    position = draw(st.integers(min_value=len(header), max_value=len(data) - 1))
    data[position] ^= draw(st.integers(min_value=1, max_value=255))
    return bytes(data), MAYBE


def assert_each_comes_out_once(
    fmt: PayloadFormat, sent: list[tuple[bytes, Any]], label: str, fields: set[str] | None
) -> None:
    """Hostile records (payload and fate, as ``hostile_framings`` gives) through the real
    decoder: nothing raises, each comes out once, decoded as sent when valid, else with a
    reason that has ``label`` in it, or (MAYBE) as a record with every one of ``fields``
    (None: of any record type, as a corrupt Protobuf index may name another message)."""
    errors = RowErrors(len(sent))

    objects = decode_binary([p for p, _ in sent], [None] * len(sent), fmt, _json_never, errors)

    assert len(objects) == len(sent)
    for (payload, expected), obj, reason in zip(sent, objects, errors.messages, strict=True):
        if isinstance(expected, dict):
            assert (reason, obj) == (None, expected), payload
        elif expected is None or reason is not None:
            assert reason is not None and label in reason, payload
        else:  # corrupt bytes that still decode: a record, all of it read
            assert type(obj) is dict and (fields is None or set(obj) == fields), payload


def _json_never(*_: Any) -> list[dict[str, Any]]:
    raise AssertionError("binary records never take the JSON path")
