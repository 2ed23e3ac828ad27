"""The kinesis-lake command line, run as a user runs it (a separate process)."""

from __future__ import annotations

from kinesis_lake.iceberg.catalog import open_catalog
from kinesis_lake.pipeline.ingest import run_ingestion
from kinesis_lake_tests.pipeline_helpers import produce, run_cli, run_cli_with, settings_env


def test_history_and_time_travel_queries(spark, kinesalite_endpoint, settings_factory):
    settings = settings_factory(kinesalite_endpoint)
    produce(settings, 80, seed=51)
    run_ingestion(spark, settings)
    table = open_catalog(settings.catalog_name, data_dir=settings.data_dir).load_table(
        settings.raw_table
    )
    first = table.current_snapshot()
    produce(settings, 20, seed=52)
    run_ingestion(spark, settings)

    history = run_cli(settings, "history", "raw_events")
    assert history.returncode == 0, history.stderr
    assert str(first.snapshot_id) in history.stdout
    assert "append" in history.stdout

    now = run_cli(settings, "query", "SELECT count(*) AS n FROM raw_events")
    then = run_cli(
        settings,
        "query",
        "SELECT count(*) AS n FROM raw_events",
        "--snapshot",
        str(first.snapshot_id),
    )
    as_of = run_cli(
        settings,
        "query",
        "SELECT count(*) AS n FROM raw_events",
        "--as-of",
        str(first.timestamp_ms),
    )
    assert now.returncode == then.returncode == as_of.returncode == 0, now.stderr + then.stderr
    assert "100" in now.stdout
    assert "80" in then.stdout and "100" not in then.stdout
    assert "80" in as_of.stdout and "100" not in as_of.stdout


def test_bad_configuration_fails_fast_naming_the_setting(kinesalite_endpoint, settings_factory):
    settings = settings_factory(kinesalite_endpoint)
    env = {**settings_env(settings), "KINESIS_STARTING_POSITION": "yesterday"}
    failed = run_cli_with(env, "ingest", timeout=120)
    assert failed.returncode != 0
    assert "KINESIS_STARTING_POSITION='yesterday'" in failed.stderr
    assert "trim_horizon, latest, at_timestamp" in failed.stderr


def test_a_bad_starting_timestamp_fails_before_spark_naming_the_setting(
    kinesalite_endpoint, settings_factory
):
    """It passed validation and failed ~20 s later inside Spark, naming the source's option."""
    env = {
        **settings_env(settings_factory(kinesalite_endpoint)),
        "KINESIS_STARTING_POSITION": "at_timestamp",
        "KINESIS_STARTING_TIMESTAMP": "yesterday",
    }
    failed = run_cli_with(env, "ingest", timeout=120)
    assert failed.stderr.strip().splitlines() == [
        "kinesis-lake: configuration error: KINESIS_STARTING_TIMESTAMP='yesterday' is neither "
        "ISO-8601 (2026-01-31T12:00:00Z) nor epoch milliseconds."
    ]


def test_ingest_and_maintain_report_progress_in_plain_lines_off_a_terminal(
    kinesalite_endpoint, settings_factory
):
    settings = settings_factory(kinesalite_endpoint, max_records_per_shard=20)
    produce(settings, 120, seed=53)

    ingest = run_cli(settings, "ingest", "--derive")
    maintain = run_cli(settings, "maintain")

    assert ingest.returncode == 0, ingest.stderr[-2000:]
    batches = [line for line in ingest.stdout.splitlines() if line.startswith("batch ")]
    assert len(batches) >= 2, ingest.stdout
    assert all("remaining lag" in line for line in batches)
    assert "120 so far" in batches[-1]
    assert maintain.returncode == 0, maintain.stderr[-2000:]
    tables = [line.split(":")[0] for line in maintain.stdout.splitlines()]
    assert tables == [
        settings.raw_table,
        settings.table_identifier("events"),
        settings.quarantine_table,
        settings.aggregate_table,
    ]
    assert "\x1b[" not in ingest.stdout + maintain.stdout
