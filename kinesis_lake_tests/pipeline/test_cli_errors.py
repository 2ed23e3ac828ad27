"""Errors of ours print one line; ``--debug`` prints the trace; bugs keep their trace.

Each case runs the real CLI process. The Spark case fails inside the running query (the
source refuses an option on the driver), where the error comes back wrapped by Py4J and
Spark's streaming machinery: the line must still be our message, not 40 lines of Java.
"""

from __future__ import annotations

import subprocess

from kinesis_lake.iceberg.raw_table import ensure_raw_table
from kinesis_lake.iceberg.summary import POSITIONS
from kinesis_lake.pipeline.lake import open_lake
from kinesis_lake_tests.iceberg.helpers import ingest
from kinesis_lake_tests.pipeline_helpers import one_error_line, produce, run_cli_with, settings_env


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli_with(env, *args)


def test_a_configuration_error_is_one_line_and_debug_shows_the_trace(
    settings_factory, moto_endpoint
):
    env = {**settings_env(settings_factory(moto_endpoint)), "KINESIS_SHARD_COUNT": "0"}

    plain = _cli(env, "settings")
    debug = _cli(env, "--debug", "settings")

    assert plain.returncode != 0
    assert plain.stderr.strip().splitlines() == [
        "kinesis-lake: configuration error: KINESIS_SHARD_COUNT=0: it must be a whole number >= 1."
    ]
    assert debug.returncode != 0
    assert "Traceback" in debug.stderr and "SettingsError" in debug.stderr


def test_an_error_raised_inside_spark_is_one_line_naming_the_spark_log(
    kinesalite_endpoint, settings_factory
):
    """A raw table filled from another stream: its committed positions name a shard this
    stream never had, which only the source, on the driver inside Spark, finds out."""
    settings = settings_factory(kinesalite_endpoint)
    produce(settings, 5, seed=9)
    catalog = open_lake(settings)
    catalog.create_namespace_if_not_exists(settings.namespace)
    raw = ensure_raw_table(catalog, settings.raw_table)
    ingest(raw, "other-stream", 0, [1], summary={POSITIONS: '{"shardId-000000000007": "1"}'})
    env = settings_env(settings)

    failed = _cli(env, "ingest")

    assert failed.returncode != 0
    lines = failed.stderr.strip().splitlines()
    assert len(lines) == 2, failed.stderr[-3000:]
    assert lines[0].startswith("kinesis-lake: ") and "shardId-000000000007" in lines[0]
    assert "Traceback" not in failed.stderr and "py4j" not in failed.stderr.lower()
    assert lines[1] == f"(Spark's log: {settings.log_dir / 'spark.log'})"


def test_reading_commands_fail_in_one_line_that_says_what_exists(
    kinesalite_endpoint, settings_factory
):
    """A typo in a table name, bad SQL, a bad --as-of, a time before any data, a lake that
    is not there: each was a traceback (26 to 101 lines)."""
    settings = settings_factory(kinesalite_endpoint)
    env = settings_env(settings)

    nowhere = _cli(env, "query", "SELECT 1 FROM raw_events")
    assert one_error_line(nowhere).startswith(
        f"kinesis-lake: No lake at KINESIS_LAKE_DATA_DIR={settings.data_dir} yet."
    )
    assert not (settings.data_dir / "catalog.db").exists(), "reading created an empty catalog"

    catalog = open_lake(settings)
    catalog.create_namespace_if_not_exists(settings.namespace)
    raw = ensure_raw_table(catalog, settings.raw_table)
    ingest(raw, "writer", 0, [1, 2])
    first = raw.current_snapshot()
    assert first is not None

    assert one_error_line(_cli(env, "query", "SELECT count(*) FROM raw_event")) == (
        "kinesis-lake: Catalog Error: Table with name raw_event does not exist!; the tables in "
        f"{settings.namespace} are: raw_events"
    )
    assert one_error_line(_cli(env, "query", "SELEC 1")).startswith(
        "kinesis-lake: Cannot parse the query: syntax error"
    )
    assert one_error_line(_cli(env, "query", "SELECT nope FROM raw_events")).startswith(
        'kinesis-lake: Binder Error: Referenced column "nope" not found'
    )
    assert one_error_line(
        _cli(env, "query", "SELECT 1 FROM raw_events", "--as-of", "yesterday")
    ) == (
        "kinesis-lake: configuration error: --as-of 'yesterday' is neither ISO-8601 "
        "(2026-11-24T10:00:00Z) nor epoch milliseconds"
    )
    before = _cli(env, "query", "SELECT 1 FROM raw_events", "--as-of", str(first.timestamp_ms - 1))
    assert one_error_line(before).startswith("kinesis-lake: No table the query names had data at ")
    assert "the earliest data is raw_events's" in one_error_line(before)
    assert one_error_line(_cli(env, "history", "raw_event")) == (
        f"kinesis-lake: No table {settings.namespace}.raw_event; the tables in "
        f"{settings.namespace} are: raw_events"
    )
