"""A stream of Avro records behind the Glue Schema Registry's header, end to end through real
Spark: put on the local Kinesis endpoint, ingested, decoded on the executors with versions
fetched from moto's Glue, routed into an Iceberg table typed from the registry's latest
version; every record accounted for. A version registered between two ingestions evolves the
table on the next refresh, and the records of every version land in it."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from kinesis_lake.events.declaration_file import load_declaration
from kinesis_lake.pipeline.derive import refresh_downstream
from kinesis_lake.pipeline.ingest import run_ingestion
from kinesis_lake.pipeline.lake import lake_streams, open_lake
from kinesis_lake.pipeline.reconcile import reconcile_routed
from kinesis_lake_tests.events.registry import ZLIB, Registry, avro_datum, framed
from kinesis_lake_tests.pipeline_helpers import put, table_rows

ORDER_V1 = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {
            "name": "total",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
        },
    ],
}
ORDER_V2 = {
    **ORDER_V1,
    "fields": [*ORDER_V1["fields"], {"name": "note", "type": "string", "default": ""}],
}
ORDER_V3 = {
    **ORDER_V2,
    "fields": [
        *ORDER_V2["fields"],
        {"name": "channel", "type": ["null", "string"], "default": None},
    ],
}
DECLARATION = """\
streams:
  - name: avro-orders
    format: glue-schema-registry
    registry: {{region: us-east-1, endpoint_url: "{endpoint}"}}
tables:
  - name: orders
    registry_schema: {{registry: {registry}, schema: orders}}
    dedup: id
    event_time_field: at
"""
AT = datetime(2024, 5, 1, 9, 30, tzinfo=UTC)


def test_avro_records_behind_the_registry_header_land_typed_and_the_corrupt_one_quarantined(
    spark, kinesalite_endpoint, moto_endpoint, registry: Registry, settings_factory
):
    v1 = registry.create("orders", ORDER_V1)
    v2 = registry.register("orders", ORDER_V2)
    declaration = DECLARATION.format(endpoint=moto_endpoint.url, registry=registry.name)
    settings = settings_factory(kinesalite_endpoint, declaration=declaration)
    (stream,) = lake_streams(settings, load_declaration(settings.event_schema_path))
    good = framed(v1, avro_datum(ORDER_V1, {"id": "o1", "at": AT, "total": Decimal("9.99")}))
    put(
        stream,
        good,
        framed(
            v2,
            avro_datum(ORDER_V2, {"id": "o2", "at": AT, "total": Decimal("1.50"), "note": "gift"}),
            ZLIB,
        ),
        good[:-4],  # cut short in transit: quarantined, naming the version
        good,  # a producer's retry: a duplicate of o1
    )

    run_ingestion(spark, stream)
    refresh_downstream(spark, settings)

    orders = table_rows(settings, settings.table_identifier("orders"))
    assert sorted((r["id"], r["at"], r["total"], r["note"]) for r in orders) == [
        ("o1", AT, Decimal("9.99"), ""),
        ("o2", AT, Decimal("1.50"), "gift"),
    ]
    reasons = sorted(r["error"] for r in table_rows(settings, settings.quarantine_table))
    assert len(reasons) == 2
    assert reasons[0].startswith("duplicate")
    assert reasons[1].startswith(f"glue-schema-registry: schema version {v1} (version 1 of ")
    assert "Avro payload does not decode" in reasons[1]

    catalog = open_lake(settings)
    report = reconcile_routed(
        catalog.load_table(stream.raw_table),
        {"orders": catalog.load_table(settings.table_identifier("orders"))},
        catalog.load_table(settings.quarantine_table),
        routes_everything=True,
        stream_name=stream.stream_name,
    )
    assert report.passed and report.raw_processed == 4, report

    v3 = registry.register("orders", ORDER_V3)  # between two ingestions, no restart
    v3_order = {"id": "o3", "at": AT, "total": Decimal("3.00"), "note": "", "channel": "web"}
    put(stream, framed(v3, avro_datum(ORDER_V3, v3_order)))
    run_ingestion(spark, stream)
    refresh_downstream(spark, settings)

    orders = table_rows(settings, settings.table_identifier("orders"))
    assert sorted((r["id"], r["note"], r["channel"]) for r in orders) == [
        ("o1", "", None),
        ("o2", "gift", None),
        ("o3", "", "web"),
    ]
