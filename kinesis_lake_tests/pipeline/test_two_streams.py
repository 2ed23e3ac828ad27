"""Two declared streams through real Spark: each ingested into its own raw table with its own
checkpoint, each raw table routed to its own tables, one quarantine, every row accounted
for per stream."""

from __future__ import annotations

import shutil
from pathlib import Path

from kinesis_lake.config import Settings
from kinesis_lake.events.declaration_file import load_declaration
from kinesis_lake.pipeline.derive import refresh_downstream
from kinesis_lake.pipeline.ingest import run_ingestion
from kinesis_lake.pipeline.ingest_query import checkpoint_location
from kinesis_lake.pipeline.lake import lake_streams, open_lake
from kinesis_lake.pipeline.reconcile import reconcile_routed
from kinesis_lake_tests.pipeline_helpers import put, table_rows

DECLARATION = """\
streams:
  - {name: web-clicks}
  - {name: orders}
tables:
  - name: clicks
    stream: web-clicks
    route: {type: click}
    fields: [{name: id, type: string, required: true}]
  - name: order_lines
    stream: orders
    fields:
      - {name: id, type: string, required: true}
      - {name: total, type: "decimal(10,2)", required: true}
aggregate: {table: order_lines}
"""


def _put_ingest_and_derive(spark, settings: Settings) -> tuple[Settings, Settings]:
    """A click and a scroll, a good and a bad order, each put on its stream, ingested and
    routed; the settings of each stream."""
    clicks_stream, orders_stream = lake_streams(
        settings, load_declaration(settings.event_schema_path)
    )
    put(clicks_stream, {"id": "c1", "type": "click"}, {"id": "c2", "type": "scroll"})
    put(orders_stream, {"id": "o1", "total": "9.99"}, {"id": "o2", "total": "x"})
    for stream in (clicks_stream, orders_stream):
        run_ingestion(spark, stream)
    refresh_downstream(spark, settings)
    return clicks_stream, orders_stream


def test_two_streams_are_ingested_and_routed_apart(spark, kinesalite_endpoint, settings_factory):
    settings = settings_factory(kinesalite_endpoint, declaration=DECLARATION)
    clicks_stream, orders_stream = _put_ingest_and_derive(spark, settings)

    assert clicks_stream.raw_table.endswith(".raw_web_clicks")
    assert len(table_rows(settings, clicks_stream.raw_table)) == 2
    assert len(table_rows(settings, orders_stream.raw_table)) == 2
    assert [r["id"] for r in table_rows(settings, settings.table_identifier("clicks"))] == ["c1"]
    orders = table_rows(settings, settings.table_identifier("order_lines"))
    assert [(r["id"], str(r["total"])) for r in orders] == [("o1", "9.99")]
    quarantined = {
        (r["stream_name"], r["target_table"], r["error"].split(":")[0])
        for r in table_rows(settings, settings.quarantine_table)
    }
    assert quarantined == {
        ("web-clicks", None, "no route"),
        ("orders", "order_lines", "field 'total'"),
    }
    locations = {checkpoint_location(clicks_stream), checkpoint_location(orders_stream)}
    assert len(locations) == 2 and all(Path(location).is_dir() for location in locations)

    catalog = open_lake(settings)
    quarantine = catalog.load_table(settings.quarantine_table)
    for stream, tables in ((clicks_stream, ["clicks"]), (orders_stream, ["order_lines"])):
        report = reconcile_routed(
            catalog.load_table(stream.raw_table),
            {name: catalog.load_table(settings.table_identifier(name)) for name in tables},
            quarantine,
            routes_everything=False,
            stream_name=stream.stream_name,
        )
        assert report.passed and report.raw_processed == 2, report

    put(orders_stream, {"id": "o3", "total": 1})
    run_ingestion(spark, orders_stream)
    again = refresh_downstream(spark, settings)
    assert again.tables["clicks"].up_to_date, "a stream without new records is not read"
    assert again.tables["order_lines"].rows_written == 1


def test_re_creating_one_streams_raw_table_rebuilds_only_its_rows_of_the_shared_quarantine(
    spark, kinesalite_endpoint, settings_factory
):
    """The operator drops one stream's raw table (and its checkpoint) and ingests it again:
    that stream's routed tables and quarantine rows are rebuilt from the new raw table, the
    other stream's quarantine rows stay (its watermark does, so they would never return)."""
    # Streams of its own: the endpoint outlives each test.
    declaration = DECLARATION.replace("web-clicks", "clicks-2").replace("orders", "orders-2")
    settings = settings_factory(kinesalite_endpoint, declaration=declaration)
    _, orders_stream = _put_ingest_and_derive(spark, settings)

    open_lake(settings).drop_table(orders_stream.raw_table)
    shutil.rmtree(checkpoint_location(orders_stream))
    run_ingestion(spark, orders_stream)
    refresh_downstream(spark, settings)

    quarantined = sorted(
        (r["stream_name"], r["error"].split(":")[0])
        for r in table_rows(settings, settings.quarantine_table)
    )
    assert quarantined == [("clicks-2", "no route"), ("orders-2", "field 'total'")]
    orders = table_rows(settings, settings.table_identifier("order_lines"))
    assert [r["id"] for r in orders] == ["o1"]
