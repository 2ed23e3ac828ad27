"""The replay_quarantine job through a real Dagster run (real Spark, Kinesis endpoint and
Iceberg): it reports every table the replay wrote to, the rows its catch-up with raw wrote
(a new table's backfill) included."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from kinesis_lake.defs.jobs import replay_job
from kinesis_lake_tests.defs.helpers import make_lake
from kinesis_lake_tests.pipeline.declared_lakes import (
    AT,
    ONLY_PAGES_AND_ORDERS,
    ORDERS_AND_REFUNDS,
    order,
)
from kinesis_lake_tests.pipeline_helpers import ingest_and_derive, table_rows


def test_the_replay_job_reports_the_rows_its_catch_up_and_its_replay_wrote(
    spark, kinesalite_endpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    declaration = tmp_path / "lake.yaml"
    declaration.write_text(ONLY_PAGES_AND_ORDERS)
    lake = make_lake(monkeypatch, tmp_path / "data", kinesalite_endpoint.url).rebuild(
        monkeypatch, KINESIS_LAKE_EVENT_SCHEMA=str(declaration)
    )
    refund = {"id": "r", "type": "refund", "at": AT}  # no table takes refunds yet
    ingest_and_derive(spark, lake.settings, order("a", 1), refund)
    # orders: new, and takes refunds; its backfill (the catch-up) writes a and r, so the
    # replay finds r held and only marks it resolved
    declaration.write_text(ORDERS_AND_REFUNDS)

    with dg.instance_for_test() as instance:
        run = replay_job.execute_in_process(resources=lake.resources, instance=instance)

    assert run.success
    reported = {
        e.materialization.asset_key.to_user_string(): e.materialization.metadata
        for e in run.get_asset_materialization_events()
    }
    assert "events" not in reported, "nothing was written to events"
    orders = {key: value.value for key, value in reported["orders"].items()}
    assert len(table_rows(lake.settings, lake.settings.table_identifier("orders"))) == 2
    assert {
        key: orders.get(key)
        for key in ("rows_added", "caught_up_rows", "replayed_rows", "dagster/row_count")
    } == {"rows_added": 2, "caught_up_rows": 2, "replayed_rows": 0, "dagster/row_count": 2}
    assert reported["events_quarantine"]["replay_resolved"].value == 1
