"""A table declared from an Avro schema file (``schema_file:``, no ``fields:``) through a real
refresh, as issue 35 asks: "routing, dedup, partitioning, upserts and SQL tables work on
such tables as on JSON ones", and read fresh while behind raw. Avro records written by
fastavro (not our code) are put on the local Kinesis endpoint in two batches, ingested and
refreshed by real Spark into Iceberg: the routed table keeps one row per key across
batches, is partitioned as declared, and the upsert and SQL tables over it hold what they
would over a listed one."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from kinesis_lake.events.declaration_file import load_declaration
from kinesis_lake.pipeline.derive import refresh_downstream
from kinesis_lake.pipeline.fresh_read import fresh_read
from kinesis_lake.pipeline.ingest import run_ingestion
from kinesis_lake.pipeline.lake import lake_streams, open_lake
from kinesis_lake_tests.events.registry import avro_datum
from kinesis_lake_tests.pipeline.fresh_helpers import comparable
from kinesis_lake_tests.pipeline_helpers import assert_reconciled, put, table_rows

ORDER = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "order_id", "type": "string"},
        {"name": "version", "type": "long"},
        {
            "name": "status",
            "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID", "VOID"]},
        },
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {
            "name": "total",
            "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
        },
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}
DECLARATION = """\
streams:
  - name: {stream}
    format: avro
    schema_file: order.avsc
tables:
  - name: orders
    schema_file: order.avsc
    route: {{status: {{one_of: [NEW, PAID]}}}}
    dedup: id
    event_time_field: at
    partition: [{{field: at, transform: day}}, {{field: status, transform: identity}}]
derived:
  - name: latest_orders
    from: orders
    upsert: {{key: order_id, version: version}}
  - name: totals_by_status
    sql: SELECT status, count(*) AS orders, sum(total) AS total FROM orders GROUP BY status
"""
MAY_1 = datetime(2024, 5, 1, 9, 30, tzinfo=UTC)
MAY_2 = datetime(2024, 5, 2, 18, 0, tzinfo=UTC)


def order(event: str, order_id: str, version: int, status: str, at: datetime) -> dict[str, Any]:
    return {
        "id": event,
        "order_id": order_id,
        "version": version,
        "status": status,
        "at": at,
        "total": Decimal(f"{version}.50"),
        "note": None if version == 1 else f"v{version}",
    }


E1 = order("e1", "o1", 1, "NEW", MAY_1)
E2 = order("e2", "o2", 2, "NEW", MAY_1)
VOID = order("e3", "o3", 1, "VOID", MAY_1)  # no route takes it
E4 = order("e4", "o1", 2, "PAID", MAY_2)  # o1's update
E5 = order("e5", "o2", 1, "PAID", MAY_2)  # an older version of o2, arriving later: loses


def test_routing_dedup_partitioning_upsert_and_sql_over_a_table_declared_from_avro(
    spark, kinesalite_endpoint, settings_factory, tmp_path: Path
):
    (tmp_path / "order.avsc").write_text(json.dumps(ORDER))  # beside lake.yaml
    name = f"avro-orders-{uuid.uuid4().hex[:8]}"
    settings = settings_factory(kinesalite_endpoint, declaration=DECLARATION.format(stream=name))
    declaration = load_declaration(settings.event_schema_path)
    assert declaration.tables[0].origin is not None, "the table's columns come from the file"
    (stream,) = lake_streams(settings, declaration)

    put(stream, *(avro_datum(ORDER, r) for r in (E1, E2, VOID, E1)))
    run_ingestion(spark, stream)
    refresh_downstream(spark, settings)
    put(stream, *(avro_datum(ORDER, r) for r in (E4, E1, E5)))  # e1 a third time
    run_ingestion(spark, stream)
    fresh = fresh_read(settings, "orders")  # raw holds the second batch, orders not yet
    refresh_downstream(spark, settings)

    orders = table_rows(settings, settings.table_identifier("orders"))
    assert fresh.rows_from_raw == 2 and comparable(fresh.table.to_pylist()) == comparable(orders)
    assert sorted((r["id"], r["order_id"], r["status"], r["at"], r["total"]) for r in orders) == [
        ("e1", "o1", "NEW", MAY_1, Decimal("1.50")),
        ("e2", "o2", "NEW", MAY_1, Decimal("2.50")),
        ("e4", "o1", "PAID", MAY_2, Decimal("2.50")),
        ("e5", "o2", "PAID", MAY_2, Decimal("1.50")),
    ]
    reasons = sorted(r["error"] for r in table_rows(settings, settings.quarantine_table))
    assert [reason.split(" ")[0] for reason in reasons] == ["duplicate", "duplicate", "no"]
    assert reasons[2].startswith("no route"), reasons
    assert_reconciled(stream, ["orders"])

    table = open_lake(settings).load_table(settings.table_identifier("orders"))
    spec = [(field.name, str(field.transform)) for field in table.spec().fields]
    assert spec == [("at_day", "day"), ("status", "identity")]
    partitions = {  # the day transform's value: days since 1970-01-01
        (date(1970, 1, 1) + timedelta(days=task.file.partition[0]), task.file.partition[1])
        for task in table.scan().plan_files()
    }
    assert partitions == {(date(2024, 5, 1), "NEW"), (date(2024, 5, 2), "PAID")}

    latest = table_rows(settings, settings.table_identifier("latest_orders"))
    assert sorted((r["order_id"], r["id"], r["version"], r["note"]) for r in latest) == [
        ("o1", "e4", 2, "v2"),
        ("o2", "e2", 2, "v2"),
    ]
    totals = table_rows(settings, settings.table_identifier("totals_by_status"))
    assert sorted((r["status"], r["orders"], r["total"]) for r in totals) == [
        ("NEW", 2, Decimal("4.00")),
        ("PAID", 2, Decimal("4.00")),
    ]
