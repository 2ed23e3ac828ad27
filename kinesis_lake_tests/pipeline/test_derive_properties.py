"""Hostile records, generated: through the parser (many examples) and through real
ingestion and derive refreshes (a few), nothing raises, every raw record is parsed or
quarantined exactly once, and the aggregate is a recount of the parsed table."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from kinesis_lake.events.parse import parse_events
from kinesis_lake.pipeline.derive import refresh_downstream
from kinesis_lake.pipeline.ingest import run_ingestion
from kinesis_lake_tests.events.raw import NOW, demo_schema, raw_table
from kinesis_lake_tests.lake_settings import make_settings
from kinesis_lake_tests.pipeline_helpers import assert_accounted, put

EDGE_TIMES = st.sampled_from(
    [
        "0001-01-01T00:00:00Z",
        "0001-01-01T00:30:00+01:00",
        "9999-12-30T23:59:59.999999Z",
        "9999-12-31T00:00:00Z",
        "9999-12-31T23:59:30Z",
        "9999-12-31T23:59:59-02:00",
        "1970-01-01T00:00:00Z",
        "2024-02-29T23:59:59.9999999Z",
        "1714557600000",
        "",
    ]
)
TIMES = (
    EDGE_TIMES
    | st.datetimes(
        min_value=datetime(2024, 4, 30),
        max_value=datetime(2024, 5, 2),
        timezones=st.just(UTC),
    ).map(datetime.isoformat)
    | st.sampled_from(
        [1714557600, 1714557600000, -(10**12), 10**20, 99_999_999_999, 253402214400000]
    )
)
NUMBERS = st.sampled_from(
    ["1e400", "-1e400", "1e-400", "5e-324", "1" * 5000, "1" * 4000, "-0", "0.0"]
)
KEYS = st.sampled_from(["a", "b", "", "k" * 3000, "\u00e9", "\ud800"])


@st.composite
def hostile_payload(draw: st.DrawFn) -> bytes:
    """One record as bytes: mostly an event, with one or more hostile traits."""
    fields: list[tuple[str, str]] = [
        ("event_id", json.dumps(draw(KEYS))),
        ("event_type", json.dumps(draw(st.sampled_from(["t", "u", "", "x" * 200])))),
        ("event_time", json.dumps(draw(TIMES))),
    ]
    if draw(st.booleans()):
        fields.append(("amount", draw(NUMBERS)))
    if draw(st.booleans()):
        depth = draw(st.sampled_from([1, 500, 975, 990, 1200, 5000]))
        fields.append((draw(st.sampled_from(["user_id", "extra"])), "[" * depth + "]" * depth))
    if draw(st.booleans()):
        name, value = draw(st.sampled_from(fields))
        fields.append((name, value))  # a duplicate key
    fields = draw(st.permutations(fields))
    text = "{" + ", ".join(f"{json.dumps(k)}: {v}" for k, v in fields) + "}"
    encoding = draw(st.sampled_from(["utf-8", "utf-8", "utf-8", "utf-8-sig", "utf-16", "latin-1"]))
    data = text.encode(encoding, "surrogatepass" if encoding != "latin-1" else "replace")
    return draw(st.sampled_from([data, data, data, data[: len(data) // 2], b"", b"\xef\xbb\xbf"]))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(hostile_payload(), max_size=20))
def test_the_parser_accounts_for_every_hostile_record(payloads: list[bytes]) -> None:
    parsed, quarantine = parse_events(raw_table(payloads), demo_schema(), now=NOW)
    assert parsed.num_rows + quarantine.num_rows == len(payloads)
    sequence = [
        *parsed.column("sequence_number").to_pylist(),
        *quarantine.column("sequence_number").to_pylist(),
    ]
    assert sorted(sequence, key=int) == [str(row + 1) for row in range(len(payloads))]
    assert all(quarantine.column("error").to_pylist())
    assert all(len(error) < 400 for error in quarantine.column("error").to_pylist())
    last = datetime(9999, 12, 31, tzinfo=UTC) - timedelta(microseconds=1)
    assert all(t <= last for t in parsed.column("event_timestamp").to_pylist())


@settings(
    max_examples=2,
    phases=[Phase.explicit, Phase.generate],  # shrinking would re-run Spark for minutes
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(batch=st.lists(hostile_payload(), min_size=1, max_size=25))
@example(
    batch=[
        b'{"event_id": "y", "event_type": "t", "event_time": "0001-01-01T00:00:00Z"}',
        b'{"event_id": "y", "event_type": "t", "event_time": "0001-01-01T00:00:30Z"}',
        b'{"event_id": "z", "event_type": "t", "event_time": "9999-12-30T23:59:59.999999Z"}',
        b'{"event_id": "z", "event_type": "t", "event_time": "9999-12-31T23:59:30Z"}',
        b'{"event_id": "w", "event_type": "t", "event_time": 1714557600000, "amount": 1e400}',
        b'{"event_id": "v", "event_type": "t", "event_time": 1714557600000, "user_id": '
        + b"[" * 975
        + b"]" * 975
        + b"}",
        b'{"event_id": "u", "event_type": "t", "event_id": "u2", "event_time": 1714557600000}',
        b"\xef\xbb\xbf{}",
        b"",
    ]
)
def test_derive_accounts_for_every_hostile_record(
    spark, kinesalite_endpoint, tmp_path: Path, batch: list[bytes]
) -> None:
    """Each example ingests and derives its batch on a fresh stream and fresh tables."""
    settings_ = make_settings(tmp_path / uuid.uuid4().hex, kinesalite_endpoint.url)
    put(settings_, *batch)
    run_ingestion(spark, settings_)
    refresh_downstream(spark, settings_)
    assert_accounted(settings_)
