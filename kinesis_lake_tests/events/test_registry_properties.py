"""Property test: hostile records in the Glue Schema Registry's wire format through the real
decoder. Whatever the header and the bytes after it hold (any version or compression byte,
known and unknown schema versions, zlib or not, truncated, flipped or random payloads),
nothing raises, each record comes out exactly once, and a record comes out decoded exactly
when it is the valid framing of a datum, equal to the datum sent."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kinesis_lake.events.payload_formats import GLUE_SCHEMA_REGISTRY, PayloadFormat
from kinesis_lake_tests.events.registry import (
    Registry,
    assert_each_comes_out_once,
    avro_datum,
    hostile_framings,
)

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


@pytest.fixture(scope="module")
def known(moto_endpoint) -> Iterator[tuple[PayloadFormat, uuid.UUID]]:
    with Registry(moto_endpoint.url) as registry:
        version = registry.create("events", SCHEMA)
        yield PayloadFormat(GLUE_SCHEMA_REGISTRY, None, "us-east-1", moto_endpoint.url), version


@st.composite
def records(draw: st.DrawFn, version: uuid.UUID) -> tuple[bytes, dict[str, Any] | str | None]:
    """A record and the datum it must decode to (None: it must be quarantined; MAYBE: either,
    as corrupt bytes may still be a datum)."""
    record = draw(RECORDS)
    return draw(hostile_framings(version, avro_datum(SCHEMA, record), record))


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_every_record_comes_out_once_decoded_or_quarantined_with_a_reason(known, data):
    fmt, version = known
    sent = data.draw(st.lists(records(version), min_size=1, max_size=12))
    assert_each_comes_out_once(fmt, sent, GLUE_SCHEMA_REGISTRY, {"id", "n", "tags", "kind"})
