"""An upsert table read by a table that follows its appends (issue 31, defect 4).

An upsert table replaces rows (copy-on-write overwrites), so a table that reads only what
its input appended (an upsert, a ``rows`` or a ``windowed`` SQL table) cannot follow it:
the first replaced key stopped both tables for good. Such a declaration is refused when
it loads, naming file, line and the fix; ``full`` SQL over an upsert table still works.
"""

from __future__ import annotations

import pytest

from kinesis_lake.config import Settings
from kinesis_lake.events.declaration import DeclarationError
from kinesis_lake.pipeline.derive import refresh_downstream
from kinesis_lake_tests.pipeline.declared_lakes import PROFILES, profile_at
from kinesis_lake_tests.pipeline_helpers import ingest_and_derive, table_rows

WINDOWED_OVER_UPSERT = """\
  - name: profiles_per_hour
    sql: SELECT date_trunc('hour', at) AS hour, count(*) AS profiles FROM user_profiles GROUP BY 1
    refresh: windowed
    window: {column: at, size: hour, output: hour}
"""
FULL_OVER_UPSERT = WINDOWED_OVER_UPSERT.replace(
    "    refresh: windowed\n    window: {column: at, size: hour, output: hour}\n",
    "    refresh: full\n",
)
AT_NOON = "2024-05-01T12:00:00Z"
FIRST_LINE = PROFILES.count("\n") + 1


def _settings(settings_factory, endpoint, derived: str) -> Settings:
    return settings_factory(endpoint, declaration=PROFILES + derived)


def test_a_windowed_table_over_an_upsert_table_is_refused_before_it_can_get_stuck(
    spark, kinesalite_endpoint, settings_factory
):
    settings = _settings(settings_factory, kinesalite_endpoint, WINDOWED_OVER_UPSERT)

    with pytest.raises(DeclarationError) as refused:
        ingest_and_derive(spark, settings, profile_at("ann", 1, "2024-05-01T10:05:00Z"))
        # replaces ann's row:
        ingest_and_derive(spark, settings, profile_at("ann", 2, "2024-05-01T10:06:00Z"))

    assert str(refused.value) == (
        f"{settings.event_schema_path}:{FIRST_LINE}: derived table 'profiles_per_hour': "
        "refresh windowed follows the rows its input appends, and user_profiles is an upsert "
        "table, which replaces rows; use refresh: full"
    )


def test_a_full_table_over_an_upsert_table_follows_every_replacement(
    spark, kinesalite_endpoint, settings_factory
):
    settings = _settings(settings_factory, kinesalite_endpoint, FULL_OVER_UPSERT)

    ingest_and_derive(spark, settings, profile_at("ann", 1, "2024-05-01T10:05:00Z"))
    ingest_and_derive(
        spark,
        settings,
        profile_at("ann", 2, "2024-05-01T11:06:00Z"),
        profile_at("bob", 1, AT_NOON),
    )
    refresh_downstream(spark, settings)

    rows = table_rows(settings, settings.table_identifier("profiles_per_hour"))
    assert sorted((r["hour"].hour, r["profiles"]) for r in rows) == [(11, 1), (12, 1)]
