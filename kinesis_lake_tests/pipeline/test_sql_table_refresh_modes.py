"""Declared Spark SQL tables in each refresh mode, through real Kinesis, Spark and Iceberg.

Each test checks the table against the same SQL run by Spark over the whole input at
the end: what an incremental refresh must equal. (Inputs that change under a SQL table,
with no stream behind them: ``test_sql_tables.py``.)
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from kinesis_lake.config import Settings
from kinesis_lake.pipeline.derive import refresh_downstream
from kinesis_lake.pipeline.ingest import run_ingestion
from kinesis_lake_tests.ambiguous_catalog import LANDS_THEN_RAISES
from kinesis_lake_tests.pipeline.declared_lakes import (
    PROFILES_WITH_SQL_TABLES,
    profile_at,
)
from kinesis_lake_tests.pipeline_helpers import (
    derive_with_a_failing_commit,
    ingest_and_derive,
    put,
    table_rows,
)

DECLARATION = PROFILES_WITH_SQL_TABLES  # the lake of the ``settings`` fixture (conftest)


def rows_of(settings: Settings, table: str) -> list[dict[str, Any]]:
    return table_rows(settings, settings.table_identifier(table))


def test_rows_mode_appends_the_sql_over_new_rows_only(spark, settings):
    ingest_and_derive(
        spark,
        settings,
        profile_at("ann", 1, "2024-05-01T10:05:00Z"),
        profile_at("bob", 1, "2024-05-01T10:06:00Z"),
    )
    result = ingest_and_derive(
        spark,
        settings,
        profile_at("ann", 2, "2024-05-01T11:00:00Z"),
        profile_at("bob", 2, "2024-05-01T11:01:00Z", "delete"),
    )

    assert result.derived["emails"].rows_written == 1, "only the new rows ran through the SQL"
    emails = Counter((r["user_id"], r["email"], r["version"]) for r in rows_of(settings, "emails"))
    assert emails == Counter(
        {
            ("ann", "ann@example.com", 1): 1,
            ("bob", "bob@example.com", 1): 1,
            ("ann", "ann@example.com", 2): 1,
        }
    )
    again = refresh_downstream(spark, settings)
    assert again.derived["emails"].up_to_date
    assert len(rows_of(settings, "emails")) == 3


def test_windowed_mode_recomputes_only_the_windows_new_rows_fall_in_late_rows_included(
    spark, settings
):
    ingest_and_derive(
        spark,
        settings,
        profile_at("ann", 1, "2024-05-01T10:05:00Z"),
        profile_at("bob", 1, "2024-05-01T10:59:00Z"),
        profile_at("cid", 1, "2024-05-01T11:30:00Z"),
    )
    first = {r["hour"].hour: r for r in rows_of(settings, "updates_per_hour")}
    assert {h: r["updates"] for h, r in first.items()} == {10: 2, 11: 1}

    # Late, in hour 10 again:
    late = ingest_and_derive(spark, settings, profile_at("dee", 7, "2024-05-01T10:30:00Z"))

    hours = {
        r["hour"].hour: (r["updates"], r["top_version"])
        for r in rows_of(settings, "updates_per_hour")
    }
    assert hours == {10: (3, 7), 11: (1, 1)}
    assert late.derived["updates_per_hour"].rows_written == 1, "hour 11 was not recomputed"


def test_full_mode_recomputes_when_an_input_changed_and_only_then(spark, settings):
    ingest_and_derive(
        spark,
        settings,
        profile_at("ann", 1, "2024-05-01T10:00:00Z"),
        profile_at("bob", 1, "2024-05-01T10:00:00Z"),
    )
    assert rows_of(settings, "profile_count") == [{"profiles": 2}]

    ingest_and_derive(spark, settings, profile_at("ann", 2, "2024-05-01T10:00:00Z", "delete"))
    assert rows_of(settings, "profile_count") == [{"profiles": 1}]

    again = refresh_downstream(spark, settings)
    assert not again.derived["profile_count"].committed, "no input changed: nothing recomputed"
    assert rows_of(settings, "profile_count") == [{"profiles": 1}]


def test_a_sql_refresh_whose_commit_landed_but_failed_is_finished_exactly_once(spark, settings):
    """The commit of a windowed table (replaced windows) lands and then raises, in a
    separate process; the rerun here must not count anything twice, nor append twice to
    the rows table refreshed before it. (A rows table's own commit is the Iceberg sink's,
    whose landed-then-failed commits ``spark/test_ambiguous_sink.py`` covers.)"""
    ingest_and_derive(spark, settings, profile_at("ann", 1, "2024-05-01T10:05:00Z"))
    put(
        settings,
        profile_at("bob", 1, "2024-05-01T10:10:00Z"),
        profile_at("cid", 1, "2024-05-01T11:00:00Z"),
    )
    run_ingestion(spark, settings)

    crashed = derive_with_a_failing_commit(
        settings, settings.table_identifier("updates_per_hour"), mode=LANDS_THEN_RAISES
    )
    assert crashed.returncode != 0 and "injected" in crashed.stderr, crashed.stderr[-3000:]
    refresh_downstream(spark, settings)

    assert sorted(r["user_id"] for r in rows_of(settings, "emails")) == ["ann", "bob", "cid"]
    hours = {r["hour"].hour: r["updates"] for r in rows_of(settings, "updates_per_hour")}
    assert hours == {10: 2, 11: 1}
