"""What ``produce`` sends to an Avro stream decodes with an independent decoder: the
registry's documented header read here by hand, the version's schema fetched from moto's
Glue with boto3, the datum read by fastavro, the values compared with the JSON events the
same seed gives. Malformed records fail that decoder, each in its own way."""

from __future__ import annotations

import io
import json
import uuid
import zlib
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import boto3
import fastavro
import pytest

from kinesis_lake.errors import ConfigurationError
from kinesis_lake.events.payload_formats import AVRO, GLUE_SCHEMA_REGISTRY, PayloadFormat
from kinesis_lake.kinesis.producer import sample_events
from kinesis_lake.pipeline.encoded_events import (
    RegistryTarget,
    demo_avro_schema,
    demo_payloads,
)

COUNT, MALFORMED_EVERY, UNROUTED_EVERY, SEED, START_MS = 120, 10, 25, 3, 1_700_000_000_000


def _as_json(value: Any) -> Any:
    """A decoded Avro value as the JSON event would hold it: no nulls, times as ISO strings
    with milliseconds and Z, decimals as their digits."""
    if isinstance(value, dict):
        return {key: _as_json(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [_as_json(item) for item in value]
    if isinstance(value, datetime):
        text = value.astimezone(UTC).isoformat(timespec="milliseconds")
        return text.replace("+00:00", "Z")
    if isinstance(value, Decimal):
        return f"{value:.2f}"
    return value


def _expected(data: bytes) -> dict[str, Any]:
    event = json.loads(data)
    if "sent_at" in event:  # a heartbeat: its send time is the record's event time
        event["event_time"] = event.pop("sent_at")
    event.get("page", {}).pop("referrer", None)  # null in JSON, so absent once nulls go
    return event


def _read(schema: Any, body: bytes) -> dict[str, Any]:
    buffer = io.BytesIO(body)
    record = fastavro.schemaless_reader(buffer, fastavro.parse_schema(schema))
    assert buffer.tell() == len(body), "bytes after the datum"
    assert isinstance(record, dict)
    return record


def _unframe(payload: bytes) -> tuple[uuid.UUID, bytes]:
    """The documented header: version byte 3, compression byte 0 or 5, 16 UUID bytes."""
    assert payload[0] == 3
    assert payload[1] in (0, 5)
    body = payload[18:]
    return uuid.UUID(bytes=payload[2:18]), zlib.decompress(body) if payload[1] == 5 else body


def _produced(fmt: PayloadFormat, **options: Any) -> list[tuple[str, bytes]]:
    return demo_payloads(
        fmt,
        "clicks",
        COUNT,
        malformed_every=MALFORMED_EVERY,
        unrouted_every=UNROUTED_EVERY,
        seed=SEED,
        start_ms=START_MS,
        **options,
    )


def _is_broken(index: int) -> bool:
    return (index + 1) % MALFORMED_EVERY == 0 and (index + 1) % UNROUTED_EVERY != 0


@pytest.mark.parametrize("compressed", [False, True], ids=["uncompressed", "zlib"])
def test_registry_records_decode_with_the_registered_schema(moto_endpoint, registry, compressed):
    fmt = PayloadFormat(GLUE_SCHEMA_REGISTRY, None, "us-east-1", moto_endpoint.url)
    target = RegistryTarget(registry.name, "clickstream")
    produced = _produced(fmt, zlib_compressed=compressed, target=target)
    json_events = sample_events(COUNT, unrouted_every=UNROUTED_EVERY, seed=SEED, start_ms=START_MS)
    glue = boto3.client("glue", region_name="us-east-1", endpoint_url=moto_endpoint.url)

    good = [i for i in range(COUNT) if not _is_broken(i)]
    versions = {_unframe(produced[i][1])[0] for i in good}
    assert len(versions) == 1
    (version,) = versions
    registered = glue.get_schema_version(SchemaVersionId=str(version))
    assert registered["DataFormat"] == "AVRO"
    assert registered["SchemaArn"].endswith(f"/{target.registry_name}/clickstream")
    schema = json.loads(registered["SchemaDefinition"])
    assert schema == demo_avro_schema()
    for i in good:
        key, payload = produced[i]
        assert key == json_events[i][0]
        assert (payload[1] == 5) is compressed
        assert _as_json(_read(schema, _unframe(payload)[1])) == _expected(json_events[i][1])

    # The three ways a registry record breaks, in turn: a truncated datum, a version the
    # registry does not know, a payload marked zlib that is not.
    broken = [produced[i][1] for i in range(COUNT) if _is_broken(i)]
    assert len(broken) == 10
    truncated, unknown, not_zlib = broken[0], broken[1], broken[2]
    with pytest.raises(EOFError):
        _read(schema, _unframe(truncated)[1])
    with pytest.raises(glue.exceptions.EntityNotFoundException):
        glue.get_schema_version(SchemaVersionId=str(uuid.UUID(bytes=unknown[2:18])))
    assert not_zlib[1] == 5 and uuid.UUID(bytes=not_zlib[2:18]) == version
    with pytest.raises(zlib.error):
        zlib.decompress(not_zlib[18:])

    # A second producer of the same schema finds its version instead of adding one.
    again = _produced(fmt, target=target)
    assert _unframe(again[0][1])[0] == version
    schema_id = {"RegistryName": target.registry_name, "SchemaName": "clickstream"}
    assert glue.get_schema(SchemaId=schema_id)["LatestSchemaVersion"] == 1


def test_plain_avro_records_decode_with_the_declared_schema():
    schema = demo_avro_schema()
    produced = _produced(PayloadFormat(AVRO, schema))
    json_events = sample_events(COUNT, unrouted_every=UNROUTED_EVERY, seed=SEED, start_ms=START_MS)
    for i in range(COUNT):
        if not _is_broken(i):
            assert _as_json(_read(schema, produced[i][1])) == _expected(json_events[i][1])
    broken = [produced[i][1] for i in range(COUNT) if _is_broken(i)]
    with pytest.raises(EOFError):  # truncated
        _read(schema, broken[0])
    with pytest.raises(AssertionError, match="bytes after the datum"):
        _read(schema, broken[1])


def test_a_schema_the_demo_events_do_not_fit_fails_naming_the_stream():
    schema = {"type": "record", "name": "Other", "fields": [{"name": "total", "type": "long"}]}
    with pytest.raises(ConfigurationError, match="stream 'clicks': the demo's events do not fit"):
        _produced(PayloadFormat(AVRO, schema))
