"""Upsert and SQL tables as Dagster assets: one run materializes them with the lake, their
generated checks pass, and a broken upsert table fails its checks. Real Dagster runs, Spark,
Kinesis (kinesalite) and Iceberg."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pytest

from kinesis_lake.defs.checks import all_checks
from kinesis_lake.defs.derived_assets import derived_tables_asset
from kinesis_lake.defs.maintenance import maintenance_job
from kinesis_lake.defs.raw_assets import raw_events
from kinesis_lake.defs.streams import DEFAULT_STREAM
from kinesis_lake.defs.table_checks import RECONCILIATION_CHECK
from kinesis_lake.defs.tables import EVENTS_QUARANTINE
from kinesis_lake.events.declaration_file import load_declaration
from kinesis_lake.iceberg.arrow_schema import table_arrow_schema
from kinesis_lake.pipeline.lake import open_lake
from kinesis_lake_tests.defs.helpers import Lake, evaluations, make_lake
from kinesis_lake_tests.pipeline.declared_lakes import (
    PROFILES_WITH_SQL_TABLES,
    REPLAY_AFTER,
    REPLAY_BEFORE,
    profile_at,
)
from kinesis_lake_tests.pipeline_helpers import put

DERIVED = ("user_profiles", "emails", "updates_per_hour", "profile_count")
CHECKS = {
    "user_profiles:one_row_per_key",
    "user_profiles:matches_recomputation",
    "emails:caught_up_with_inputs",
    "updates_per_hour:windows_match_input",
    "profile_count:caught_up_with_inputs",
}


@dataclass
class Deployment:
    lake: Lake
    defs: list
    instance: dg.DagsterInstance
    run: dg.ExecuteInProcessResult


@pytest.fixture(scope="module")
def deployment(spark, kinesalite_endpoint, tmp_path_factory) -> Iterator[Deployment]:
    folder: Path = tmp_path_factory.mktemp("derived-assets")
    (folder / "lake.yaml").write_text(PROFILES_WITH_SQL_TABLES)
    declaration = load_declaration(folder / "lake.yaml")
    defs = [
        raw_events,
        derived_tables_asset(declaration, "lake", [DEFAULT_STREAM]),
        *all_checks(declaration, [DEFAULT_STREAM]),
    ]
    with pytest.MonkeyPatch.context() as patch, dg.instance_for_test() as instance:
        patch.setenv("KINESIS_LAKE_EVENT_SCHEMA", str(folder / "lake.yaml"))
        lake = make_lake(patch, folder / "data", kinesalite_endpoint.url)
        put(
            lake.settings,
            profile_at("ann", 1, "2024-05-01T10:00:00Z"),
            profile_at("bob", 2, "2024-05-01T10:30:00Z"),
            profile_at("ann", 3, "2024-05-01T11:00:00Z"),
            profile_at("bob", 1, "2024-05-01T11:10:00Z"),  # older than bob's 2: loses
            profile_at("cid", 1, "2024-05-01T12:00:00Z", op="delete"),
        )
        run = dg.materialize(
            defs,
            selection=dg.AssetSelection.all(),
            resources=lake.resources,
            instance=instance,
            raise_on_error=False,
        )
        yield Deployment(lake, defs, instance, run)


def test_one_run_materializes_the_upsert_and_sql_tables_and_their_checks_pass(deployment):
    run = deployment.run
    assert run.success
    materialized = {e.asset_key.to_user_string() for e in run.get_asset_materialization_events()}
    assert set(DERIVED) <= materialized
    found = evaluations(run)
    assert set(found) >= CHECKS
    assert [name for name in CHECKS if not found[name].passed] == []

    rows = {
        e.asset_key.to_user_string(): e.materialization.metadata["dagster/row_count"].value
        for e in run.get_asset_materialization_events()
    }
    assert rows["user_profiles"] == 2 and rows["profile_count"] == 1
    assert rows["updates_per_hour"] == 3


def test_a_second_row_for_a_key_fails_both_upsert_checks(deployment):
    lake = deployment.lake
    table = open_lake(lake.settings).load_table(lake.settings.table_identifier("user_profiles"))
    copy = table.scan(row_filter="user_id = 'ann'").to_arrow()
    version = copy.schema.get_field_index("version")
    changed = copy.set_column(version, "version", pa.array([9], pa.int64()))
    table.append(changed.cast(table_arrow_schema(table.schema())))

    checks = [
        dg.AssetCheckKey(dg.AssetKey("user_profiles"), c)
        for c in ("one_row_per_key", "matches_recomputation")
    ]
    run = dg.materialize(
        deployment.defs,
        selection=dg.AssetSelection.checks(*checks),
        resources=lake.resources,
        instance=deployment.instance,
        raise_on_error=False,
    )

    found = evaluations(run)
    assert not found["user_profiles:one_row_per_key"].passed
    assert found["user_profiles:one_row_per_key"].metadata["distinct_keys"].value == 2
    recomputation = found["user_profiles:matches_recomputation"]
    assert not recomputation.passed
    assert "ann: table 9/" in (recomputation.description or "")


def test_the_upsert_tables_and_their_tombstones_are_maintained(
    deployment, kinesalite_endpoint, tmp_path, monkeypatch
):
    """Every table, tombstones included, gets an upkeep observation; before any refresh
    created a table, its upkeep finds nothing to do (the demo's first run once failed on
    the tombstones there)."""
    (tmp_path / "lake.yaml").write_text(PROFILES_WITH_SQL_TABLES)
    job = maintenance_job(load_declaration(tmp_path / "lake.yaml"))
    empty = make_lake(monkeypatch, tmp_path / "empty", kinesalite_endpoint.url)

    nothing_yet = job.execute_in_process(resources=empty.resources, raise_on_error=False)
    monkeypatch.undo()
    done = job.execute_in_process(resources=deployment.lake.resources, raise_on_error=False)

    assert nothing_yet.success and done.success
    assert nothing_yet.get_asset_observation_events() == []
    events = done.get_asset_observation_events()
    observed = {e.asset_key.to_user_string() for e in events}
    assert {"user_profiles", "emails", "raw_events"} <= observed
    # The tombstones table is no asset of its own: its upkeep is reported on the upsert
    # table's asset (an observation of an undefined key made a phantom asset in the UI).
    assert "user_profiles_tombstones" not in observed
    on_profiles = [
        e.event_specific_data.asset_observation
        for e in events
        if e.asset_key.to_user_string() == "user_profiles"
    ]
    assert any("tombstones_files_after" in o.metadata for o in on_profiles)


def test_a_table_added_while_records_flow_shows_each_of_its_commits_once(
    spark, kinesalite_endpoint, tmp_path
):
    """A table added to the declaration while raw moves on gets two commits in its first
    derive run: its backfill up to the quarantine's place, then the new records with the
    other tables. The step yielded a MaterializeResult for each and Dagster failed it
    ("returned an output ... multiple times"). And the sign-up quarantined before the table
    existed counted twice, in the table and unresolved in the quarantine, until a replay:
    the reconciliation check failed after a plain edit of the declaration."""
    declaration_file = tmp_path / "lake.yaml"
    declaration_file.write_text(REPLAY_BEFORE)
    with pytest.MonkeyPatch.context() as patch, dg.instance_for_test() as instance:
        patch.setenv("KINESIS_LAKE_EVENT_SCHEMA", str(declaration_file))
        lake = make_lake(patch, tmp_path / "data", kinesalite_endpoint.url)

        def materialize_all() -> dg.ExecuteInProcessResult:
            declaration = load_declaration(declaration_file)
            return dg.materialize(
                [
                    raw_events,
                    derived_tables_asset(declaration, "lake", [DEFAULT_STREAM]),
                    *all_checks(declaration, [DEFAULT_STREAM]),
                ],
                selection=dg.AssetSelection.all(),
                resources=lake.resources,
                instance=instance,
                raise_on_error=False,
            )

        put(lake.settings, {"id": "s1", "type": "signup"})  # no table takes it yet
        assert materialize_all().success
        declaration_file.write_text(REPLAY_AFTER)  # now one does
        put(lake.settings, {"id": "s2", "type": "signup"})
        run = materialize_all()

    assert run.success
    signups = [
        e.materialization.metadata["rows_added"].value
        for e in run.get_asset_materialization_events()
        if e.asset_key == dg.AssetKey("signups")
    ]
    assert signups == [1, 1], "the backfill's commit (s1), then the new record's (s2)"
    checks = evaluations(run)
    reconciliation = checks[f"{EVENTS_QUARANTINE.to_user_string()}:{RECONCILIATION_CHECK}"]
    assert reconciliation.passed, "s1 is in signups and no longer unresolved in quarantine"
    assert [name for name, e in checks.items() if not e.passed] == []
