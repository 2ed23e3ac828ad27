"""A Protobuf stream and a JSON Schema stream behind the Glue Schema Registry's header, end to
end through real Spark: put on the local Kinesis endpoint, ingested, decoded on the
executors with versions fetched from moto's Glue (Protobuf records by the message index
their serializer writes, JSON ones validated against their JSON Schema), routed into
Iceberg tables typed from the registered schemas; every record routed or quarantined with a
reason, and each quarantined row naming its stream, shard and sequence number."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from kinesis_lake.events.declaration_file import load_declaration
from kinesis_lake.pipeline.derive import refresh_downstream
from kinesis_lake.pipeline.ingest import run_ingestion
from kinesis_lake.pipeline.lake import lake_streams, open_lake
from kinesis_lake.pipeline.reconcile import reconcile_routed
from kinesis_lake_tests.events.protobuf_records import ORDER_PROTO, message_classes, registry_body
from kinesis_lake_tests.events.registry import EVENT_SCHEMA, ZLIB, Registry, framed
from kinesis_lake_tests.pipeline_helpers import put, table_rows

DECLARATION = """\
streams:
  - name: pb-orders
    format: glue-schema-registry
    registry: {{region: us-east-1, endpoint_url: "{endpoint}"}}
  - name: js-events
    format: glue-schema-registry
    registry: {{region: us-east-1, endpoint_url: "{endpoint}"}}
tables:
  - name: orders
    stream: pb-orders
    registry_schema: {{registry: {registry}, schema: orders}}
    dedup: id
    event_time_field: at
  - name: events
    stream: js-events
    registry_schema: {{registry: {registry}, schema: events}}
    dedup: id
"""
AT = datetime(2024, 5, 1, 9, 30, 0, 250000, tzinfo=UTC)
ORDER = message_classes(ORDER_PROTO)["shop.Order"]


def _order(order_id: str, note: str | None = None) -> bytes:
    order = ORDER(id=order_id, status=1)
    order.at.FromDatetime(AT)
    order.lines.add(sku="a", price=2.5)
    order.counts["x"] = 7
    if note is not None:
        order.note = note
    return registry_body(order)


def test_protobuf_and_json_schema_records_land_typed_and_the_bad_ones_quarantined(
    spark, kinesalite_endpoint, moto_endpoint, registry: Registry, settings_factory
):
    pb = registry.create("orders", ORDER_PROTO, "PROTOBUF")
    js = registry.create("events", EVENT_SCHEMA, "JSON")
    declaration = DECLARATION.format(endpoint=moto_endpoint.url, registry=registry.name)
    settings = settings_factory(kinesalite_endpoint, declaration=declaration)
    orders_stream, events_stream = lake_streams(
        settings, load_declaration(settings.event_schema_path)
    )
    good = framed(pb, _order("o1"))
    put(
        orders_stream,
        good,
        framed(pb, _order("o2", note="gift"), ZLIB),
        good[:-3],  # cut short in transit
        framed(pb, b"\x07" + _order("o3")[1:]),  # a message index the schema does not have
    )
    put(
        events_stream,
        framed(js, json.dumps({"id": "e1", "n": 1, "kind": "a"}).encode()),
        framed(js, json.dumps({"id": "e2", "n": -1}).encode()),
        framed(js, b'{"id": "e3",'),
    )

    for stream in (orders_stream, events_stream):
        run_ingestion(spark, stream)
    refresh_downstream(spark, settings)

    orders = table_rows(settings, settings.table_identifier("orders"))
    assert sorted((r["id"], r["at"], r["status"], r["note"]) for r in orders) == [
        ("o1", AT, "PAID", None),
        ("o2", AT, "PAID", "gift"),
    ]
    assert orders[0]["lines"] == [{"sku": "a", "price": 2.5}]
    assert orders[0]["counts"] == [("x", 7)]
    events = table_rows(settings, settings.table_identifier("events"))
    assert [(r["id"], r["n"]) for r in events] == [("e1", 1)]

    quarantined = table_rows(settings, settings.quarantine_table)
    reasons = {(r["stream_name"], r["sequence_number"]): r["error"] for r in quarantined}
    assert all(r["shard_id"].startswith("shardId-") for r in quarantined)
    by_stream = sorted(
        (stream, reason.split(": ")[-1][:40]) for (stream, _), reason in reasons.items()
    )
    assert by_stream == [
        ("js-events", "-1 is less than the minimum of 0"),
        ("js-events", "line 1 column 13 (char 12)"[:40]),
        ("pb-orders", "Error parsing message with type 'shop.Or"),
        ("pb-orders", "message index 7 is past the schema's 4 m"),
    ], reasons

    catalog = open_lake(settings)
    quarantine = catalog.load_table(settings.quarantine_table)
    for stream, table, count in ((orders_stream, "orders", 4), (events_stream, "events", 3)):
        report = reconcile_routed(
            catalog.load_table(stream.raw_table),
            {table: catalog.load_table(settings.table_identifier(table))},
            quarantine,
            routes_everything=True,
            stream_name=stream.stream_name,
        )
        assert report.passed and report.raw_processed == count, report
