"""Avro and Glue Schema Registry payloads through the real parser (``route_events``): typed
rows as the JSON path gives, and every record that does not decode quarantined with a reason
naming the format and the schema version. Records are encoded by fastavro's writer and a
header built from the registry's documentation; the registry is moto's Glue."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from kinesis_lake.events.declaration import LakeDeclaration
from kinesis_lake.events.declaration_file import declaration_from_dict
from kinesis_lake.events.glue_registry import SchemaRegistryError, schema_registry_client
from kinesis_lake.events.parse import route_events
from kinesis_lake.events.payloads import MAX_UNKNOWN_VERSIONS_ASKED
from kinesis_lake_tests.events.avro_records import MAPPED
from kinesis_lake_tests.events.raw import NOW, raw_table
from kinesis_lake_tests.events.registry import ZLIB, Registry, avro_datum, framed

CLICK_V1 = {
    **MAPPED,
    "name": "Click",
    "fields": [f for f in MAPPED["fields"] if f["name"] not in {"seen", "counts"}],
}
"""The mapped record without its micros timestamp and its map, which ``TABLE`` leaves out."""
CLICK_V2 = {
    **CLICK_V1,
    "fields": [*CLICK_V1["fields"], {"name": "score", "type": "double", "default": -1.0}],
}
TABLE = {
    "name": "clicks",
    "fields": [
        {"name": "id", "type": "string", "required": True},
        {"name": "at", "type": "timestamp", "required": True},
        {"name": "day", "type": "date"},
        {"name": "price", "type": "decimal(10,2)"},
        {"name": "kind", "type": "string"},
        {"name": "tags", "type": "list<string>"},
        {"name": "page", "type": "struct", "fields": [{"name": "url", "type": "string"}]},
        {"name": "ref", "type": "string"},
        {"name": "score", "type": "double"},
    ],
    "dedup": "id",
    "event_time_field": "at",
}
AT = datetime(2024, 5, 1, 10, 0, 0, 123000, tzinfo=UTC)


def _click(event_id: str, **changes: Any) -> dict[str, Any]:
    return {
        "id": event_id,
        "at": AT,
        "day": date(2024, 5, 1),
        "price": Decimal("12.50"),
        "kind": "BUY",
        "tags": ["a", "b"],
        "page": {"url": "https://x", "ms": 7},
        "ref": None,
        **changes,
    }


def _lake(stream: dict[str, Any], *tables: dict[str, Any]) -> LakeDeclaration:
    """A lake of one stream, shipped through to_dict/from_dict as the executors get it."""
    declared = declaration_from_dict({"streams": [stream], "tables": list(tables or [TABLE])})
    return LakeDeclaration.from_dict(declared.to_dict())


def _route(lake: LakeDeclaration, payloads: list[bytes | None]) -> tuple[list[dict], list[dict]]:
    routed = route_events(raw_table(payloads), lake, now=NOW)
    return routed.tables["clicks"].to_pylist(), routed.quarantine.to_pylist()


def _reasons(quarantine: list[dict]) -> dict[str, str]:
    return {row["sequence_number"]: row["error"] for row in quarantine}


def test_avro_records_come_out_typed_as_json_ones_do():
    lake = _lake({"name": "events", "format": "avro", "schema": CLICK_V1})
    rows, quarantine = _route(lake, [avro_datum(CLICK_V1, _click("e1", ref="home"))])

    assert quarantine == []
    (row,) = rows
    assert row["event_timestamp"] == AT and row["at"] == AT
    assert (row["day"], row["price"], row["kind"]) == (date(2024, 5, 1), Decimal("12.50"), "BUY")
    assert (row["tags"], row["page"], row["ref"]) == (["a", "b"], {"url": "https://x"}, "home")


def test_avro_records_that_do_not_decode_are_quarantined_with_the_format_named():
    lake = _lake({"name": "events", "format": "avro", "schema": CLICK_V1})
    good = avro_datum(CLICK_V1, _click("e1"))
    other = avro_datum(CLICK_V1, _click("e2"))
    rows, quarantine = _route(lake, [good, good[:-3], good + b"\x00\x01", b"", None, other])

    assert [row["id"] for row in rows] == ["e1", "e2"]
    reasons = _reasons(quarantine)
    assert reasons["2"].startswith("avro payload does not decode: EOFError")
    assert reasons["3"] == (
        "avro payload does not decode: ValueError: 2 bytes follow the datum (written with "
        "another schema?)"
    )
    assert reasons["4"] == "record payload is empty (0 bytes); expected avro data"
    assert reasons["5"] == "record has no payload (data is null)"
    assert len(reasons) == 4


def test_a_lake_with_json_and_avro_streams_decodes_each_row_by_its_stream():
    declared = declaration_from_dict(
        {
            "streams": [{"name": "events", "format": "avro", "schema": CLICK_V1}, {"name": "js"}],
            "tables": [
                {**TABLE, "stream": "events", "route": {"kind": "BUY"}},
                {**TABLE, "name": "js_clicks", "stream": "js", "route": {"source": "js"}},
            ],
        }
    )
    json_click = b'{"id": "j1", "at": 1714557600000, "source": "js"}'
    raw = raw_table([avro_datum(CLICK_V1, _click("a1")), json_click, json_click[:-1]])
    raw = raw.set_column(0, "stream_name", pa.array(["events", "js", "js"]))

    routed = route_events(raw, declared, now=NOW)

    assert [r["id"] for r in routed.tables["clicks"].to_pylist()] == ["a1"]
    assert [r["id"] for r in routed.tables["js_clicks"].to_pylist()] == ["j1"]
    (bad,) = routed.quarantine.to_pylist()
    assert bad["sequence_number"] == "3" and bad["error"].startswith("invalid JSON")


def _registry_lake(registry: Registry, **stream: Any) -> LakeDeclaration:
    return _lake(
        {
            "name": "events",
            "format": "glue-schema-registry",
            "registry": {"region": "us-east-1", "endpoint_url": registry.endpoint_url},
            **stream,
        }
    )


def test_registry_records_of_two_versions_decode_against_the_readers_schema(registry):
    v1 = registry.create("clicks", CLICK_V1)
    v2 = registry.register("clicks", CLICK_V2)
    lake = _registry_lake(registry, schema=CLICK_V2)

    rows, quarantine = _route(
        lake,
        [
            framed(v1, avro_datum(CLICK_V1, _click("old"))),
            framed(v2, avro_datum(CLICK_V2, _click("new", score=0.5)), ZLIB),
        ],
    )

    assert quarantine == []
    assert [(r["id"], r["score"]) for r in rows] == [("old", -1.0), ("new", 0.5)]


def test_registry_records_decode_with_the_writers_schema_when_none_is_declared(registry):
    v1 = registry.create("clicks", CLICK_V1)
    rows, quarantine = _route(
        _registry_lake(registry), [framed(v1, avro_datum(CLICK_V1, _click("x")))]
    )
    assert quarantine == [] and [(r["id"], r["score"]) for r in rows] == [("x", None)]


def test_every_broken_registry_record_is_quarantined_naming_format_and_version(registry):
    v1 = registry.create("clicks", CLICK_V1)
    body = avro_datum(CLICK_V1, _click("e1"))
    unknown = uuid.uuid4()
    payloads = [
        framed(v1, body),
        bytes([2, 0]) + v1.bytes + body,  # an unknown header version
        bytes([3, 9]) + v1.bytes + body,  # an unknown compression
        bytes([3, 5]) + v1.bytes + b"not zlib",
        framed(unknown, body),
        framed(v1, body[:4]),
        framed(v1, body)[:10],
    ]
    rows, quarantine = _route(_registry_lake(registry), payloads)

    assert [r["id"] for r in rows] == ["e1"]
    version = f"schema version {v1} (version 1 of "
    reasons = _reasons(quarantine)
    assert reasons["2"] == (
        "glue-schema-registry: header version byte is 2, expected 3: not a record of the "
        "registry's serializers"
    )
    assert reasons["3"] == (
        f"glue-schema-registry: schema version {v1}: compression byte is 9, expected 0 (none) "
        "or 5 (zlib)"
    )
    assert reasons["4"].startswith(
        f"glue-schema-registry: schema version {v1}: zlib data is corrupt"
    )
    assert reasons["5"] == (
        f"glue-schema-registry: schema version {unknown} is not in the registry (deleted, or "
        "another registry's)"
    )
    assert reasons["6"].startswith(f"glue-schema-registry: {version}")
    assert ": Avro payload does not decode: " in reasons["6"]
    assert (
        reasons["7"]
        == "glue-schema-registry: record of 10 bytes is shorter than the 18-byte header"
    )
    assert {row["target_table"] for row in quarantine} == {None}


def test_registry_json_payloads_take_the_json_path_and_protobuf_its_own(registry):
    as_json = registry.create("clicks-json", {"type": "object"}, "JSON")
    as_protobuf = registry.create("clicks-pb", 'syntax = "proto3";', "PROTOBUF")
    rows, quarantine = _route(
        _registry_lake(registry),
        [
            framed(as_json, b'{"id": "j1", "at": "2024-05-01T10:00:00Z"}', ZLIB),
            framed(as_json, b"[1]"),
            framed(as_protobuf, b"\x0a\x02j2"),
        ],
    )
    assert [r["id"] for r in rows] == ["j1"]
    reasons = _reasons(quarantine)
    assert reasons["2"].startswith(f"glue-schema-registry: schema version {as_json} (version 1")
    assert reasons["2"].endswith(": JSON payload is an array, expected an object")
    assert reasons["3"].endswith(  # (test_protobuf.py has the Protobuf records that decode)
        ": Protobuf payload does not decode: ValueError: message index 10 is past the schema's 0 "
        "messages"
    )


def test_a_registered_definition_that_is_not_avro_quarantines_its_records(registry):
    broken = registry.create("clicks", {"type": "record", "name": "R", "fields": "none"})
    _, quarantine = _route(_registry_lake(registry), [framed(broken, b"\x00")])
    (reason,) = _reasons(quarantine).values()
    assert reason.startswith(f"glue-schema-registry: schema version {broken}")
    assert ": Avro schema does not parse: " in reason


def test_a_registry_that_cannot_be_asked_fails_the_batch_naming_the_setting():
    lake = _lake(
        {
            "name": "events",
            "format": "glue-schema-registry",
            "registry": {"region": "us-east-1", "endpoint_url": "http://127.0.0.1:9"},
        }
    )
    with pytest.raises(SchemaRegistryError, match=r"registry: \{region, endpoint_url\}"):
        _route(lake, [framed(uuid.uuid4(), b"\x00")])


def test_records_naming_many_unknown_versions_cost_few_registry_calls(registry):
    """Review of issue 35: a producer bug (or anyone who can put records) writing the
    header's two bytes then random ones made one GetSchemaVersion call per distinct UUID,
    in every batch and every retry: Glue throttles, the batch fails, and bad input stops
    the pipeline. Every answer is remembered (an id is never reused), and a batch asks about
    a bounded number of new unknown ones, quarantining the rest unasked."""
    known = registry.create("clicks", CLICK_V1)
    body = avro_datum(CLICK_V1, _click("ok"))
    strays = [framed(uuid.uuid4(), b"\x00") for _ in range(40)]
    lake = _registry_lake(registry)
    asked: list[str] = []

    def count(params: dict[str, Any], **_: Any) -> None:
        asked.append(params.get("SchemaVersionId", ""))

    events = schema_registry_client("us-east-1", registry.endpoint_url).meta.events
    events.register("provide-client-params.glue.GetSchemaVersion", count)  # process-wide
    try:
        rows, quarantine = _route(lake, [framed(known, body), *strays])
        first = list(asked)
        again_rows, again = _route(lake, [framed(known, body), *strays])  # a retry
    finally:
        events.unregister("provide-client-params.glue.GetSchemaVersion", count)

    assert [r["id"] for r in rows] == [r["id"] for r in again_rows] == ["ok"]
    assert len(quarantine) == len(again) == 40
    assert len(first) == 1 + MAX_UNKNOWN_VERSIONS_ASKED  # the known version, then the cap
    retried = asked[len(first) :]
    assert len(retried) == MAX_UNKNOWN_VERSIONS_ASKED and not set(retried) & set(first)
    reasons = set(_reasons(quarantine).values())
    assert any("is not in the registry" in reason for reason in reasons)
    assert any(f"not asked: more than {MAX_UNKNOWN_VERSIONS_ASKED}" in r for r in reasons)


def test_records_of_a_deleted_schema_version_are_quarantined_and_the_rest_still_land(registry):
    """Real Glue lets a team delete a schema (and its versions) while producers still hold
    records of it; moto's Glue deletes too. A version read before the deletion keeps
    decoding (an id is never reused, its definition never changes); one never read is
    quarantined with the stream, shard, sequence number and version, and the batch goes on."""
    seen = registry.create("seen", CLICK_V1)
    gone = registry.create("gone", CLICK_V1)
    body = avro_datum(CLICK_V1, _click("s1"))
    lake = _registry_lake(registry)
    assert [r["id"] for r in _route(lake, [framed(seen, body)])[0]] == ["s1"]
    for name in ("seen", "gone"):
        registry.glue.delete_schema(SchemaId={"RegistryName": registry.name, "SchemaName": name})

    rows, quarantine = _route(lake, [framed(seen, body), framed(gone, body)])

    assert [r["id"] for r in rows] == ["s1"]
    (row,) = quarantine
    assert (row["stream_name"], row["shard_id"], row["sequence_number"]) == (
        "events",
        "shardId-000000000000",
        "2",
    )
    assert row["error"] == (
        f"glue-schema-registry: schema version {gone} is not in the registry (deleted, or "
        "another registry's)"
    )
