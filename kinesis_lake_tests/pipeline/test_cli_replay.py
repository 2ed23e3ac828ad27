"""``kinesis-lake replay`` in a new process (real Kinesis endpoint, Spark and Iceberg): it
says what it added to each table, the rows its catch-up with raw wrote first included."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from kinesis_lake_tests.pipeline.declared_lakes import (
    AT,
    ONLY_PAGES_AND_ORDERS,
    ORDERS_AND_REFUNDS,
    order,
)
from kinesis_lake_tests.pipeline_helpers import ingest_and_derive, run_cli


def test_replay_prints_each_table_it_wrote_to_with_its_catch_up(
    spark, kinesalite_endpoint, settings_factory, tmp_path: Path
):
    declaration = tmp_path / "lake.yaml"
    declaration.write_text(ONLY_PAGES_AND_ORDERS)
    settings = replace(settings_factory(kinesalite_endpoint), event_schema_path=declaration)
    refund = {"id": "r", "type": "refund", "at": AT}  # no table takes refunds yet
    ingest_and_derive(spark, settings, order("a", 1), refund)
    # orders: new, and takes refunds; its backfill (the catch-up) writes a and r, so the
    # replay finds r held and only marks it resolved
    declaration.write_text(ORDERS_AND_REFUNDS)

    replayed = run_cli(settings, "replay")

    assert replayed.returncode == 0, replayed.stderr[-3000:]
    assert replayed.stdout.strip().splitlines()[-2:] == [
        "orders: 2 rows added (0 replayed, 2 caught up from raw first)",
        "replayed 1 quarantined records: 1 resolved, 0 still quarantined",
    ]
