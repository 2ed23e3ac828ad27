"""What the UI shows of an ingestion run without linger (the default) is what happened,
and the downstream tables follow raw in it: every check is dated when it evaluated, after
the commit it judges.

Dagster dates a check that a run plans by the run's creation, so a plain run's checks
showed a time before its raw commit (10:58 beside 10:59, seen in the UI). One real run of
the ingestion job as the backlog sensor launches it (Spark, moto Kinesis, a real catalog
and a real Dagster instance).
"""

from __future__ import annotations

import math
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import pytest

from kinesis_lake.defs.build import build_definitions
from kinesis_lake.defs.streams import DEFAULT_STREAM
from kinesis_lake.events.declaration import AGGREGATE_TABLE, QUARANTINE_TABLE
from kinesis_lake.pipeline.ingest_query import prepare_raw_table
from kinesis_lake_tests.defs.helpers import make_lake
from kinesis_lake_tests.pipeline_helpers import produce

REPO_ROOT = Path(__file__).resolve().parents[2]
RAW = DEFAULT_STREAM.raw_asset
DOWNSTREAM = [dg.AssetKey("events"), dg.AssetKey(QUARANTINE_TABLE), dg.AssetKey(AGGREGATE_TABLE)]
RECORDS = 20


@dataclass
class Run:
    instance: dg.DagsterInstance
    defs: dg.Definitions
    result: dg.ExecuteInProcessResult


@pytest.fixture(scope="module")
def run(spark, moto_endpoint, tmp_path_factory) -> Iterator[Run]:
    with pytest.MonkeyPatch.context() as patch, dg.instance_for_test() as instance:
        lake = make_lake(patch, tmp_path_factory.mktemp("plain") / "data", moto_endpoint.url)
        produce(lake.settings, RECORDS, malformed_every=10, seed=43)
        prepare_raw_table(lake.settings)
        defs = build_definitions(lake.settings)
        job = defs.resolve_job_def(DEFAULT_STREAM.ingest_job_name)
        result = job.execute_in_process(instance=instance, raise_on_error=False)
        yield Run(instance, defs, result)


@pytest.fixture(scope="module")
def run_with_a_broken_declaration(spark, moto_endpoint, tmp_path_factory) -> Iterator[Run]:
    """The declaration broken after the code location loaded (an edit in progress): the
    run's follower cannot start, ingestion goes on."""
    with pytest.MonkeyPatch.context() as patch, dg.instance_for_test() as instance:
        data_dir = tmp_path_factory.mktemp("broken") / "data"
        lake = make_lake(patch, data_dir, moto_endpoint.url)
        declaration = data_dir / "events.yaml"
        shutil.copy(REPO_ROOT / "schemas" / "events.yaml", declaration)
        lake = lake.rebuild(patch, KINESIS_LAKE_EVENT_SCHEMA=str(declaration))
        produce(lake.settings, RECORDS, seed=44)
        prepare_raw_table(lake.settings)
        defs = build_definitions(lake.settings)
        declaration.write_text("tables: [oops\n")
        job = defs.resolve_job_def(DEFAULT_STREAM.ingest_job_name)
        result = job.execute_in_process(instance=instance, raise_on_error=False)
        yield Run(instance, defs, result)


def _latest(run: Run, key: dg.AssetKey) -> dg.EventLogRecord:
    records = run.instance.fetch_materializations(key, limit=1).records
    assert records, f"{key.to_user_string()} was not materialized"
    return records[0]


def test_raws_checks_are_dated_after_the_commit_they_judge(run):
    assert run.result.success
    (materialization,) = run.instance.fetch_materializations(RAW, limit=10).records
    _assert_dated_after(run, RAW, materialization, at_least=5)


def test_raws_commit_shows_the_tables_columns_and_files(run):
    """Each commit's materialization is what the UI shows of the table: its columns and
    its data files beside the rows (a run's single materialization carried them)."""
    metadata = _latest(run, RAW).asset_materialization.metadata
    assert metadata["dagster/column_schema"].value.columns
    assert metadata["data_files"].value >= 1
    assert metadata["dagster/row_count"].value == RECORDS


def test_raws_checks_run_even_when_the_downstream_tables_cannot_follow(
    run_with_a_broken_declaration,
):
    """Ingestion ran and committed, but with no follower nothing evaluated raw's checks:
    no verdict on duplicates, positions or data loss, and the derived tables held."""
    run = run_with_a_broken_declaration
    assert run.result.success
    (materialization,) = run.instance.fetch_materializations(RAW, limit=10).records
    _assert_dated_after(run, RAW, materialization, at_least=5)


def test_the_downstream_tables_follow_raw_in_the_same_run_and_are_checked_after(run):
    """A plain run ended with raw; the automation sensor's next tick launched a derive run
    (a launch and a process more, seconds to minutes later) whose checks Dagster dated at
    its creation, before the tables' commits."""
    for key in DOWNSTREAM:
        materialization = _latest(run, key)
        assert materialization.run_id == run.result.run_id, key
        _assert_dated_after(run, key, materialization, at_least=1)


def _assert_dated_after(
    run: Run, asset: dg.AssetKey, materialization: dg.EventLogRecord, *, at_least: int
) -> None:
    checks = [k for k in run.defs.resolve_asset_graph().asset_check_keys if k.asset_key == asset]
    assert len(checks) >= at_least, asset
    for key in checks:
        history = run.instance.event_log_storage.get_asset_check_execution_history(key, limit=5)
        assert len(history) == 1, key  # evaluated once, not once by the run and once by us
        (latest,) = history
        evaluation = latest.event.dagster_event.event_specific_data
        assert evaluation.passed, (key, evaluation.description)
        target = evaluation.target_materialization_data
        assert target is not None and target.storage_id == materialization.storage_id, key
        # The UI's time of an execution is its record's (whole seconds under SQLite).
        assert latest.create_timestamp >= math.floor(materialization.timestamp), key
