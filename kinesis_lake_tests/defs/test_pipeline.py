"""End to end through Dagster: ingest, derive, check; break the data, see the checks fail;
recover; maintain. Real Spark (the session's shared one), real moto Kinesis, real catalog.

The module shares one ingested lake. Tests that break it roll the tables back to their
previous snapshots afterwards (``restored``); the last tests move it forward for good
(more records, a maintenance pass), so they come last.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pytest
import yaml
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus
from pyiceberg.catalog import Catalog
from pyiceberg.expressions import And, EqualTo

from kinesis_lake.defs.checks import all_checks
from kinesis_lake.defs.derived_assets import derived_tables_asset
from kinesis_lake.defs.maintenance import MaintenanceConfig, maintenance_job
from kinesis_lake.defs.raw_assets import RAW_EVENTS, raw_events
from kinesis_lake.defs.sensors import backlog_run_key, kinesis_backlog_sensor
from kinesis_lake.defs.streams import DEFAULT_STREAM, KINESIS_STREAM, kinesis_stream
from kinesis_lake.defs.tables import EVENT_COUNTS_PER_MINUTE, EVENTS_QUARANTINE
from kinesis_lake.events.declaration_file import load_declaration
from kinesis_lake.iceberg.incremental import caught_up_snapshot_id
from kinesis_lake.pipeline.lake import open_lake, raw_positions, table_stats
from kinesis_lake_tests.defs.helpers import DEMO_CHECKS, Lake, evaluations, make_lake
from kinesis_lake_tests.pipeline_helpers import produce

SENT = 200
MALFORMED_EVERY = 20
MALFORMED = SENT // MALFORMED_EVERY
REPO_ROOT = Path(__file__).resolve().parents[2]

DECLARATION = load_declaration(REPO_ROOT / "schemas" / "events.yaml")
EVENTS = dg.AssetKey("events")
MAINTENANCE = maintenance_job(DECLARATION)
ALL_DEFS = [
    kinesis_stream,
    raw_events,
    derived_tables_asset(DECLARATION, "kinesis_lake", [DEFAULT_STREAM]),
    *all_checks(DECLARATION, [DEFAULT_STREAM]),
]
PIPELINE = dg.AssetSelection.assets(RAW_EVENTS, EVENTS, EVENTS_QUARANTINE, EVENT_COUNTS_PER_MINUTE)
DERIVED = dg.AssetSelection.assets(EVENTS, EVENTS_QUARANTINE, EVENT_COUNTS_PER_MINUTE)


@dataclass
class Pipeline:
    lake: Lake
    instance: dg.DagsterInstance
    first_run: dg.ExecuteInProcessResult


def materialize(lake: Lake, instance, selection, **kwargs) -> dg.ExecuteInProcessResult:
    return dg.materialize(
        ALL_DEFS,
        selection=selection,
        resources=lake.resources,
        instance=instance,
        raise_on_error=False,
        **kwargs,
    )


def run_checks(lake: Lake, instance, *names: str) -> dict[str, dg.AssetCheckEvaluation]:
    keys = [dg.AssetCheckKey(dg.AssetKey(a), c) for a, c in (n.split(":") for n in names)]
    found = evaluations(materialize(lake, instance, dg.AssetSelection.checks(*keys)))
    assert set(found) == set(names)
    return found


def metadata(result: dg.ExecuteInProcessResult, key: dg.AssetKey) -> dict[str, object]:
    (event,) = [e for e in result.get_asset_materialization_events() if e.asset_key == key]
    return {k: v.value for k, v in event.materialization.metadata.items()}


def failed_checks(result: dg.ExecuteInProcessResult) -> list[str]:
    return [name for name, e in evaluations(result).items() if not e.passed]


@contextmanager
def restored(lake: Lake) -> Iterator[Catalog]:
    """Roll every table back to its current snapshot afterwards."""
    catalog = open_lake(lake.settings)
    names = [
        lake.settings.raw_table,
        lake.settings.table_identifier("events"),
        lake.settings.quarantine_table,
        lake.settings.aggregate_table,
    ]
    before = {name: catalog.load_table(name).current_snapshot().snapshot_id for name in names}
    try:
        yield catalog
    finally:
        for name, snapshot_id in before.items():
            table = catalog.load_table(name)
            if table.current_snapshot().snapshot_id != snapshot_id:
                table.manage_snapshots().set_current_snapshot(snapshot_id).commit()


@pytest.fixture(scope="module")
def pipeline(spark, moto_endpoint, tmp_path_factory) -> Iterator[Pipeline]:
    with pytest.MonkeyPatch.context() as patch, dg.instance_for_test() as instance:
        lake = make_lake(patch, tmp_path_factory.mktemp("pipeline") / "data", moto_endpoint.url)
        produce(lake.settings, SENT, malformed_every=MALFORMED_EVERY, seed=11)
        yield Pipeline(lake, instance, materialize(lake, instance, PIPELINE))


# ---- the good path -------------------------------------------------------------------------


def test_first_run_materializes_everything_and_every_check_passes(pipeline):
    result = pipeline.first_run
    assert result.success
    found = evaluations(result)
    assert set(found) == DEMO_CHECKS
    assert failed_checks(result) == []


def test_raw_events_reports_stable_numeric_metadata(pipeline):
    raw = metadata(pipeline.first_run, RAW_EVENTS)
    lags = {k for k in raw if k.startswith("millis_behind_latest/")}
    assert set(raw) - lags == {
        "dagster/row_count",
        "dagster/table_name",
        "dagster/column_schema",
        "rows_added",
        "batches",
        "seconds",
        "rows_per_second",
        "shards_read",
        "max_millis_behind_latest",
        "data_files",
        "snapshot_id",
        "skipped_ranges",
    }
    assert raw["rows_added"] == raw["dagster/row_count"] == SENT
    assert raw["batches"] >= 1 and raw["data_files"] >= 1
    assert raw["skipped_ranges"] == 0
    assert raw["dagster/table_name"] == "lake.raw_events"
    table = open_lake(pipeline.lake.settings).load_table("lake.raw_events")
    assert raw["snapshot_id"] == table.current_snapshot().snapshot_id
    columns = [c.name for c in raw["dagster/column_schema"].columns]
    assert columns == [f.name for f in table.schema().fields]


def test_raw_events_reports_the_lag_of_every_shard_it_read(pipeline):
    raw = metadata(pipeline.first_run, RAW_EVENTS)
    lags = {k.removeprefix("millis_behind_latest/") for k in raw if "millis_behind_latest/" in k}
    shards = {
        r["ShardId"]
        for r in pipeline.lake.client.list_shards(StreamName=pipeline.lake.settings.stream_name)[
            "Shards"
        ]
    }
    assert lags == shards
    assert raw["shards_read"] == len(shards)
    assert raw["max_millis_behind_latest"] == max(raw[f"millis_behind_latest/{s}"] for s in lags)


def test_derived_tables_report_rows_and_sources(pipeline):
    events = metadata(pipeline.first_run, EVENTS)
    quarantine = metadata(pipeline.first_run, EVENTS_QUARANTINE)
    counts = metadata(pipeline.first_run, EVENT_COUNTS_PER_MINUTE)
    assert events["rows_added"] == events["dagster/row_count"] == SENT - MALFORMED
    assert quarantine["rows_added"] == quarantine["dagster/row_count"] == MALFORMED
    assert counts["windows_recomputed"] >= 1 and counts["dagster/row_count"] >= 1
    for table in (events, quarantine, counts):
        assert table["source_files_read"] >= 1
        assert isinstance(table["source_snapshot_id"], int)
        assert table["committed"] is True
        assert {"dagster/table_name", "dagster/column_schema", "data_files"} <= set(table)


def test_each_derived_table_is_materialized_when_its_own_commit_lands(pipeline):
    """The derive step reported every table when all were done: the first table's
    materialization came after the last table's commit, and each table carried the whole
    step's seconds, so its rows_per_second was not its own."""
    run_id = pipeline.first_run.run_id
    catalog = open_lake(pipeline.lake.settings)
    (step,) = [
        s for s in pipeline.instance.get_run_step_stats(run_id) if s.step_key == "derived_tables"
    ]
    landed, reported, seconds = [], [], {}
    for key in (EVENTS, EVENTS_QUARANTINE, EVENT_COUNTS_PER_MINUTE):
        records = pipeline.instance.fetch_materializations(key, limit=100).records
        (record,) = [r for r in records if r.run_id == run_id]
        metadata = record.asset_materialization.metadata
        identifier = pipeline.lake.settings.table_identifier(key.path[-1])
        snapshot = catalog.load_table(identifier).snapshot_by_id(metadata["snapshot_id"].value)
        landed.append(snapshot.timestamp_ms / 1000)
        reported.append(record.timestamp)
        assert reported[-1] >= landed[-1]
        seconds[key] = metadata["seconds"].value
        assert 0 < seconds[key] <= step.end_time - step.start_time
        rows = metadata["rows_added"].value
        assert metadata["rows_per_second"].value == round(rows / seconds[key], 1)
    assert min(reported) < max(landed)
    # events and the quarantine come from one routing pass, side by side: each table's
    # seconds is its own work, the pass included, so the one landing later took longer.
    # (Timed from the commit before, the later one's seconds was only the gap between.)
    events_first = landed[0] <= landed[1]  # events', then the quarantine's, commit
    earlier, later = (EVENTS, EVENTS_QUARANTINE) if events_first else (EVENTS_QUARANTINE, EVENTS)
    assert seconds[later] >= seconds[earlier]


def test_check_metadata_is_numeric(pipeline):
    found = evaluations(pipeline.first_run)
    reconciliation = found["events_quarantine:reconciles_with_raw"].metadata
    assert reconciliation["raw_processed"].value == SENT
    assert reconciliation["routed/events"].value == SENT - MALFORMED
    assert reconciliation["quarantined"].value == MALFORMED
    assert found["raw_events:no_duplicate_records"].metadata["rows"].value == SENT
    assert found["events_quarantine:quarantine_ratio"].metadata["ratio"].value == pytest.approx(
        MALFORMED / SENT
    )
    sums = found["event_counts_per_minute:sums_match_events"].metadata
    assert sums["aggregate_sum"].value == sums["parsed_rows"].value == SENT - MALFORMED


def test_a_derive_run_with_nothing_new_materializes_nothing(pipeline):
    """One materialization per commit: a derive run that found nothing new reported every
    table again (committed: False), commits that never happened. Its checks are skipped
    with their tables, so each verdict on a table's last commit stays the latest completed
    one (what Dagster's asset health reads), neither repeated nor lost."""
    derived = materialize(pipeline.lake, pipeline.instance, DERIVED)

    assert derived.success
    assert derived.get_asset_materialization_events() == []
    assert evaluations(derived) == {}
    first_run = pipeline.first_run.run_id
    derived_checks = [
        dg.AssetCheckKey(dg.AssetKey(asset), check)
        for asset, check in (name.split(":") for name in DEMO_CHECKS)
        if dg.AssetKey(asset) != RAW_EVENTS
    ]
    summaries = pipeline.instance.event_log_storage.get_asset_check_summary_records(derived_checks)
    for key in derived_checks:
        latest, completed = (
            summaries[key].last_check_execution_record,
            summaries[key].last_completed_check_execution_record,
        )
        assert latest.run_id == derived.run_id  # planned, then skipped
        assert completed.run_id == first_run
        assert completed.status == AssetCheckExecutionRecordStatus.SUCCEEDED


# ---- broken data, one breakage per test ----------------------------------------------------


def test_a_duplicated_raw_row_fails_the_blocking_check_and_holds_derived(pipeline):
    lake, instance = pipeline.lake, pipeline.instance
    with restored(lake) as catalog:
        raw = catalog.load_table(lake.settings.raw_table)
        raw.append(raw.scan(limit=1).to_arrow())

        result = materialize(lake, instance, PIPELINE)

        found = evaluations(result)
        duplicates = found["raw_events:no_duplicate_records"]
        assert not duplicates.passed
        assert duplicates.metadata["duplicate_keys"].value == 1
        assert duplicates.metadata["extra_rows"].value == 1
        # Blocking: the derived tables were not refreshed over the bad raw data.
        assert not [
            e for e in result.get_asset_materialization_events() if e.asset_key != RAW_EVENTS
        ]


def test_a_deleted_parsed_row_fails_reconciliation(pipeline):
    lake, instance = pipeline.lake, pipeline.instance
    with restored(lake) as catalog:
        parsed = catalog.load_table(lake.settings.table_identifier("events"))
        victim = parsed.scan(limit=1, selected_fields=("shard_id", "sequence_number")).to_arrow()
        shard, sequence = victim["shard_id"][0].as_py(), victim["sequence_number"][0].as_py()
        parsed.delete(And(EqualTo("shard_id", shard), EqualTo("sequence_number", sequence)))

        found = run_checks(lake, instance, "events_quarantine:reconciles_with_raw")[
            "events_quarantine:reconciles_with_raw"
        ]

        assert not found.passed
        assert found.metadata["missing"].value == 1
        assert found.metadata["unexpected"].value == 0
        assert f"{shard}/{sequence}" in found.description
    assert run_checks(lake, instance, "events_quarantine:reconciles_with_raw")[
        "events_quarantine:reconciles_with_raw"
    ].passed


def test_a_wrong_aggregate_count_fails_the_window_check(pipeline):
    lake, instance = pipeline.lake, pipeline.instance
    with restored(lake) as catalog:
        aggregate = catalog.load_table(lake.settings.aggregate_table)
        row = aggregate.scan(limit=1).to_arrow()
        bogus = row.set_column(
            row.schema.get_field_index("event_type"),
            row.schema.field("event_type"),
            pa.array(["bogus"]),
        )
        aggregate.append(bogus)

        name = "event_counts_per_minute:sums_match_events"
        found = run_checks(lake, instance, name)[name]

        assert not found.passed
        assert found.metadata["mismatched_windows"].value == 1


def test_a_raw_row_beyond_the_committed_positions_fails_the_positions_check(pipeline):
    lake, instance = pipeline.lake, pipeline.instance
    with restored(lake) as catalog:
        raw = catalog.load_table(lake.settings.raw_table)
        row = raw.scan(limit=1).to_arrow()
        beyond = str(int(row["sequence_number"][0].as_py()) + 10**6)
        raw.append(
            row.set_column(
                row.schema.get_field_index("sequence_number"),
                row.schema.field("sequence_number"),
                pa.array([beyond]),
            )
        )

        found = run_checks(
            lake,
            instance,
            "raw_events:matches_committed_positions",
            "raw_events:no_duplicate_records",
        )

        positions = found["raw_events:matches_committed_positions"]
        assert not positions.passed
        assert positions.metadata["mismatched_shards"].value == 1
        assert beyond in positions.description
        assert found["raw_events:no_duplicate_records"].passed


def test_a_high_quarantine_ratio_warns(pipeline, monkeypatch):
    strict = pipeline.lake.rebuild(monkeypatch, KINESIS_LAKE_QUARANTINE_WARN_RATIO="0.01")
    name = "events_quarantine:quarantine_ratio"
    found = run_checks(strict, pipeline.instance, name)[name]
    assert not found.passed
    assert found.severity == dg.AssetCheckSeverity.WARN
    assert found.metadata["warn_ratio"].value == 0.01


def _schema_variant(tmp_path: Path, edit) -> str:
    declared = yaml.safe_load((REPO_ROOT / "schemas" / "events.yaml").read_text())
    edit(declared["fields"])
    path = tmp_path / "events.yaml"
    path.write_text(yaml.safe_dump(declared))
    return str(path)


def test_schema_drift_fails_the_schema_check(pipeline, monkeypatch, tmp_path):
    def drift(fields):
        next(f for f in fields if f["name"] == "amount")["type"] = "string"
        fields.append({"name": "country", "type": "string"})

    drifted = pipeline.lake.rebuild(
        monkeypatch, KINESIS_LAKE_EVENT_SCHEMA=_schema_variant(tmp_path, drift)
    )
    name = "events:schema_matches_declared"
    found = run_checks(drifted, pipeline.instance, name)[name]
    assert not found.passed
    assert found.severity == dg.AssetCheckSeverity.ERROR
    assert found.metadata["missing_columns"].value == 1
    assert found.metadata["mismatched_columns"].value == 1
    assert "amount" in found.description and "country" in found.description


def test_a_column_no_longer_declared_only_warns(pipeline, monkeypatch, tmp_path):
    def drop(fields):
        fields[:] = [f for f in fields if f["name"] != "key3"]

    narrowed = pipeline.lake.rebuild(
        monkeypatch, KINESIS_LAKE_EVENT_SCHEMA=_schema_variant(tmp_path, drop)
    )
    name = "events:schema_matches_declared"
    found = run_checks(narrowed, pipeline.instance, name)[name]
    assert not found.passed
    assert found.severity == dg.AssetCheckSeverity.WARN
    assert found.metadata["extra_columns"].value == 1


def test_data_loss_reported_by_the_source_fails_its_check(pipeline):
    with dg.instance_for_test() as instance:
        instance.report_runless_asset_event(
            dg.AssetMaterialization(RAW_EVENTS, metadata={"skipped_ranges": 2})
        )
        name = "raw_events:no_data_loss"
        found = run_checks(pipeline.lake, instance, name)[name]
    assert not found.passed
    assert found.metadata["skipped_ranges"].value == 2
    assert evaluations(pipeline.first_run)[name].passed


# ---- moving forward: sensor, automation, staleness, maintenance ----------------------------


def _tick(lake: Lake, instance, cursor=None):
    with dg.build_sensor_context(
        instance=instance, cursor=cursor, resources=lake.resources
    ) as context:
        return kinesis_backlog_sensor(context)


def test_sensor_ingestion_and_automation_close_the_loop(pipeline):
    from kinesis_lake.definitions import defs

    lake, instance = pipeline.lake, pipeline.instance
    idle = _tick(lake, instance)
    assert idle.run_requests == [] and "No backlog" in idle.skip_reason.skip_message
    automation = dg.evaluate_automation_conditions(defs=defs, instance=instance)

    produce(lake.settings, 40, seed=12)
    busy = _tick(lake, instance, cursor=idle.cursor)
    (request,) = busy.run_requests
    positions = raw_positions(lake.settings).positions
    assert request.tags["kinesis_lake/backlog_shards"]
    assert request.run_key == backlog_run_key(lake.settings.stream_name, positions)

    # What the daemon launches for the request: the ingest job (an observation of the
    # stream, then raw_events, which checks each commit and brings the downstream along).
    ingested = materialize(
        lake,
        instance,
        dg.AssetSelection.assets(KINESIS_STREAM, RAW_EVENTS).without_checks(),
        tags=dict(request.tags),
    )
    assert ingested.success
    assert _rows_added(ingested, RAW_EVENTS) == 40
    (observed,) = ingested.get_asset_observation_events()
    assert observed.asset_key == KINESIS_STREAM
    stream_state = observed.event_specific_data.asset_observation.metadata
    assert stream_state["shards_with_backlog"].value >= 1  # observed before it drained
    assert _rows_added(ingested, EVENTS) == 40
    checks = [c for c in ALL_DEFS if isinstance(c, dg.AssetChecksDefinition)]
    for key in (key for check in checks for key in check.check_keys):
        if key.asset_key in (RAW_EVENTS, EVENTS, EVENTS_QUARANTINE, EVENT_COUNTS_PER_MINUTE):
            (latest,) = instance.event_log_storage.get_asset_check_execution_history(key, limit=1)
            verdict = latest.event.dagster_event.event_specific_data
            assert verdict.passed, (key, verdict.description)

    drained = _tick(lake, instance, cursor=busy.cursor)
    assert drained.run_requests == [] and "No backlog" in drained.skip_reason.skip_message
    assert raw_positions(lake.settings).positions != positions

    # The run followed raw downstream itself: no derive run is asked for after it (one
    # would start a process, and in the default mode a JVM, to find nothing new).
    automation = dg.evaluate_automation_conditions(
        defs=defs, instance=instance, cursor=automation.cursor
    )
    requested = {k for k in (EVENTS, EVENTS_QUARANTINE, EVENT_COUNTS_PER_MINUTE, RAW_EVENTS)}
    assert {k for k in requested if automation.get_num_requested(k)} == set()


def _rows_added(result: dg.ExecuteInProcessResult, key: dg.AssetKey) -> int:
    """Rows a run added to a table over its commits (one materialization each)."""
    events = [e for e in result.get_asset_materialization_events() if e.asset_key == key]
    return sum(int(e.materialization.metadata["rows_added"].value) for e in events)


def test_unconsumed_old_records_make_raw_stale_until_ingested(pipeline, monkeypatch):
    produce(pipeline.lake.settings, 10, seed=13)
    time.sleep(1.1)
    strict = pipeline.lake.rebuild(monkeypatch, KINESIS_LAKE_FRESHNESS_MINUTES="0")
    name = "raw_events:fresh_relative_to_stream"

    stale = run_checks(strict, pipeline.instance, name)[name]
    assert not stale.passed
    assert stale.metadata["shards_with_backlog"].value >= 1
    assert stale.metadata["oldest_unconsumed_age_seconds"].value > 0

    caught_up = materialize(strict, pipeline.instance, PIPELINE)
    assert caught_up.success
    assert failed_checks(caught_up) == []


def test_maintenance_compacts_expires_and_every_check_stays_green(pipeline):
    lake, instance = pipeline.lake, pipeline.instance
    # Another ingest + derive: more small raw files, and the derived tables caught up to the
    # newest raw snapshot, so older snapshots are fair game for expiry.
    produce(lake.settings, 20, seed=14)
    assert materialize(lake, instance, PIPELINE).success
    catalog = open_lake(lake.settings)
    tables = [
        lake.settings.raw_table,
        lake.settings.table_identifier("events"),
        lake.settings.quarantine_table,
        lake.settings.aggregate_table,
    ]
    rows_before = {t: table_stats(catalog.load_table(t)).rows for t in tables}
    raw_table = catalog.load_table(lake.settings.raw_table)
    consumer_snapshot = caught_up_snapshot_id(
        raw_table, catalog.load_table(lake.settings.table_identifier("events"))
    )
    stray = Path(raw_table.location().removeprefix("file://")) / "data" / "stray-orphan.parquet"
    stray.write_bytes(b"left behind by a crashed task")

    aggressive = MaintenanceConfig(
        snapshot_max_age_hours=0, retain_last_snapshots=1, orphan_min_age_hours=0
    )
    result = MAINTENANCE.execute_in_process(
        run_config=dg.RunConfig(ops={node.name: aggressive for node in MAINTENANCE.nodes}),
        resources=lake.resources,
        instance=instance,
        raise_on_error=False,
    )
    assert result.success

    observed = {e.asset_key: e for e in result.get_asset_observation_events()}
    assert set(observed) == {dg.AssetKey(t.split(".")[-1]) for t in tables}
    raw = {
        k: v.value
        for k, v in observed[RAW_EVENTS].event_specific_data.asset_observation.metadata.items()
    }
    assert set(raw) == {
        "table",
        "files_before",
        "files_after",
        "bytes_before",
        "bytes_after",
        "files_rewritten",
        "files_written",
        "partitions_compacted",
        "snapshots_before",
        "snapshots_after",
        "snapshots_expired",
        "orphans_removed",
        "orphan_bytes_removed",
        "commit_attempts",
        "maintenance_seconds",
    }
    assert raw["files_after"] < raw["files_before"]
    assert raw["partitions_compacted"] >= 1
    assert raw["snapshots_expired"] >= 1
    assert raw["orphans_removed"] >= 1 and not stray.exists()
    catalog = open_lake(lake.settings)
    assert {t: table_stats(catalog.load_table(t)).rows for t in tables} == rows_before
    # Expiry kept the raw snapshot the derived tables last read.
    assert catalog.load_table(lake.settings.raw_table).snapshot_by_id(consumer_snapshot)

    # The derived tables' own commit history was expired too (retain 1): the checks find
    # what they processed through the commit watermark instead, and still reconcile.
    after_maintenance = run_checks(lake, instance, *sorted(DEMO_CHECKS))
    assert [n for n, e in after_maintenance.items() if not e.passed] == []
    reconciled = after_maintenance["events_quarantine:reconciles_with_raw"].metadata
    assert reconciled["raw_processed"].value == rows_before[lake.settings.raw_table]

    # Refreshes stay incremental across compaction and expiry; every number reconciles.
    produce(lake.settings, 20, seed=15)
    after = materialize(lake, instance, PIPELINE)
    assert after.success and failed_checks(after) == []
    assert metadata(after, EVENTS)["rows_added"] == 20
    assert set(evaluations(after)) == DEMO_CHECKS


def test_stream_observation_freshness_window_is_three_intervals():
    (spec,) = kinesis_stream.specs
    assert spec.freshness_policy.fail_window.to_timedelta() == timedelta(minutes=15)
