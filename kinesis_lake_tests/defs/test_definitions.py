"""The Definitions load, name what the CLI and README promise, and read the same env."""

from __future__ import annotations

import importlib
import itertools
import os
import random
import subprocess
import sys
import warnings
from pathlib import Path

import dagster as dg
import pytest
import yaml

from kinesis_lake.config import ENV_VARIABLES, Settings, SettingsError
from kinesis_lake.defs.resources import (
    KinesisResource,
    PipelineSettingsResource,
    SparkResource,
)
from kinesis_lake.defs.sensors import daemon_tick_gap
from kinesis_lake_tests.defs.helpers import DEMO_CHECKS

REPO_ROOT = Path(__file__).resolve().parents[2]

ASSETS = {
    "kinesis_stream",
    "raw_events",
    "events",
    "events_quarantine",
    "event_counts_per_minute",
}
"""No maintenance: "Materialize all" takes every asset, and upkeep is not data."""


def _defs() -> dg.Definitions:
    import kinesis_lake.definitions

    return importlib.reload(kinesis_lake.definitions).defs


@pytest.fixture
def reloaded_afterwards(monkeypatch):
    """Load ``kinesis_lake.definitions`` again after the test, with the environment
    restored: later tests import its ``defs`` and must not see this test's lake."""
    yield
    monkeypatch.undo()
    _defs()


def test_definitions_are_loadable_without_deprecation_warnings():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        defs = _defs()
        dg.Definitions.validate_loadable(defs)
    dagster_warnings = [
        str(w.message)
        for w in caught
        if issubclass(w.category, (DeprecationWarning, FutureWarning))
        or "dagster" in type(w.message).__module__
    ]
    assert dagster_warnings == []


def test_names_the_cli_and_readme_refer_to():
    defs = _defs()
    graph = defs.resolve_asset_graph()
    assert {k.to_user_string() for k in graph.get_all_asset_keys()} == ASSETS
    assert {k.to_user_string() for k in graph.asset_check_keys} == DEMO_CHECKS
    assert {j.name for j in defs.resolve_all_job_defs()} >= {
        "ingest_raw_events",
        "kinesis_lake_full",
        "iceberg_maintenance",
    }
    sensors = {s.name: s for s in defs.sensors}
    assert set(sensors) == {"kinesis_backlog_sensor", "kinesis_lake_automation"}
    assert all(s.default_status == dg.DefaultSensorStatus.RUNNING for s in sensors.values())
    assert _daemon_tick_gaps(sensors["kinesis_backlog_sensor"].minimum_interval_seconds) == {30.0}
    schedules = {s.name for s in defs.schedules}
    assert schedules == {"iceberg_maintenance_schedule"}
    upkeep = defs.resolve_job_def("iceberg_maintenance")
    assert sorted(node.name for node in upkeep.nodes) == [
        "maintain_event_counts_per_minute",
        "maintain_events",
        "maintain_events_quarantine",
        "maintain_raw_events",
    ]
    assert upkeep.asset_layer.executable_asset_keys == set()


def test_assets_carry_pools_kinds_groups_and_automation():
    defs = _defs()
    graph = defs.resolve_asset_graph()
    raw = defs.resolve_assets_def("raw_events")
    assert raw.op.pool == "kinesis_lake_ingestion"
    node = graph.get(dg.AssetKey("raw_events"))
    assert node.kinds == {"spark", "iceberg"}
    assert node.group_name == "ingestion"
    assert node.automation_condition is None  # launched by the backlog sensor only
    assert graph.get(dg.AssetKey("kinesis_stream")).kinds == {"kinesis"}
    assert not graph.get(dg.AssetKey("kinesis_stream")).is_materializable
    for name in ("events", "events_quarantine", "event_counts_per_minute"):
        derived = graph.get(dg.AssetKey(name))
        assert derived.automation_condition is not None
        assert derived.group_name == "derived"
    blocking = {
        spec.key.to_user_string()
        for check in defs.asset_checks or []
        for spec in check.check_specs
        if spec.blocking
    }
    assert blocking == {"raw_events:no_duplicate_records"}


def test_jobs_select_what_their_names_say():
    defs = _defs()
    ingest = defs.resolve_job_def("ingest_raw_events")
    assert {k.to_user_string() for k in ingest.asset_layer.selected_asset_keys} == {
        "kinesis_stream",  # observed as the run starts
        "raw_events",
    }
    full = defs.resolve_job_def("kinesis_lake_full")
    assert {k.to_user_string() for k in full.asset_layer.selected_asset_keys} == ASSETS - {
        "kinesis_stream"
    }


def test_every_run_executes_its_steps_in_one_process():
    """A run's steps share one process and so one Spark driver: with Dagster's default
    (a process per step) "Materialize all" started a Python process and a JVM for the raw
    step, the derive step and each check, minutes on 2 cores before a burst reached the
    derived tables (issue 36). Pools still hold across runs (the in-process executor
    claims them too)."""
    defs = _defs()
    for name in ("ingest_raw_events", "kinesis_lake_full", "__ASSET_JOB"):
        assert defs.resolve_job_def(name).executor_def is dg.in_process_executor, name


def test_settings_resource_reads_the_same_variables_as_settings(monkeypatch, tmp_path):
    schema = tmp_path / "events.yaml"
    schema.write_text((REPO_ROOT / "schemas" / "events.yaml").read_text())
    env = {
        "KINESIS_STREAM_NAME": "orders",
        "KINESIS_ENDPOINT_URL": "http://127.0.0.1:4567",
        "AWS_REGION": "eu-west-1",
        "KINESIS_SHARD_COUNT": "7",
        "KINESIS_STARTING_POSITION": "latest",
        "KINESIS_MAX_RECORDS_PER_SHARD": "1234",
        "KINESIS_LAKE_ENDPOINT_KIND": "moto",
        "KINESIS_LAKE_DATA_DIR": str(tmp_path / "data"),
        "KINESIS_LAKE_CHECKPOINT_DIR": str(tmp_path / "checkpoints"),
        "KINESIS_LAKE_CATALOG": "other_catalog",
        "KINESIS_LAKE_NAMESPACE": "ns",
        "KINESIS_LAKE_EVENT_SCHEMA": str(schema),
        "SPARK_MASTER": "local[1]",
        "KINESIS_LAKE_FRESHNESS_MINUTES": "3",
        "KINESIS_LAKE_QUARANTINE_WARN_RATIO": "0.25",
        "KINESIS_LAKE_FAIL_ON_DATA_LOSS": "false",
        "KINESIS_LAKE_MAX_WRITE_TASKS": "8",
    }
    # Every variable Settings documents is one the resource maps, and vice versa.
    assert {variable for variable, _, _ in Settings().describe()} == {v for v, _ in ENV_VARIABLES}
    for key, value in env.items():
        monkeypatch.setenv(key, value)

    resolved = _resolve(PipelineSettingsResource.from_env()).settings()

    assert resolved == Settings.from_env(env)
    assert resolved.fail_on_data_loss is False
    assert resolved.max_write_tasks == 8


def test_unset_variables_fall_back_to_settings_defaults(monkeypatch):
    for variable, _ in ENV_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    assert _resolve(PipelineSettingsResource.from_env()).settings() == Settings.from_env({})
    kinesis = _resolve(KinesisResource.from_env())
    assert (kinesis.stream_name, kinesis.endpoint_url, kinesis.shard_count) == (
        Settings().stream_name,
        None,
        Settings().shard_count,
    )


@pytest.mark.parametrize(
    ("variable", "value"),
    [("KINESIS_STARTING_POSITION", "yesterday"), ("KINESIS_LAKE_CONSUMER_TYPE", "fanout")],
)
def test_a_bad_value_fails_naming_the_variable(monkeypatch, variable, value):
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError, match=f"{variable}='{value}'"):
        _resolve(PipelineSettingsResource.from_env()).settings()


def test_a_bad_boolean_fails_naming_the_variable(monkeypatch):
    monkeypatch.setenv("KINESIS_LAKE_FAIL_ON_DATA_LOSS", "maybe")
    with pytest.raises(SettingsError, match="KINESIS_LAKE_FAIL_ON_DATA_LOSS='maybe'"):
        PipelineSettingsResource.from_env()
    with pytest.raises(SettingsError, match="use true or false"):
        Settings.from_env({"KINESIS_LAKE_FAIL_ON_DATA_LOSS": "maybe"})


def test_kinesis_resource_refuses_a_different_stream_than_the_settings(monkeypatch):
    monkeypatch.setenv("KINESIS_STREAM_NAME", "a")
    kinesis = _resolve(KinesisResource.from_env())
    with pytest.raises(SettingsError, match="stream 'a'"):
        kinesis.require_same_stream(Settings(stream_name="b"))


def test_spark_conf_env_vars_are_resolved(monkeypatch):
    monkeypatch.setenv("KINESIS_LAKE_TEST_SHUFFLE", "3")
    monkeypatch.setenv("SPARK_MASTER", "local[1]")
    spark = SparkResource(
        master=dg.EnvVar("SPARK_MASTER"),
        spark_config={"spark.sql.shuffle.partitions": dg.EnvVar("KINESIS_LAKE_TEST_SHUFFLE")},
    )
    resolved = _resolve(spark)
    assert resolved.spark_config == {"spark.sql.shuffle.partitions": "3"}
    assert resolved.master == "local[1]"
    assert _resolve(SparkResource.from_env()).master == "local[1]"


def test_no_credentials_in_resource_config(monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t-value")
    for resource in (KinesisResource.from_env(), PipelineSettingsResource.from_env()):
        assert "s3cr3t-value" not in repr(resource)
        assert "s3cr3t-value" not in repr(_resolve(resource))


def test_workspace_and_instance_yaml_are_valid(tmp_path):
    workspace = yaml.safe_load((REPO_ROOT / "workspace.yaml").read_text())
    module = workspace["load_from"][0]["python_module"]
    assert module["module_name"] == "kinesis_lake.definitions"
    assert module["working_directory"] == "."

    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text((REPO_ROOT / "dagster.yaml").read_text())
    with dg.DagsterInstance.from_config(str(home)) as instance:
        concurrency = instance.get_concurrency_config()
        assert concurrency.pool_config.default_pool_limit == 1
        assert instance.run_monitoring_enabled
        assert not instance.telemetry_enabled
        # A sensor-launched run starts within a second, not after Dagster's default 5 s.
        assert instance.run_coordinator.dequeue_interval_seconds == 1
        assert str(instance.root_directory) == str(home)


def _resolve(resource):
    """The resource as a run sees it: EnvVars replaced by their values."""
    with dg.build_resources({"r": resource}) as built:
        return built.r


LAKE = """\
tables:
  - name: page_views
    description: Pages people looked at.
    route: {type: page_view}
    fields:
      - {name: id, type: string, required: true}
      - {name: url, type: string}
    dedup: id
  - name: purchases
    route: {type: {one_of: [purchase, refund]}}
    fields:
      - {name: amount, type: double}
aggregate: {table: purchases}
"""


def test_each_declared_table_is_an_asset_with_its_schema_and_checks(
    monkeypatch, tmp_path, reloaded_afterwards
):
    path = tmp_path / "lake.yaml"
    path.write_text(LAKE)
    monkeypatch.setenv("KINESIS_LAKE_EVENT_SCHEMA", str(path))
    monkeypatch.setenv("KINESIS_LAKE_NAMESPACE", "shop")

    defs = _defs()

    graph = defs.resolve_asset_graph()
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    assert {"page_views", "purchases"} <= keys
    upkeep = {node.name for node in defs.resolve_job_def("iceberg_maintenance").nodes}
    assert {"maintain_page_views", "maintain_purchases"} <= upkeep
    assert "events" not in keys
    views = graph.get(dg.AssetKey("page_views"))
    assert views.owners == ["team:data-platform"] and views.kinds == {"spark", "iceberg"}
    assert views.description.startswith("Pages people looked at. Declared in ")
    assert 'raw records where type = "page_view", parsed' in views.description
    assert views.metadata["dagster/table_name"] == "shop.page_views"
    columns = [c.name for c in views.metadata["dagster/column_schema"].columns]
    assert columns[4:8] == ["approximate_arrival_timestamp", "id", "url", "event_timestamp"]
    assert graph.get(dg.AssetKey("event_counts_per_minute")).parent_keys == {
        dg.AssetKey("purchases")
    }
    checks = {k.to_user_string() for k in graph.asset_check_keys}
    assert {
        "page_views:schema_matches_declared",
        "purchases:schema_matches_declared",
        "events_quarantine:reconciles_with_raw",
        "event_counts_per_minute:sums_match_events",
    } <= checks


@pytest.mark.parametrize(
    ("broken", "expected"),
    [
        (
            LAKE.replace("route: {type: {one_of:", "route: {type: {any_of:"),
            ":9: table 'purchases': route condition on 'type': unknown operator 'any_of'",
        ),
        (
            LAKE + "derived:\n  - name: totals\n    sql: SELECT count(* FROM purchases\n",
            f":{LAKE.count(chr(10)) + 2}: derived table 'totals': the SQL does not parse at line 1",
        ),
    ],
)
def test_a_declaration_error_stops_the_load_naming_file_and_line(tmp_path, broken, expected):
    path = tmp_path / "lake.yaml"
    path.write_text(broken)
    env = {**os.environ, "KINESIS_LAKE_EVENT_SCHEMA": str(path), "DAGSTER_HOME": str(tmp_path)}

    validated = subprocess.run(
        [
            str(Path(sys.executable).parent / "dagster"),
            "definitions",
            "validate",
            "-w",
            "workspace.yaml",
        ],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

    assert validated.returncode != 0
    assert f"{path}{expected}" in validated.stdout + validated.stderr


TWO_STREAMS = """\
streams:
  - {name: web-clicks}
  - {name: orders}
tables:
  - name: clicks
    stream: web-clicks
    fields: [{name: id, type: string}]
  - name: order_lines
    stream: orders
    fields: [{name: id, type: string}]
aggregate: {table: order_lines}
"""


def test_each_declared_stream_has_its_own_assets_job_sensor_and_checks(
    monkeypatch, tmp_path, reloaded_afterwards
):
    path = tmp_path / "lake.yaml"
    path.write_text(TWO_STREAMS)
    monkeypatch.setenv("KINESIS_LAKE_EVENT_SCHEMA", str(path))

    defs = _defs()

    graph = defs.resolve_asset_graph()
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    assert {"kinesis_web_clicks", "raw_web_clicks", "kinesis_orders", "raw_orders"} <= keys
    assert "raw_events" not in keys and "kinesis_stream" not in keys
    assert graph.get(dg.AssetKey("raw_orders")).parent_keys == {dg.AssetKey("kinesis_orders")}
    assert graph.get(dg.AssetKey("clicks")).parent_keys == {dg.AssetKey("raw_web_clicks")}
    assert graph.get(dg.AssetKey("events_quarantine")).parent_keys == {
        dg.AssetKey("raw_web_clicks"),
        dg.AssetKey("raw_orders"),
    }
    # Each stream has its own checkpoint, so its own ingestion pool: one stream's run
    # (lingering up to KINESIS_LAKE_RUN_MAX_SECONDS) must not hold back the other's.
    pools = {
        name: defs.resolve_assets_def(name).op.pool for name in ("raw_orders", "raw_web_clicks")
    }
    assert pools == {
        "raw_orders": "kinesis_lake_ingestion_raw_orders",
        "raw_web_clicks": "kinesis_lake_ingestion_raw_web_clicks",
    }
    sensors = {s.name: s for s in defs.sensors}
    assert {"kinesis_backlog_raw_web_clicks", "kinesis_backlog_raw_orders"} <= set(sensors)
    assert sensors["kinesis_backlog_raw_orders"].job_name == "ingest_raw_orders"
    ingest = defs.resolve_job_def("ingest_raw_web_clicks")
    assert {k.to_user_string() for k in ingest.asset_layer.selected_asset_keys} == {
        "kinesis_web_clicks",
        "raw_web_clicks",
    }
    checks = {k.to_user_string() for k in graph.asset_check_keys}
    assert {
        "raw_orders:no_duplicate_records",
        "raw_web_clicks:fresh_relative_to_stream",
        "events_quarantine:reconciles_with_raw_orders",
        "events_quarantine:reconciles_with_raw_web_clicks",
    } <= checks


_AUTOMATIONS = """
query { assetNodes { assetKey { path } targetingInstigators { ... on Sensor { name } } } }
"""


def test_the_ui_lists_the_backlog_sensor_as_the_streams_automation(instance):
    """The stream's page said "No automations found" although the backlog sensor records
    it: the UI lists a sensor on an asset only when the sensor's target includes it."""
    from dagster_graphql.test.utils import define_out_of_process_context, execute_dagster_graphql

    definitions = str(REPO_ROOT / "kinesis_lake" / "definitions.py")
    with define_out_of_process_context(definitions, "defs", instance) as context:
        answer = execute_dagster_graphql(context, _AUTOMATIONS)

    automations = {
        "/".join(node["assetKey"]["path"]): {s["name"] for s in node["targetingInstigators"]}
        for node in answer.data["assetNodes"]
    }
    assert automations["kinesis_stream"] == {"kinesis_backlog_sensor"}
    assert automations["raw_events"] == {"kinesis_backlog_sensor"}


def _daemon_tick_gaps(minimum_interval_s: int, loops: int = 200) -> set[float]:
    """Seconds between the ticks Dagster's sensor daemon gives a sensor with this minimum
    interval, whole loops apart: the daemon looks once per loop of 5 s
    (``dagster._daemon.sensor.MIN_INTERVAL_LOOP_TIME``), each loop a few ms late, and ticks
    a sensor whose last tick (stamped as the loop reaches it, up to 0.1 s in) is at least
    the minimum interval old (``is_under_min_interval``)."""
    rng = random.Random(7)
    loop_at, last_tick, ticks = 0.0, None, []
    for _ in range(loops):
        loop_at += 5.0 + rng.uniform(0.0, 0.02)
        if last_tick is None or loop_at - last_tick >= minimum_interval_s:
            last_tick = loop_at + rng.uniform(0.0, 0.1)
            ticks.append(round(loop_at / 5.0) * 5.0)
    return {b - a for a, b in itertools.pairwise(ticks)}


def test_the_backlog_sensor_ticks_as_often_as_configured(monkeypatch, reloaded_afterwards):
    """Its 30 s interval alone put ~15 s between a record and its run on average: a lake
    that wants seconds of latency (with runs attached to a Connect server) sets it lower."""
    for interval, gap in (("5", 5.0), ("6", 10.0), ("1", 5.0)):
        monkeypatch.setenv("KINESIS_LAKE_SENSOR_INTERVAL_SECONDS", interval)
        defs = _defs()
        for name in ("kinesis_backlog_sensor", "kinesis_lake_automation"):
            minimum = defs.get_sensor_def(name).minimum_interval_seconds
            assert minimum is not None and _daemon_tick_gaps(minimum) == {gap}, (name, interval)
            assert daemon_tick_gap(int(interval)) == gap  # what the handover hold counts on

    with pytest.raises(SettingsError, match="KINESIS_LAKE_SENSOR_INTERVAL_SECONDS must be >= 1"):
        Settings(sensor_interval_seconds=0)


def test_a_lingering_run_is_capped_below_the_freshness_budget():
    """A run in progress longer than KINESIS_LAKE_FRESHNESS_MINUTES is reported stale, so
    a cap that lets a lingering run reach it would make a healthy stream look stuck."""
    with pytest.raises(SettingsError, match=r"KINESIS_LAKE_RUN_MAX_SECONDS=900 .*FRESHNESS"):
        Settings(run_linger_seconds=30, run_max_seconds=900)
    with pytest.raises(SettingsError, match="KINESIS_LAKE_RUN_LINGER_SECONDS must be >= 0"):
        Settings(run_linger_seconds=-1)
    assert Settings(run_max_seconds=899, run_linger_seconds=30).run_max_seconds == 899
    # Without lingering the cap is unused: a short freshness budget stays valid.
    assert Settings(freshness_minutes=3).run_max_seconds == 300


def test_maintenance_runs_as_often_as_configured(monkeypatch, reloaded_afterwards):
    """An hourly pass let a writer on a sub-second trigger pile up 7,200 commits and their
    small files between passes; a lake on a short trigger schedules upkeep more often."""
    assert _defs().get_schedule_def("iceberg_maintenance_schedule").cron_schedule == "17 * * * *"
    monkeypatch.setenv("KINESIS_LAKE_MAINTENANCE_CRON", "*/5 * * * *")
    assert _defs().get_schedule_def("iceberg_maintenance_schedule").cron_schedule == "*/5 * * * *"

    monkeypatch.setenv("KINESIS_LAKE_MAINTENANCE_CRON", "every five minutes")
    with pytest.raises(SettingsError, match="KINESIS_LAKE_MAINTENANCE_CRON='every five minutes'"):
        _defs()
