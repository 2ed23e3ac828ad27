"""The follower's warm-up runs the refresh's read and write paths and changes no table."""

from __future__ import annotations

from kinesis_lake.events.declaration_file import load_declaration
from kinesis_lake.pipeline.derive import refresh_downstream
from kinesis_lake.pipeline.ingest import run_ingestion
from kinesis_lake.pipeline.lake import open_lake
from kinesis_lake.pipeline.warm_up import warm_up
from kinesis_lake_tests.pipeline_helpers import event, ingest_and_derive, put


def _metadata(settings) -> dict[str, str]:
    """Every table's current metadata file: any commit, even of properties, changes it."""
    catalog = open_lake(settings)
    names = load_declaration(settings.event_schema_path).names
    tables = [
        settings.raw_table,
        settings.quarantine_table,
        *(settings.table_identifier(n) for n in names),
    ]
    return {name: catalog.load_table(name).metadata_location for name in tables}


def test_warming_up_changes_no_table_and_the_refresh_after_it_takes_everything(
    spark, kinesalite_endpoint, settings_factory
):
    settings = settings_factory(kinesalite_endpoint)
    assert not warm_up(spark, settings), "nothing to warm up on before the first refresh"
    ingest_and_derive(spark, settings, event("a", "2024-05-01T10:00:00Z"), b"not json")
    put(settings, event("b", "2024-05-01T10:00:01Z"), event("a", "2024-05-01T10:30:00Z"))
    run_ingestion(spark, settings)  # raw is ahead: the warm-up replays a batch behind it
    before = _metadata(settings)

    assert warm_up(spark, settings)

    assert _metadata(settings) == before
    result = refresh_downstream(spark, settings)
    assert result.tables["events"].rows_written == 1
    assert result.quarantine.rows_written == 1  # the repeat of a
