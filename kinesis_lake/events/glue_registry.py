"""The AWS Glue Schema Registry on the read side: its wire format and its schema versions.

The registry's serializers (Java, Python) put an 18-byte header before each payload: a header
version byte (3), a compression byte (0: none, 5: zlib) and the 16 bytes of the schema
version's UUID. The version's schema is fetched once per UUID with ``GetSchemaVersion``
(boto3's credential chain) and kept for the life of the process: a version never changes once
registered, and executors reuse their Python workers across batches.
"""

from __future__ import annotations

import threading
import zlib
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from kinesis_lake.errors import ConfigurationError, KinesisLakeError

HEADER_VERSION = 3
COMPRESSION_NONE = 0
COMPRESSION_ZLIB = 5
HEADER_SIZE = 18
MAX_INFLATED_BYTES = 16 * 1024 * 1024
"""A compressed payload may not inflate past this: a Kinesis record is at most 10 MiB, and
a zlib bomb must cost a quarantine row, not the executor's memory or seconds of its time
(a 200 KB record inflating to 64 MiB took 0.54 s to refuse)."""


class WireFormatError(KinesisLakeError, ValueError):
    """A record that is not in the registry's wire format; the message says how."""


class SchemaRegistryError(ConfigurationError):
    """The registry could not be asked (endpoint, credentials, permissions): configuration,
    not data, so the batch fails and is read again once it is fixed."""


def unframe(data: bytes) -> tuple[UUID, bytes]:
    """The schema version a record names and its payload, inflated when compressed."""
    if len(data) < HEADER_SIZE:
        raise WireFormatError(
            f"record of {len(data)} bytes is shorter than the {HEADER_SIZE}-byte header"
        )
    if data[0] != HEADER_VERSION:
        raise WireFormatError(
            f"header version byte is {data[0]}, expected {HEADER_VERSION}: not a record of the "
            "registry's serializers"
        )
    version = UUID(bytes=bytes(data[2:HEADER_SIZE]))
    body = data[HEADER_SIZE:]
    if data[1] == COMPRESSION_NONE:
        return version, body
    if data[1] == COMPRESSION_ZLIB:
        return version, _inflate(body, version)
    raise WireFormatError(
        f"schema version {version}: compression byte is {data[1]}, expected "
        f"{COMPRESSION_NONE} (none) or {COMPRESSION_ZLIB} (zlib)"
    )


def _inflate(body: bytes, version: UUID) -> bytes:
    inflater = zlib.decompressobj()
    try:
        inflated = inflater.decompress(body, MAX_INFLATED_BYTES)
    except zlib.error as exc:
        raise WireFormatError(f"schema version {version}: zlib data is corrupt ({exc})") from None
    if inflater.unconsumed_tail:
        raise WireFormatError(
            f"schema version {version}: zlib data inflates past {MAX_INFLATED_BYTES} bytes"
        )
    if not inflater.eof:
        raise WireFormatError(f"schema version {version}: zlib data is truncated")
    if inflater.unused_data:
        raise WireFormatError(
            f"schema version {version}: {len(inflater.unused_data)} bytes follow the zlib data"
        )
    return inflated


@dataclass(frozen=True)
class SchemaVersion:
    """One registered schema version, as ``GetSchemaVersion`` returns it."""

    version_id: UUID
    data_format: str
    """AVRO, JSON or PROTOBUF."""
    definition: str
    number: int | None
    schema_arn: str

    def describe(self) -> str:
        """How reasons name it: the UUID a record carries, and the version a person knows."""
        number = f" (version {self.number} of {self.schema_arn})" if self.number else ""
        return f"schema version {self.version_id}{number}"


_VERSIONS: dict[tuple[str | None, str | None, UUID], SchemaVersion | None] = {}
"""Every answer, found or not: a version id is never reused, so one the registry does not
know now it never will, and records that name it (a producer's bug, random bytes after
the header) must not cost a call each time they are read again."""
_CLIENTS: dict[tuple[str | None, str | None], Any] = {}
_LOCK = threading.Lock()


def schema_version(
    version_id: UUID, region: str | None, endpoint_url: str | None
) -> SchemaVersion | None:
    """The registered version, or None when the registry does not know it (a record that
    names it is bad data). Anything else that fails raises :class:`SchemaRegistryError`."""
    key = (region, endpoint_url, version_id)
    if key in _VERSIONS:
        return _VERSIONS[key]
    found = _get_schema_version(region, endpoint_url, SchemaVersionId=str(version_id))
    _VERSIONS[key] = found
    return found


def is_known(version_id: UUID, region: str | None, endpoint_url: str | None) -> bool:
    """Whether the registry was already asked about ``version_id`` (found or not)."""
    return (region, endpoint_url, version_id) in _VERSIONS


def named_schema_version(
    registry: str, schema: str, number: int | None, region: str | None, endpoint_url: str | None
) -> SchemaVersion | None:
    """Version ``number`` (None: the latest) of ``schema`` in ``registry``, or None when the
    registry has no such schema or version. Asked afresh every time: the latest moves."""
    wanted: dict[str, Any] = (
        {"LatestVersion": True} if number is None else {"VersionNumber": number}
    )
    return _get_schema_version(
        region,
        endpoint_url,
        SchemaId={"RegistryName": registry, "SchemaName": schema},
        SchemaVersionNumber=wanted,
    )


def _get_schema_version(
    region: str | None, endpoint_url: str | None, **request: Any
) -> SchemaVersion | None:
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        answer = schema_registry_client(region, endpoint_url).get_schema_version(**request)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "EntityNotFoundException":
            return None
        raise SchemaRegistryError(_unreachable(region, endpoint_url, exc)) from exc
    except BotoCoreError as exc:
        raise SchemaRegistryError(_unreachable(region, endpoint_url, exc)) from exc
    return SchemaVersion(
        UUID(answer["SchemaVersionId"]),
        answer.get("DataFormat", "AVRO"),
        answer["SchemaDefinition"],
        answer.get("VersionNumber"),
        answer.get("SchemaArn", ""),
    )


def schema_registry_client(region: str | None, endpoint_url: str | None) -> Any:
    """The process's Glue client for the registry at ``region``/``endpoint_url``."""
    with _LOCK:
        client = _CLIENTS.get((region, endpoint_url))
        if client is None:
            import boto3
            from botocore.config import Config

            # Standard retries ride out a throttle or a blip; an endpoint that is not there
            # fails the batch within seconds rather than after the legacy mode's backoff.
            retries = Config(retries={"mode": "standard", "max_attempts": 3}, connect_timeout=5)
            client = boto3.client(
                "glue", region_name=region, endpoint_url=endpoint_url, config=retries
            )
            _CLIENTS[(region, endpoint_url)] = client
        return client


def _unreachable(region: str | None, endpoint_url: str | None, exc: Exception) -> str:
    where = endpoint_url or f"AWS Glue in {region or 'the default region'}"
    return (
        f"the Glue Schema Registry at {where} could not be asked for a schema version: {exc}; "
        "check the stream's registry: {region, endpoint_url} in the declaration file and the "
        "credentials (glue:GetSchemaVersion)"
    )
