"""Derived tables: every raw record parsed or quarantined, aggregates add up, incrementally."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from kinesis_lake.pipeline.derive import refresh_downstream
from kinesis_lake.pipeline.ingest import run_ingestion
from kinesis_lake_tests.pipeline_helpers import produce, table_rows

MALFORMED_EVERY = 10


def test_derived_tables_account_for_every_raw_record(spark, kinesalite_endpoint, settings_factory):
    settings = settings_factory(kinesalite_endpoint)
    produce(settings, 400, malformed_every=MALFORMED_EVERY, seed=11)
    run_ingestion(spark, settings)

    result = refresh_downstream(spark, settings)

    parsed = table_rows(settings, settings.table_identifier("events"))
    quarantined = table_rows(settings, settings.quarantine_table)
    assert len(quarantined) == 400 // MALFORMED_EVERY
    assert len(parsed) == 400 - 400 // MALFORMED_EVERY
    assert all(row["error"] for row in quarantined)
    assert all(row["payload"] for row in quarantined)
    assert {r["event_type"] for r in parsed} <= {"click", "page_view", "purchase", "profile_update"}
    assert all(isinstance(r["amount"], float) for r in parsed)
    assert result.tables["events"].rows_written == len(parsed)

    counts = table_rows(settings, settings.aggregate_table)
    assert sum(r["event_count"] for r in counts) == len(parsed)
    expected = Counter(
        (r["event_timestamp"].replace(second=0, microsecond=0), r["event_type"]) for r in parsed
    )
    assert {(r["window_start"], r["event_type"]): r["event_count"] for r in counts} == expected


def test_refresh_reads_only_what_was_appended_since_the_last_one(
    spark, kinesalite_endpoint, settings_factory
):
    settings = settings_factory(kinesalite_endpoint)
    produce(settings, 200, seed=12)
    run_ingestion(spark, settings)
    first = refresh_downstream(spark, settings)

    produce(settings, 50, seed=13)
    run_ingestion(spark, settings)
    second = refresh_downstream(spark, settings)
    third = refresh_downstream(spark, settings)

    assert first.tables["events"].source_rows_read == 200
    assert second.tables["events"].source_rows_read == 50, "only the new raw rows are read"
    assert third.tables["events"].up_to_date and third.tables["events"].source_rows_read == 0
    assert len(table_rows(settings, settings.table_identifier("events"))) == 250
    counts = table_rows(settings, settings.aggregate_table)
    assert sum(r["event_count"] for r in counts) == 250


def test_repeated_events_are_quarantined_as_duplicates_not_dropped(
    spark, kinesalite_endpoint, settings_factory
):
    settings = settings_factory(kinesalite_endpoint)
    produce(settings, 120, seed=21)
    produce(settings, 30, seed=22)
    run_ingestion(spark, settings)
    refresh_downstream(spark, settings)
    produce(settings, 120, seed=21)  # a producer replaying everything it sent
    run_ingestion(spark, settings)

    refresh_downstream(spark, settings)

    parsed = table_rows(settings, settings.table_identifier("events"))
    quarantined = table_rows(settings, settings.quarantine_table)
    assert len(parsed) == 150
    assert len({r["event_id"] for r in parsed}) == 150
    assert len(quarantined) == 120
    assert all(r["error"].startswith("duplicate event: event_id=") for r in quarantined)
    assert all(r["payload"] and r["error_field"] == "event_id" for r in quarantined)
    assert len(parsed) + len(quarantined) == 270, "every raw record is accounted for"


def test_a_new_optional_field_in_the_schema_becomes_a_column(
    spark, kinesalite_endpoint, settings_factory, tmp_path
):
    settings = settings_factory(kinesalite_endpoint)
    produce(settings, 40, seed=31)
    run_ingestion(spark, settings)
    refresh_downstream(spark, settings)

    evolved = tmp_path / "evolved.yaml"
    evolved.write_text(
        settings.event_schema_path.read_text().replace(
            "  - {name: key3, type: string}",
            "  - {name: key3, type: string}\n  - {name: campaign, type: string}",
        )
    )
    assert "campaign" in evolved.read_text()
    settings = replace(settings, event_schema_path=evolved)
    produce(settings, 10, seed=32)
    run_ingestion(spark, settings)
    refresh_downstream(spark, settings)

    parsed = table_rows(settings, settings.table_identifier("events"))
    assert len(parsed) == 50
    assert "campaign" in parsed[0]
    assert all(r["campaign"] is None for r in parsed)
