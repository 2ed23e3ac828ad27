"""The AWS profile, end to end, on a Spark standalone cluster, against one moto server.

moto (``python -m moto.server -H 127.0.0.1``) stands in for Kinesis, S3 and Glue. The
profile is ``profiles/aws.env.example`` with only the substitutions listed in
``profiles.py``. Every job runs as ``kinesis-lake ingest --derive`` in a new process, as
an operator would run it, so the environment it sees is exactly the profile.

moto's Glue accepts any table version on update: it cannot prove that two concurrent
commits are serialised (real Glue enforces ``VersionId``), so this test commits from one
writer at a time and proves correctness, not commit concurrency.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import boto3
import pytest

from kinesis_lake.config import Settings
from kinesis_lake.spark.runtime.session import driver_address_conf
from kinesis_lake_tests.pipeline_helpers import produce, run_cli
from kinesis_lake_tests.production.cluster import SparkStandaloneCluster
from kinesis_lake_tests.production.lake_checks import (
    all_tables,
    assert_athena_can_query,
    assert_derived_tables_add_up,
    assert_raw_is_the_stream_exactly_once,
    data_file_paths,
    raw_writer_ids,
)

FIRST, SECOND, THIRD = 300, 100, 60
MALFORMED_EVERY = 10
DRIVER_ADDRESS = "127.0.0.2"


def test_the_driver_address_is_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPARK_LOCAL_IP", raising=False)
    assert driver_address_conf()["spark.driver.host"] == "127.0.0.1", "loopback by default"
    monkeypatch.setenv("SPARK_LOCAL_IP", "10.0.3.7")
    assert driver_address_conf() == {
        "spark.driver.host": "10.0.3.7",
        "spark.driver.bindAddress": "10.0.3.7",
    }


def test_aws_profile_on_a_cluster_then_resumed_elsewhere_with_and_without_checkpoint(
    aws_profile: str,
    spark_cluster: SparkStandaloneCluster,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("SPARK_MASTER", spark_cluster.master_url)
    # The driver at another address than the cluster's, as on separate hosts: executors
    # must reach it where configuration says it is (still loopback: 127.0.0.0/8).
    monkeypatch.setenv("SPARK_LOCAL_IP", DRIVER_ADDRESS)
    # Small batches, so the run commits several micro-batches from both shards.
    monkeypatch.setenv("KINESIS_MAX_RECORDS_PER_SHARD", "100")
    settings = Settings.from_env()
    produce(settings, FIRST, malformed_every=MALFORMED_EVERY, seed=21)

    on_cluster = run_cli(settings, "ingest", "--derive")

    assert on_cluster.returncode == 0, on_cluster.stderr[-4000:]
    assert_raw_is_the_stream_exactly_once(settings, FIRST)
    assert_derived_tables_add_up(settings, raw=FIRST, malformed=FIRST // MALFORMED_EVERY)
    # The work ran on the cluster's executors, on both workers...
    assert [app["name"] for app in spark_cluster.status()["completedapps"]] == ["kinesis-lake"]
    for worker in ("worker-1", "worker-2"):
        assert list((spark_cluster.root / "work" / worker).glob("app-*")), f"{worker} ran nothing"
    # Workers log each executor's launch command, which names the driver's address.
    assert f"CoarseGrainedScheduler@{DRIVER_ADDRESS}:" in spark_cluster.logs(tail=None)
    # ...and every table, its metadata and its data files live in Glue + S3, not locally.
    warehouse = f"s3://{aws_profile}/warehouse/"
    glue_tables = boto3.client("glue", region_name=settings.region).get_tables(
        DatabaseName=settings.namespace
    )["TableList"]
    assert {f"{settings.namespace}.{t['Name']}" for t in glue_tables} == set(all_tables(settings))
    assert all(t["Parameters"]["metadata_location"].startswith(warehouse) for t in glue_tables)
    assert_athena_can_query(settings, glue_tables)
    for table in all_tables(settings):
        assert all(path.startswith(warehouse) for path in data_file_paths(settings, table))
    writers = raw_writer_ids(settings)

    # Another machine: a new process with its own scratch folder, home and Spark master
    # (local[2] this time: the master is configuration too). Only the checkpoint folder
    # travels, as it would on a shared volume; the tables are where they were, in S3.
    produce(settings, SECOND, malformed_every=MALFORMED_EVERY, seed=22)
    node_b = tmp_path / "node-b"
    shutil.move(settings.checkpoint_dir, node_b / "checkpoints")
    monkeypatch.setenv("KINESIS_LAKE_CHECKPOINT_DIR", str(node_b / "checkpoints"))
    monkeypatch.setenv("KINESIS_LAKE_DATA_DIR", str(node_b / "scratch"))
    (node_b / "home").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(node_b / "home"))
    monkeypatch.setenv("SPARK_MASTER", "local[2]")
    monkeypatch.setenv("SPARK_LOCAL_IP", "127.0.0.1")
    moved = Settings.from_env()

    elsewhere = run_cli(moved, "ingest", "--derive")

    assert elsewhere.returncode == 0, elsewhere.stderr[-4000:]
    total = FIRST + SECOND
    assert_raw_is_the_stream_exactly_once(moved, total)
    assert_derived_tables_add_up(moved, raw=total, malformed=total // MALFORMED_EVERY)
    assert raw_writer_ids(moved) == writers, "the moved checkpoint resumed the same query"
    # Nothing durable was kept locally: the first machine's scratch holds Spark's log only.
    kept = [p for p in (tmp_path / "node-a" / "scratch").rglob("*") if p.is_file()]
    assert {p.parent.name for p in kept} <= {"logs"}, kept

    # A third machine with no checkpoint at all (a lost volume, or Spark's checkpoint
    # kept on local disk because it cannot go to S3 without hadoop-aws): the raw table's
    # committed positions, in S3 with the data, are where the new query starts.
    produce(settings, THIRD, malformed_every=MALFORMED_EVERY, seed=23)
    node_c = tmp_path / "node-c"
    monkeypatch.setenv("KINESIS_LAKE_CHECKPOINT_DIR", str(node_c / "checkpoints"))
    monkeypatch.setenv("KINESIS_LAKE_DATA_DIR", str(node_c / "scratch"))
    (node_c / "home").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(node_c / "home"))
    without_checkpoint = Settings.from_env()

    fresh = run_cli(without_checkpoint, "ingest", "--derive")

    assert fresh.returncode == 0, fresh.stderr[-4000:]
    total += THIRD
    assert_raw_is_the_stream_exactly_once(without_checkpoint, total)
    assert_derived_tables_add_up(without_checkpoint, raw=total, malformed=total // MALFORMED_EVERY)
    assert len(raw_writer_ids(without_checkpoint) - writers) == 1, "a new query, not the old one"
