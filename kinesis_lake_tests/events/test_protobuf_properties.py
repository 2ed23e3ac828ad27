"""Property tests: hostile Protobuf records through the real decoder, plain (``format:
protobuf``) and behind the Glue Schema Registry's header. Whatever the bytes hold (valid
messages, any header, unknown message indexes, truncated, flipped or random bodies), nothing
raises, each record comes out exactly once, and a valid message comes out equal to what was
sent."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kinesis_lake.events.payload_formats import (
    GLUE_SCHEMA_REGISTRY,
    PROTOBUF,
    PayloadFormat,
    payload_format,
)
from kinesis_lake_tests.events.protobuf_records import EVENT_PROTO, message_classes, registry_body
from kinesis_lake_tests.events.registry import (
    MAYBE,
    Registry,
    assert_each_comes_out_once,
    hostile_framings,
)

EVENT = message_classes(EVENT_PROTO)["p.Event"]
RECORDS = st.fixed_dictionaries(
    {
        "id": st.text(max_size=10),
        "n": st.none() | st.integers(min_value=-(2**63), max_value=2**63 - 1),
        "tags": st.lists(st.text(max_size=4), max_size=3),
        "kind": st.sampled_from(["A", "B"]),
        "counts": st.dictionaries(
            st.text(max_size=3), st.integers(min_value=-(2**31), max_value=2**31 - 1), max_size=3
        ),
    }
)


def _message(record: dict[str, Any]) -> Any:
    message = EVENT(id=record["id"], tags=record["tags"], kind=record["kind"])
    if record["n"] is not None:
        message.n = record["n"]
    message.counts.update(record["counts"])
    return message


@pytest.fixture(scope="module")
def known(moto_endpoint) -> Iterator[tuple[PayloadFormat, uuid.UUID]]:
    with Registry(moto_endpoint.url) as registry:
        version = registry.create("events", EVENT_PROTO, "PROTOBUF")
        yield PayloadFormat(GLUE_SCHEMA_REGISTRY, None, "us-east-1", moto_endpoint.url), version


@st.composite
def framed_records(draw: st.DrawFn, version: uuid.UUID) -> tuple[bytes, Any]:
    """A registry record and what it must decode to (None: quarantined; MAYBE: either; a
    message cut short may still be a message)."""
    record = draw(RECORDS)
    body = registry_body(_message(record))
    if draw(st.integers(min_value=0, max_value=6)) == 0:  # past Event and its CountsEntry
        return bytes([3, 0]) + version.bytes + bytes([draw(st.integers(2, 127))]) + body, None
    return draw(hostile_framings(version, body, record, cut_body=MAYBE))


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_every_registry_record_comes_out_once_decoded_or_quarantined(known, data):
    fmt, version = known
    sent = data.draw(st.lists(framed_records(version), min_size=1, max_size=12))
    assert_each_comes_out_once(fmt, sent, "registry", None)  # a flipped index: another message


PLAIN = payload_format({"format": PROTOBUF, "schema": EVENT_PROTO}, None)


@st.composite
def plain_records(draw: st.DrawFn) -> tuple[bytes, Any]:
    record = draw(RECORDS)
    data = _message(record).SerializeToString()
    kind = draw(st.sampled_from(["valid", "truncate", "junk"]))
    if kind == "valid" and data:
        return data, record
    if kind == "truncate" and data:
        return data[: draw(st.integers(min_value=1, max_value=len(data)))], MAYBE
    return draw(st.binary(min_size=1, max_size=40)), MAYBE


@settings(max_examples=150, deadline=None)
@given(sent=st.lists(plain_records(), min_size=1, max_size=12))
def test_every_protobuf_record_comes_out_once_decoded_or_quarantined(sent):
    fields = set(EVENT.DESCRIPTOR.fields_by_name)
    assert_each_comes_out_once(PLAIN, sent, "protobuf payload does not decode", fields)
