"""What the UI shows of a lingering ingestion run (make dev's runs) is what happened: one
materialization per commit of each table, the downstream tables following raw while the
run goes on, per-commit rates, and checks dated after the commits they judge.

One real run of the ingestion job as the backlog sensor launches it (the definitions
built from the env, Spark, moto Kinesis, a real catalog and a real Dagster instance).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import pytest

from kinesis_lake.defs.build import build_definitions
from kinesis_lake.defs.streams import DEFAULT_STREAM
from kinesis_lake.events.declaration import AGGREGATE_TABLE, QUARANTINE_TABLE
from kinesis_lake.pipeline.ingest_query import prepare_raw_table
from kinesis_lake.pipeline.lake import open_lake
from kinesis_lake_tests.defs.helpers import Lake, make_lake
from kinesis_lake_tests.pipeline_helpers import produce, raw_rows

REPO_ROOT = Path(__file__).resolve().parents[2]
LINGER_S = 5
FIRST, SECOND = 30, 25
RAW = DEFAULT_STREAM.raw_asset
EVENTS = dg.AssetKey("events")
DOWNSTREAM = [EVENTS, dg.AssetKey(QUARANTINE_TABLE), dg.AssetKey(AGGREGATE_TABLE)]


@dataclass
class Run:
    lake: Lake
    instance: dg.DagsterInstance
    defs: dg.Definitions
    result: dg.ExecuteInProcessResult
    seconds: float

    def materializations(self, key: dg.AssetKey) -> list[dg.EventLogRecord]:
        records = self.instance.fetch_materializations(key, limit=1000).records
        return sorted(records, key=lambda r: r.storage_id)


@pytest.fixture(scope="module")
def run(spark, moto_endpoint, tmp_path_factory) -> Iterator[Run]:
    """A first wave; once the instance shows the downstream table materialized (the run
    still lingering), a second wave: the downstream tables must follow it in the run."""
    with pytest.MonkeyPatch.context() as patch, dg.instance_for_test() as instance:
        lake = make_lake(patch, tmp_path_factory.mktemp("lingering") / "data", moto_endpoint.url)
        lake = lake.rebuild(
            patch,
            KINESIS_LAKE_RUN_LINGER_SECONDS=str(LINGER_S),
            KINESIS_LAKE_EVENT_SCHEMA=str(REPO_ROOT / "schemas" / "events.yaml"),
        )
        produce(lake.settings, FIRST, malformed_every=10, seed=41)
        prepare_raw_table(lake.settings)

        run_over = threading.Event()

        def second_wave_once_derived() -> None:
            while not run_over.wait(0.3):
                if instance.fetch_materializations(EVENTS, limit=1).records:
                    produce(lake.settings, SECOND, seed=42)
                    return

        producer = threading.Thread(target=second_wave_once_derived, daemon=True)
        producer.start()
        defs = build_definitions(lake.settings)
        started = time.monotonic()
        result = defs.resolve_job_def(DEFAULT_STREAM.ingest_job_name).execute_in_process(
            instance=instance, raise_on_error=False
        )
        seconds = time.monotonic() - started
        run_over.set()
        producer.join(5)
        yield Run(lake, instance, defs, result, seconds)


def _snapshots(lake: Lake, table: str) -> list:
    identifier = lake.settings.table_identifier(table)
    return list(open_lake(lake.settings).load_table(identifier).snapshots())


def test_each_raw_commit_is_one_materialization(run):
    """A commit was a micro-batch materialization plus, at the run's end, a second one
    repeating its rows: four materializations for two commits read as twice the rows."""
    assert run.result.success
    raw = run.materializations(RAW)
    commits = open_lake(run.lake.settings).load_table(run.lake.settings.raw_table).snapshots()
    added = [s for s in commits if int(s.summary.get("added-records", 0)) > 0]
    assert len(raw) == len(added) >= 2
    assert (
        sum(e.asset_materialization.metadata["rows_added"].value for e in raw)
        == raw_rows(run.lake.settings)
        == FIRST + SECOND
    )


def test_the_downstream_tables_follow_raw_during_the_run(run):
    """Each downstream table is materialized when its own commit lands, while the run is
    still ingesting: the second wave's raw commit came after the first events
    materialization, and events then holds both waves' valid records, once each."""
    events = run.materializations(EVENTS)
    raw = run.materializations(RAW)
    assert events and events[0].timestamp < raw[-1].timestamp
    valid = FIRST - FIRST // 10 + SECOND
    assert events[-1].asset_materialization.metadata["dagster/row_count"].value == valid
    assert all(e.run_id == run.result.run_id for e in events)
    # One materialization per commit of the (append-only) events table.
    assert len(events) == len(_snapshots(run.lake, "events"))
    for key in DOWNSTREAM:
        for entry in run.materializations(key):
            metadata = entry.asset_materialization.metadata
            identifier = run.lake.settings.table_identifier(key.path[-1])
            table = open_lake(run.lake.settings).load_table(identifier)
            committed = table.snapshot_by_id(metadata["snapshot_id"].value)
            assert committed is not None and committed.timestamp_ms / 1000 <= entry.timestamp


def test_rates_measure_each_commit_not_the_lingering(run):
    """rows_per_second was a run's rows over its whole life, the linger included; each
    downstream table carried the whole step's seconds."""
    working_s = run.seconds - LINGER_S  # the run lingered that long after its last commit
    for entry in run.materializations(RAW):
        metadata = entry.asset_materialization.metadata
        seconds, rows = metadata["seconds"].value, metadata["rows_added"].value
        assert 0 < seconds <= working_s
        assert metadata["rows_per_second"].value == round(rows / seconds, 1)
    # Tables refresh side by side, so each one's own work overlaps the others': each is
    # within the run's working time (their sum need not be).
    for key in DOWNSTREAM:
        for entry in run.materializations(key):
            assert 0 < entry.asset_materialization.metadata["seconds"].value <= working_s


def test_every_check_is_dated_after_the_materialization_it_judges_and_passes(run):
    """Checks planned when a lingering run started were dated then: before the commits
    they judged, minutes later."""
    checks = [key for key in run.defs.resolve_asset_graph().asset_check_keys]
    judged = [c for c in checks if c.asset_key in (RAW, *DOWNSTREAM)]
    assert len(judged) >= 5 + 3
    for key in judged:
        (latest,) = run.instance.event_log_storage.get_asset_check_execution_history(key, limit=1)
        evaluation = latest.event.dagster_event.event_specific_data
        assert evaluation.passed, (key, evaluation.description)
        target = evaluation.target_materialization_data
        newest = run.materializations(key.asset_key)[-1]
        assert target is not None and target.storage_id == newest.storage_id, key
        assert latest.event.timestamp >= newest.timestamp, key
        # The execution record's own date has whole seconds (SQLite's CURRENT_TIMESTAMP):
        # a check evaluated in its materialization's second shows that second.
        assert latest.create_timestamp >= math.floor(newest.timestamp), key


def test_raws_blocking_check_is_dated_when_it_was_evaluated(run):
    """A check's time is when it evaluated: raw's blocking check runs right after each raw
    commit, before the downstream tables follow it, but was recorded only once they had
    (30-46 s late in make dev, seen in its UI)."""
    history = run.instance.event_log_storage.get_asset_check_execution_history(
        dg.AssetCheckKey(RAW, "no_duplicate_records"), limit=100
    )
    judged = {
        entry.event.dagster_event.event_specific_data.target_materialization_data.storage_id: (
            entry.event.timestamp
        )
        for entry in history
    }
    followed = 0
    for commit in run.materializations(RAW):
        after = [e for e in run.materializations(EVENTS) if e.storage_id > commit.storage_id]
        if commit.storage_id in judged and after:
            assert judged[commit.storage_id] <= after[0].timestamp, "recorded after the refresh"
            followed += 1
    assert followed >= 1
