"""``kinesis-lake check``'s output, run as CI runs it (a separate process): its own lines
only, Dagster's event log when asked for with ``--debug``."""

from __future__ import annotations

from kinesis_lake.iceberg.raw_table import ensure_raw_table
from kinesis_lake.pipeline.lake import open_lake
from kinesis_lake_tests.iceberg.helpers import ingest
from kinesis_lake_tests.pipeline_helpers import run_cli

DUPLICATES = "raw_events:no_duplicate_records"


def test_check_prints_its_own_lines_and_dagster_s_event_log_only_with_debug(
    kinesalite_endpoint, settings_factory
):
    """It printed about a hundred of Dagster's DEBUG lines (RUN_START, STEP_OUTPUT, ...) on
    stderr beside its one line per check."""
    settings = settings_factory(kinesalite_endpoint)
    catalog = open_lake(settings)
    catalog.create_namespace_if_not_exists(settings.namespace)
    ingest(ensure_raw_table(catalog, settings.raw_table), "writer", 0, [1, 2])

    plain = run_cli(settings, "check", "--select", DUPLICATES)
    debug = run_cli(settings, "--debug", "check", "--select", DUPLICATES)

    assert plain.returncode == 0 == debug.returncode, plain.stderr[-2000:]
    assert plain.stdout.splitlines() == [
        f"PASS  {DUPLICATES}  No Kinesis record is stored twice.",
        "1 passed, 0 warned, 0 failed",
    ]
    assert [line for line in plain.stderr.splitlines() if " - DEBUG - " in line] == []
    assert " - DEBUG - " in debug.stderr and "RUN_SUCCESS" in debug.stderr
    assert debug.stdout == plain.stdout
