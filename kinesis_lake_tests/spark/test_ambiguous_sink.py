"""A raw-table commit that lands and then raises, through the real Spark streaming sink.

Spark calls the sink's ``abort`` for any exception of ``commit``; the replay after a
restart then finds the batch committed and skips it. Every record must still be
readable from the table (no data file deleted under it) and be there exactly once.

Ingestion runs through the CLI: PySpark runs a data source's ``commit`` in a Python
worker that inherits the environment of the JVM, so the catalog configuration must be
in place when Spark starts, and the faults are armed through the catalog's fault file.
"""

from __future__ import annotations

from collections import Counter

import pytest

from kinesis_lake_tests.ambiguous_catalog import (
    LANDS_LATE,
    LANDS_THEN_RAISES,
    arm,
    catalog_environment,
    held_commits,
    pending,
)
from kinesis_lake_tests.pipeline_helpers import produce, raw_keys, run_cli, stream_truth
from kinesis_lake_tests.production.lake_checks import assert_derived_tables_add_up


@pytest.mark.parametrize(
    ("mode", "error", "query_fails"),
    [
        (LANDS_THEN_RAISES, "unknown", True),
        (LANDS_THEN_RAISES, "conflict", False),
        (LANDS_LATE, "unknown", True),
    ],
    ids=[
        "commit-state-unknown-then-abort",
        "conflict-then-skipped-duplicate",
        "applied-after-the-abort-by-the-restart",
    ],
)
def test_a_raw_commit_that_landed_then_raised_loses_and_duplicates_nothing(
    kinesalite_endpoint, settings_factory, tmp_path, monkeypatch, mode, error, query_fails
):
    """``LANDS_LATE``: the catalog applies the failed batch's commit only when the restart
    commits (after the abort ran in the first process), so the replay finds it landed."""
    settings = settings_factory(kinesalite_endpoint, max_records_per_shard=100)
    fault_file = tmp_path / "faults.json"
    for key, value in catalog_environment(
        settings.data_dir, fault_file, settings.catalog_name
    ).items():
        monkeypatch.setenv(key, value)
    produce(settings, 400, seed=17)
    arm(fault_file, mode, error=error, table=settings.raw_table)

    first = run_cli(settings, "ingest")
    assert (first.returncode != 0) == query_fails, first.stderr[-3000:]
    if query_fails:
        assert "injected" in first.stderr
        restart = run_cli(settings, "ingest")  # replays the failed batch
        assert restart.returncode == 0, restart.stderr[-3000:]

    assert pending(fault_file) == 0, "the fault never fired"
    assert held_commits(fault_file) == 0, "the late commit was never applied"
    keys = raw_keys(settings)  # reads every data file: a deleted one fails here
    assert {(shard, sequence) for shard, sequence, _ in keys} == stream_truth(settings)
    assert not [key for key, n in Counter(keys).items() if n > 1]
    assert len(keys) == 400


@pytest.mark.parametrize("table", ["quarantine_table", "aggregate_table"])
def test_a_derive_commit_that_landed_then_raised_leaves_the_derived_tables_adding_up(
    kinesalite_endpoint, settings_factory, tmp_path, monkeypatch, table
):
    """Quarantine goes through the sink's batch writer, the aggregate through commit_arrow."""
    settings = settings_factory(kinesalite_endpoint)
    fault_file = tmp_path / "faults.json"
    for key, value in catalog_environment(
        settings.data_dir, fault_file, settings.catalog_name
    ).items():
        monkeypatch.setenv(key, value)
    produce(settings, 200, malformed_every=10, seed=23)
    arm(fault_file, LANDS_THEN_RAISES, table=getattr(settings, table))

    first = run_cli(settings, "ingest", "--derive")
    assert first.returncode != 0 and "injected" in first.stderr, first.stderr[-3000:]
    again = run_cli(settings, "ingest", "--derive")
    assert again.returncode == 0, again.stderr[-3000:]

    assert pending(fault_file) == 0
    assert_derived_tables_add_up(settings, raw=200, malformed=20)
