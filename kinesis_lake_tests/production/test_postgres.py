"""Postgres in production: Dagster's storage and the Iceberg SQL catalog, with secrets kept.

Each test gets throwaway databases on the local server (dropped afterwards). No Postgres
is a failure that says how to start one, never a silent skip.

The heavy test runs the real ``kinesis_lake.definitions`` through the ``dagster`` CLI in a
new process, as a deployment would: Dagster storage on Postgres, the Iceberg SQL catalog
on Postgres with its warehouse in S3 (moto), ingestion and derived tables in Spark. It
then reads the run back from Postgres in this process and searches every event of the
run, the run record, every file under $DAGSTER_HOME (compute logs) and the checkpoint
folder, every table metadata object in S3, and the process's own stdout/stderr (Spark's
and the ingestion's output) for the secret values it configured.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import boto3
import dagster as dg
import pytest

from kinesis_lake.config import Settings
from kinesis_lake.iceberg.catalog import catalog_properties, open_catalog
from kinesis_lake.iceberg.data_files import TableWriteTarget
from kinesis_lake_tests.pipeline_helpers import produce
from kinesis_lake_tests.production.dagster_home import postgres_dagster_env, postgres_dagster_home
from kinesis_lake_tests.production.lake_checks import (
    all_tables,
    assert_derived_tables_add_up,
    assert_raw_is_the_stream_exactly_once,
)
from kinesis_lake_tests.production.postgres import PostgresServer
from kinesis_lake_tests.production.profiles import CATALOG_PREFIX

SENT = 300
MALFORMED_EVERY = 10
PIPELINE_ASSETS = "raw_events,events,events_quarantine,event_counts_per_minute"


@dg.asset
def heartbeat() -> dg.MaterializeResult:
    return dg.MaterializeResult(metadata={"beats": 1})


def test_dagster_keeps_runs_events_and_schedules_in_postgres(
    postgres: PostgresServer,
    postgres_database: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    home = postgres_dagster_home(tmp_path / "dagster_home")
    env = postgres_dagster_env(postgres, postgres_database, password="unused", home=home)
    for key, value in env.items():
        monkeypatch.setenv(key, value)

    with dg.DagsterInstance.from_config(str(home)) as instance:
        result = dg.materialize([heartbeat], instance=instance)
        assert result.success

    # A new instance (new connections) finds the run, its events and its materialization.
    with dg.DagsterInstance.from_config(str(home)) as instance:
        run = instance.get_run_by_id(result.run_id)
        assert run is not None and run.status == dg.DagsterRunStatus.SUCCESS
        assert any(
            e.dagster_event_type == dg.DagsterEventType.RUN_SUCCESS
            for e in instance.all_logs(result.run_id)
        )
        materialization = instance.fetch_materializations(heartbeat.key, limit=1).records[0]
        assert materialization.asset_materialization.metadata["beats"].value == 1
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        assert type(instance.event_log_storage).__name__ == "PostgresEventLogStorage"
        assert type(instance.schedule_storage).__name__ == "PostgresScheduleStorage"
        assert instance.schedule_storage.all_instigator_state() == []
    # ...because it is in Postgres, not in a SQLite file under DAGSTER_HOME.
    assert postgres.query(
        postgres_database, "SELECT status FROM runs WHERE run_id = %s", result.run_id
    ) == [("SUCCESS",)]
    assert not list(home.rglob("*.db"))


def test_dagster_run_on_postgres_with_a_postgres_catalog_keeps_secrets_out(
    postgres: PostgresServer,
    postgres_database: str,
    aws_profile: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    aws_secret = f"aws-secret-{uuid.uuid4().hex}"
    pg_password = f"pg-password-{uuid.uuid4().hex}"
    secrets = (aws_secret, pg_password)
    home = postgres_dagster_home(tmp_path / "dagster_home")
    with postgres.temporary_database() as catalog_database:
        env = {
            # The profile's documented alternative: the SQL catalog on Postgres, same S3
            # warehouse, with the password in the URI (the local server trusts any).
            f"{CATALOG_PREFIX}TYPE": "sql",
            f"{CATALOG_PREFIX}URI": postgres.sqlalchemy_url(catalog_database, pg_password),
            # The S3 secret reaches the pipeline twice: pyiceberg's FileIO configuration
            # and boto3's credential chain (Kinesis).
            f"{CATALOG_PREFIX}S3__ACCESS_KEY_ID": "kinesis-lake-test",
            f"{CATALOG_PREFIX}S3__SECRET_ACCESS_KEY": aws_secret,
            "AWS_SECRET_ACCESS_KEY": aws_secret,
            **postgres_dagster_env(postgres, postgres_database, password=pg_password, home=home),
        }
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        settings = Settings.from_env()
        produce(settings, SENT, malformed_every=MALFORMED_EVERY, seed=31)

        completed = subprocess.run(
            [
                sys.executable,
                "-m",
                "dagster",
                "asset",
                "materialize",
                "-m",
                "kinesis_lake.definitions",
                "-a",
                "defs",
                "--select",
                PIPELINE_ASSETS,
            ],
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )

        assert completed.returncode == 0, completed.stderr[-4000:]
        assert_raw_is_the_stream_exactly_once(settings, SENT)
        assert_derived_tables_add_up(settings, raw=SENT, malformed=SENT // MALFORMED_EVERY)
        catalogued = postgres.query(
            catalog_database,
            "SELECT table_namespace, table_name, metadata_location FROM iceberg_tables",
        )
        assert {f"{ns}.{name}" for ns, name, _ in catalogued} == set(all_tables(settings))
        assert all(location.startswith(f"s3://{aws_profile}/") for _, _, location in catalogued)
        # The secrets really flowed through configuration into the pipeline's code...
        raw = open_catalog(settings.catalog_name, data_dir=settings.data_dir).load_table(
            settings.raw_table
        )
        assert TableWriteTarget.from_table(raw).io_properties["s3.secret-access-key"] == aws_secret
        assert (
            pg_password
            in catalog_properties(settings.catalog_name, data_dir=settings.data_dir)["uri"]
        )

    # ...and appear nowhere Dagster or the jobs write things down.
    with dg.DagsterInstance.from_config(str(home)) as instance:
        runs = instance.get_runs()
        assert [run.status for run in runs] == [dg.DagsterRunStatus.SUCCESS]
        events = instance.all_logs(runs[0].run_id)
        materialized = {
            e.dagster_event.asset_key.to_user_string()
            for e in events
            if e.dagster_event_type == dg.DagsterEventType.ASSET_MATERIALIZATION
        }
        assert materialized == set(PIPELINE_ASSETS.split(","))
        records = {
            "run record": dg.serialize_value(runs[0]),
            **{
                f"event {i} ({e.dagster_event_type})": dg.serialize_value(e)
                for i, e in enumerate(events)
            },
        }
    # Files: everything under DAGSTER_HOME (compute logs) and the checkpoint folder, and
    # every table metadata object in the bucket (metadata JSON, manifests, manifest lists).
    local_files = [*home.rglob("*"), *Path(settings.checkpoint_dir).rglob("*")]
    records.update({f"file {p}": p.read_text(errors="replace") for p in local_files if p.is_file()})
    records.update(_table_metadata_objects(aws_profile))
    records["stdout"] = completed.stdout
    records["stderr"] = completed.stderr
    # The search does see what configuration puts into metadata: the table names.
    assert any(settings.raw_table in text for text in records.values())
    leaks = [
        (where, secret) for where, text in records.items() for secret in secrets if secret in text
    ]
    assert not leaks, f"secret values found in: {sorted({where for where, _ in leaks})}"


def _table_metadata_objects(bucket: str) -> dict[str, str]:
    """Every non-data object in the bucket, as text (Avro manifests decode lossily)."""
    s3 = boto3.client("s3")
    found = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for item in page.get("Contents", []):
            if not item["Key"].endswith(".parquet"):
                body = s3.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()
                found[f"s3://{bucket}/{item['Key']}"] = body.decode(errors="replace")
    return found
