"""How much snapshot history the raw table keeps. A writer that commits every second
(a lingering run, a short continuous trigger) adds 86,400 snapshots a day, and every
commit rewrites the metadata that lists them all: the raw table's own
``history.expire.max-snapshot-age-ms`` bounds that, and maintenance follows it."""

from __future__ import annotations

import re

import pytest

from kinesis_lake.config import Settings
from kinesis_lake.errors import KinesisLakeError
from kinesis_lake.pipeline.derive import refresh_downstream
from kinesis_lake.pipeline.ingest import run_ingestion
from kinesis_lake.pipeline.ingest_query import prepare_raw_table
from kinesis_lake.pipeline.lake import open_lake
from kinesis_lake.pipeline.maintain import MaintenancePolicy, run_maintenance
from kinesis_lake_tests.pipeline_helpers import produce, raw_keys


def test_maintenance_expires_raw_snapshots_by_the_tables_own_max_age(
    spark, kinesalite_endpoint, settings_factory
):
    settings = settings_factory(kinesalite_endpoint)
    for seed in (41, 42, 43):
        produce(settings, 10, seed=seed)
        run_ingestion(spark, settings)
    refresh_downstream(spark, settings)  # until their first refresh, nothing expires
    table = open_lake(settings).load_table(settings.raw_table)
    assert table.properties["history.expire.max-snapshot-age-ms"] == str(60 * 60 * 1000)
    assert len(table.metadata.snapshots) >= 3

    with table.transaction() as change:  # an operator's choice: keep a millisecond, one
        change.set_properties(
            {
                "history.expire.max-snapshot-age-ms": "1",
                "history.expire.min-snapshots-to-keep": "1",
            }
        )
    done = run_maintenance(settings, settings.raw_table_name, MaintenancePolicy())

    assert done.snapshots_after == 2  # the compaction's, and the one derive last read
    assert len(raw_keys(settings)) == 30


def test_an_unreadable_max_age_property_fails_maintenance_naming_it(
    streamless_settings: Settings,
):
    """An operator's typo in the table property must say which property and table, not
    raise a bare ValueError from inside the maintenance op."""
    settings = streamless_settings
    table = prepare_raw_table(settings)
    with table.transaction() as change:
        change.set_properties({"history.expire.max-snapshot-age-ms": "one hour"})

    with pytest.raises(KinesisLakeError, match=r"history\.expire\.max-snapshot-age-ms='one hour'"):
        run_maintenance(settings, settings.raw_table_name, MaintenancePolicy())


@pytest.mark.parametrize(
    "name", ["history.expire.min-snapshots-to-keep", "write.target-file-size-bytes"]
)
def test_every_unreadable_upkeep_property_fails_maintenance_naming_it(
    streamless_settings: Settings, name
):
    """docs/operations.md tells operators of older lakes to set the snapshot floor by hand:
    a typo there must fail like one in the max age, not as a bare ValueError."""
    settings = streamless_settings
    table = prepare_raw_table(settings)
    with table.transaction() as change:
        change.set_properties({name: "ten"})

    with pytest.raises(KinesisLakeError, match=rf"{re.escape(name)}='ten'"):
        run_maintenance(settings, settings.raw_table_name, MaintenancePolicy())
