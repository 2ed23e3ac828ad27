"""The kinesis-lake command line, run as a user runs it (a separate process)."""

from __future__ import annotations

import subprocess
import sys

from kinesis_lake.iceberg.catalog import open_catalog
from kinesis_lake.pipeline.ingest import run_ingestion
from kinesis_lake_tests.pipeline_helpers import produce, run_cli, settings_env


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
    failed = subprocess.run(
        [sys.executable, "-m", "kinesis_lake.cli", "ingest"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert failed.returncode != 0
    assert "KINESIS_STARTING_POSITION='yesterday'" in failed.stderr
    assert "trim_horizon, latest, at_timestamp" in failed.stderr
