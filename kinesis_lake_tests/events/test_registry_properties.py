"""Property test: hostile records in the Glue Schema Registry's wire format through the real
decoder. Whatever the header and the bytes after it hold (any version or compression byte,
known and unknown schema versions, zlib or not, truncated, flipped or random payloads),
nothing raises, each record comes out exactly once, and a record comes out decoded exactly
when it is the valid framing of a datum, equal to the datum sent."""

from __future__ import annotations

import uuid
import zlib
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kinesis_lake.events.convert import RowErrors
from kinesis_lake.events.payload_formats import GLUE_SCHEMA_REGISTRY, PayloadFormat
from kinesis_lake.events.payloads import decode_binary
from kinesis_lake_tests.events.registry import Registry, avro_datum

SCHEMA = {
    "type": "record",
    "name": "Event",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "n", "type": ["null", "long"], "default": None},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
    ],
}
RECORDS = st.fixed_dictionaries(
    {
        "id": st.text(max_size=10),
        "n": st.none() | st.integers(min_value=-(2**63), max_value=2**63 - 1),
        "tags": st.lists(st.text(max_size=4), max_size=3),
        "kind": st.sampled_from(["A", "B"]),
    }
)


MAYBE = "maybe"


@pytest.fixture(scope="module")
def known(moto_endpoint) -> Iterator[tuple[PayloadFormat, uuid.UUID]]:
    with Registry(moto_endpoint.url) as registry:
        version = registry.create("events", SCHEMA)
        yield PayloadFormat(GLUE_SCHEMA_REGISTRY, None, "us-east-1", moto_endpoint.url), version


def _json_never(*_: Any) -> list[dict[str, Any]]:
    raise AssertionError("an AVRO schema's records never take the JSON path")


@st.composite
def records(draw: st.DrawFn, version: uuid.UUID) -> tuple[bytes, dict[str, Any] | str | None]:
    """A record and the datum it must decode to (None: it must be quarantined; MAYBE: either,
    as corrupt bytes may still be a datum)."""
    record = draw(RECORDS)
    body = avro_datum(SCHEMA, record)
    compressed = draw(st.booleans())
    framed_body = zlib.compress(body) if compressed else body
    header = bytes([3, 5 if compressed else 0]) + version.bytes
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
        return (header + framed_body)[:cut], None
    if kind == "unknown":
        return bytes([3, 0]) + uuid.uuid4().bytes + body, None
    if kind == "junk":
        return header + draw(st.binary(max_size=40)), MAYBE
    data = bytearray(header + framed_body)
    position = draw(st.integers(min_value=len(header), max_value=len(data) - 1))
    data[position] ^= draw(st.integers(min_value=1, max_value=255))
    return bytes(data), MAYBE


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_every_record_comes_out_once_decoded_or_quarantined_with_a_reason(known, data):
    fmt, version = known
    sent = data.draw(st.lists(records(version), min_size=1, max_size=12))
    errors = RowErrors(len(sent))

    objects = decode_binary([p for p, _ in sent], [None] * len(sent), fmt, _json_never, errors)

    assert len(objects) == len(sent)
    for (payload, expected), obj, reason in zip(sent, objects, errors.messages, strict=True):
        if isinstance(expected, dict):
            assert (reason, obj) == (None, expected), payload
        elif expected is None or reason is not None:
            assert reason is not None and GLUE_SCHEMA_REGISTRY in reason, payload
        else:  # a corrupted datum that still reads as one: a record, all of it read
            assert type(obj) is dict and set(obj) == {"id", "n", "tags", "kind"}, payload
