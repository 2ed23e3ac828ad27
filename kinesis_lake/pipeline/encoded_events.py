"""The demo's events in a stream's payload format: what ``kinesis-lake produce`` and
``make demo`` send to a stream declared ``format: avro`` or ``glue-schema-registry``.

The events are the JSON ones of :func:`~kinesis_lake.kinesis.producer.sample_events`, written
as Avro with the stream's schema (``schemas/clickstream_event.avsc`` for a registry stream
that declares none), and for the registry behind its serializers' documented header: version
byte 3, compression byte (0 none, 5 zlib), the schema version's 16-byte UUID. The version is
found in the registry by its definition, else registered (the schema and its registry are
created when missing), as the registry's own serializers do with auto-registration.

Malformed records are malformed as Avro, not as JSON, so that each is one a decoder of the
format must survive: a truncated datum, a datum with bytes after it (``avro``), a header
naming a version the registry does not know and zlib that is not (``glue-schema-registry``).
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import time
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any
from uuid import UUID

import fastavro
import yaml

from kinesis_lake.config import Settings
from kinesis_lake.errors import ConfigurationError
from kinesis_lake.events.declaration_file import load_declaration
from kinesis_lake.events.glue_registry import (
    COMPRESSION_NONE,
    COMPRESSION_ZLIB,
    HEADER_VERSION,
)
from kinesis_lake.events.payload_formats import (
    GLUE_SCHEMA_REGISTRY,
    JSON,
    JSON_FORMAT,
    PRODUCED_FORMATS,
    PayloadFormat,
)
from kinesis_lake.kinesis.producer import Entry, sample_events

DEMO_AVRO_SCHEMA = Path(__file__).resolve().parents[2] / "schemas" / "clickstream_event.avsc"
"""The demo's events as Avro: the writers' schema of a registry stream that declares none."""
DEFAULT_REGISTRY = "default-registry"
"""The registry the AWS serializers register in unless told otherwise."""
_REGISTERED_WAIT_S = 30.0
"""How long a new version may stay PENDING (AWS checks its compatibility) before we give up."""


@dataclass(frozen=True)
class RegistryTarget:
    """Where the producer registers its schema: the registry and schema names (the
    endpoint and region come from the stream's ``registry:`` entry)."""

    registry_name: str | None = None
    """None: ``default-registry``, as the AWS serializers."""
    schema_name: str | None = None
    """None: the stream's name, as the serializers name a schema after its topic."""


def demo_payloads(
    fmt: PayloadFormat,
    stream_name: str,
    count: int,
    *,
    malformed_every: int = 0,
    unrouted_every: int = 0,
    seed: int = 0,
    start_ms: int | None = None,
    zlib_compressed: bool = False,
    target: RegistryTarget = RegistryTarget(),
) -> list[Entry]:
    """``count`` of the demo's events as ``(partition_key, payload)`` entries in ``fmt``
    (the stream's declared format), every ``malformed_every``-th one broken for its format.
    A ``glue-schema-registry`` stream's schema version is found or registered first."""
    if fmt.kind == JSON:
        return sample_events(
            count,
            malformed_every=malformed_every,
            unrouted_every=unrouted_every,
            seed=seed,
            start_ms=start_ms,
        )
    if fmt.kind not in PRODUCED_FORMATS:
        raise ConfigurationError(
            f"stream {stream_name!r} is declared {fmt.kind}; produce sends the demo's events "
            f"as {', '.join(PRODUCED_FORMATS)}: send {fmt.kind} records with your own producer"
        )
    if zlib_compressed and fmt.kind != GLUE_SCHEMA_REGISTRY:
        raise ConfigurationError(f"zlib compression applies to {GLUE_SCHEMA_REGISTRY} streams")
    schema = fmt.schema if fmt.schema is not None else demo_avro_schema()
    write = _writer(schema, stream_name)
    version = None
    if fmt.kind == GLUE_SCHEMA_REGISTRY:
        version = registered_version(schema, stream_name, fmt, target)
    compression = COMPRESSION_ZLIB if zlib_compressed else COMPRESSION_NONE
    rng = random.Random(f"{seed}:malformed")
    entries: list[Entry] = []
    broken_so_far = 0
    events = sample_events(count, unrouted_every=unrouted_every, seed=seed, start_ms=start_ms)
    for index, (key, data) in enumerate(events):
        datum = write(avro_record(json.loads(data)))
        broken = malformed_every and (index + 1) % malformed_every == 0
        heartbeat = unrouted_every and (index + 1) % unrouted_every == 0
        if broken and not heartbeat:  # as sample_events: a heartbeat stays a heartbeat
            payload = _malformed(datum, version, compression, broken_so_far, rng)
            broken_so_far += 1
        elif version is not None:
            payload = framed(version, datum, compression)
        else:
            payload = datum
        entries.append((key, payload))
    return entries


def stream_format(settings: Settings) -> PayloadFormat:
    """The payload format the declaration gives the stream of ``settings`` (JSON when it
    declares no streams)."""
    declaration = load_declaration(settings.event_schema_path)
    declared = (s.format for s in declaration.streams if s.name == settings.stream_name)
    return next(declared, JSON_FORMAT)


def declared_in_format(
    declaration: Path,
    kind: str,
    stream: str,
    raw_table: str,
    registry: Mapping[str, str | None] | None = None,
    schema_file: Path = DEMO_AVRO_SCHEMA,
) -> str:
    """The declaration file's text with its one stream declared as ``kind``, the demo's
    events' schema (``schema_file``: Avro, or the .proto for ``protobuf``) as its schema
    (``registry:`` as given): the shipped declaration's Avro variant, for ``make demo``
    and the decode-cost benchmark."""
    entry: dict[str, object] = {
        "name": stream,
        "raw_table": raw_table,
        "format": kind,
        "schema_file": str(schema_file),
    }
    if registry is not None:
        entry["registry"] = dict(registry)
    text = declaration.read_text(encoding="utf-8")
    variant = {"streams": [entry], **yaml.safe_load(text)}
    return f"# {declaration.name} with its stream declared as {kind}.\n" + yaml.safe_dump(
        variant, sort_keys=False
    )


def demo_avro_schema() -> Any:
    return json.loads(DEMO_AVRO_SCHEMA.read_text(encoding="utf-8"))


def avro_record(event: dict[str, Any]) -> dict[str, Any]:
    """A demo event (or heartbeat) as the Avro schema's record: times as datetimes, prices
    as Decimals; a heartbeat's send time is its event time."""
    record = dict(event)
    if "sent_at" in record:
        record["event_time"] = record.pop("sent_at")
    record["event_time"] = datetime.fromisoformat(str(record["event_time"]))
    order = record.get("order")
    if isinstance(order, dict):
        items = [{**item, "price": Decimal(item["price"])} for item in order["items"]]
        record["order"] = {**order, "items": items}
    return record


def framed(version: UUID, datum: bytes, compression: int = COMPRESSION_NONE) -> bytes:
    """``datum`` behind the registry's header (zlib-compressed for compression 5)."""
    body = zlib.compress(datum) if compression == COMPRESSION_ZLIB else datum
    return bytes([HEADER_VERSION, compression]) + version.bytes + body


def _writer(schema: Any, stream_name: str) -> Callable[[dict[str, Any]], bytes]:
    try:
        parsed = fastavro.parse_schema(schema)
    except Exception as exc:  # fastavro raises several types, none of them shared
        raise ConfigurationError(
            f"stream {stream_name!r}: its Avro schema does not parse: {exc!r}"
        ) from None

    def write(record: dict[str, Any]) -> bytes:
        buffer = io.BytesIO()
        try:
            fastavro.schemaless_writer(buffer, parsed, record)
        except (ValueError, TypeError, KeyError) as exc:
            raise ConfigurationError(
                f"stream {stream_name!r}: the demo's events do not fit its Avro schema ({exc}); "
                f"produce sends the demo's events, written as {DEMO_AVRO_SCHEMA.name} describes "
                "them: declare that schema (schema_file:) or send your own with your producer"
            ) from None
        return buffer.getvalue()

    return write


def _malformed(
    datum: bytes, version: UUID | None, compression: int, nth: int, rng: random.Random
) -> bytes:
    """The ``nth`` malformed record, cycling through the ways a record breaks: plain Avro
    (``version`` None) truncated or with a byte after it; behind the registry's header,
    truncated, naming a version no registry knows, or marked zlib and not zlib."""
    if version is None:
        return datum[:-7] if nth % 2 == 0 else datum + b"\x00"
    choice = nth % 3
    if choice == 0:
        return framed(version, datum[:-7], compression)
    if choice == 1:
        return framed(UUID(int=rng.getrandbits(128), version=4), datum, compression)
    return bytes([HEADER_VERSION, COMPRESSION_ZLIB]) + version.bytes + datum


def registered_version(
    schema: Any, stream_name: str, fmt: PayloadFormat, target: RegistryTarget
) -> UUID:
    """The id of ``schema``'s version under ``target`` in the stream's registry: found by
    its definition, else registered (creating the schema, and the registry, if missing).
    A refusal (permissions, an incompatible schema) fails naming the stream and the fix."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    glue = boto3.client("glue", region_name=fmt.region, endpoint_url=fmt.endpoint_url)
    registry_name = target.registry_name or DEFAULT_REGISTRY
    schema_name = target.schema_name or stream_name
    schema_id = {"RegistryName": registry_name, "SchemaName": schema_name}
    definition = json.dumps(schema, separators=(",", ":"))
    where = (
        f"stream {stream_name!r}: schema {schema_name!r} in registry {registry_name!r} "
        f"at {fmt.endpoint_url or 'AWS Glue in ' + (fmt.region or 'the default region')}"
    )
    try:
        try:
            found = glue.get_schema_by_definition(SchemaId=schema_id, SchemaDefinition=definition)
            if found.get("Status") == "AVAILABLE":
                return UUID(found["SchemaVersionId"])
        except glue.exceptions.EntityNotFoundException:
            pass
        try:
            answer = glue.register_schema_version(SchemaId=schema_id, SchemaDefinition=definition)
        except glue.exceptions.EntityNotFoundException:
            with contextlib.suppress(glue.exceptions.AlreadyExistsException):
                glue.create_registry(RegistryName=registry_name)
            answer = glue.create_schema(
                RegistryId={"RegistryName": registry_name},
                SchemaName=schema_name,
                DataFormat="AVRO",
                Compatibility="BACKWARD",
                SchemaDefinition=definition,
            )
        version = UUID(answer["SchemaVersionId"])
        _wait_available(glue, version, where)
    except (ClientError, BotoCoreError) as exc:
        raise ConfigurationError(
            f"{where}: the schema version could not be found or registered: {exc}; check the "
            "stream's registry: {region, endpoint_url} and the credentials "
            "(glue:GetSchemaByDefinition, RegisterSchemaVersion, CreateSchema, CreateRegistry)"
        ) from exc
    return version


def _wait_available(glue: Any, version: UUID, where: str) -> None:
    """AWS registers a version PENDING and checks its compatibility; records may name it
    only once it is AVAILABLE."""
    deadline = time.monotonic() + _REGISTERED_WAIT_S
    while True:
        status = glue.get_schema_version(SchemaVersionId=str(version))["Status"]
        if status == "AVAILABLE":
            return
        if status != "PENDING" or time.monotonic() > deadline:
            raise ConfigurationError(
                f"{where}: the registry left the new version {version} {status} (an "
                "incompatible change under the schema's compatibility mode?); register a "
                "compatible schema or use another --schema-name"
            )
        time.sleep(0.5)
