"""Routed tables and the quarantine over a raw table that was dropped and re-created (issue
31, defect 5): real Kinesis, Spark and Iceberg.

They read raw incrementally under a watermark of raw's sequence numbers; a re-created raw
table starts those again at 1, so its rows were skipped, or its history did not hold the
snapshot the tables had read and every refresh failed.
"""

from __future__ import annotations

from dataclasses import replace

from kinesis_lake.config import Settings
from kinesis_lake.pipeline.derive import refresh_downstream
from kinesis_lake.pipeline.ingest import run_ingestion
from kinesis_lake.pipeline.lake import open_lake
from kinesis_lake_tests.pipeline_helpers import (
    assert_accounted,
    event,
    ingest_and_derive,
    put,
    table_rows,
)

AT = "2024-05-01T10:00:00Z"


def recreate_raw(spark, settings: Settings) -> Settings:
    """Drop raw and ingest the stream again from a fresh checkpoint (the advice for an
    expired or lost raw history): the new raw table holds every record the stream has."""
    open_lake(settings).drop_table(settings.raw_table)
    fresh = str(settings.data_dir / "checkpoints-again")
    settings = replace(settings, checkpoint_dir=fresh, source_progress_dir=fresh)
    run_ingestion(spark, settings)
    return settings


def test_routed_tables_and_quarantine_rebuild_from_a_re_created_raw_table(
    spark, kinesalite_endpoint, settings_factory
):
    settings = settings_factory(kinesalite_endpoint)
    ingest_and_derive(
        spark, settings, event("e1", AT), b"not json", event("e2", AT), event("e1", AT)
    )
    ingest_and_derive(spark, settings, event("e3", AT))
    assert table_ids_of(settings) == ["e1", "e2", "e3"]

    put(settings, event("e4", AT), b"{broken")
    settings = recreate_raw(spark, settings)
    refresh_downstream(spark, settings)

    parsed, quarantined = assert_accounted(settings)
    assert sorted(r["event_id"] for r in parsed) == ["e1", "e2", "e3", "e4"]
    reasons = sorted(r["error"].split(":")[0] for r in quarantined)
    assert reasons == ["duplicate event", "invalid JSON", "invalid JSON"]

    refresh_downstream(spark, settings)  # nothing new: nothing moves
    assert_accounted(settings)
    assert len(table_rows(settings, settings.quarantine_table)) == 3


def table_ids_of(settings: Settings) -> list[str]:
    return sorted(r["event_id"] for r in table_rows(settings, settings.table_identifier("events")))
