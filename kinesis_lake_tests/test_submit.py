"""``make package``'s output, submitted as a cluster takes it, and what it reports back.

One test, because it is the slowest kind there is (the package, a cluster, a JVM): a
standalone Spark cluster (master and worker started by the pip PySpark's own
``sbin/spark-daemon.sh``, on 127.0.0.1) runs ``spark-submit kinesis_lake_submit.py ingest
--derive`` with nothing but the packed virtualenv: the driver's Python is the unpacked
archive's, in a working folder holding only it and the declaration (as a cluster-mode
driver's container is laid out), and the executors get it through ``--archives``. The job
runs with the Dagster Pipes context a launcher gives a driver (``DAGSTER_PIPES_*``
variables), so it also proves the remote side of the protocol: every record lands in raw
exactly once, the routed tables add up, and the materializations it reports carry the rows,
positions and data-loss count.

The cluster and ``spark-submit`` are Spark 4.0.x's (what EMR 8 runs), from the
compatibility virtualenv ``make test`` builds (:func:`spark_home`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pyspark
import pytest
from dagster_pipes import encode_param

from kinesis_lake_tests.aws_env import FAKE_AWS_ENV
from kinesis_lake_tests.lake_settings import make_settings
from kinesis_lake_tests.pipeline_helpers import produce
from kinesis_lake_tests.production.cluster import SparkStandaloneCluster
from kinesis_lake_tests.production.lake_checks import (
    assert_derived_tables_add_up,
    assert_raw_is_the_stream_exactly_once,
)

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "build" / "package"
RECORDS, MALFORMED_EVERY = 400, 10
ASSETS = ["raw_events", "events", "events_quarantine", "event_counts_per_minute"]


def spark_home() -> Path:
    """``KINESIS_LAKE_SUBMIT_SPARK_HOME``; else the newest Spark 4.0.x of the compatibility
    virtualenvs ``make test`` builds first (``.venv-spark-4.0.*``: EMR 8 runs 4.0.2); else,
    where none was built, the locked PySpark's."""
    chosen = os.environ.get("KINESIS_LAKE_SUBMIT_SPARK_HOME")
    if chosen:
        return Path(chosen)
    found = sorted(
        ROOT.glob(".venv-spark-4.0.*/lib/python*/site-packages/pyspark"),
        key=lambda path: int(path.parts[-5].rsplit(".", 1)[-1]),
    )
    return found[-1] if found else Path(pyspark.__file__).resolve().parent


def build_package() -> Path:
    """``make package`` (its stamp skips the work when nothing changed)."""
    subprocess.run([sys.executable, str(ROOT / "scripts" / "package.py")], check=True)
    return PACKAGE / "kinesis_lake_env.tar.gz"


def pipes_context(folder: Path) -> dict[str, str]:
    """The variables a launcher sets on the driver: the context in a file, messages to
    another (what dagster's own subprocess client does)."""
    context = {
        "asset_keys": ASSETS,
        "code_version_by_asset_key": None,
        "provenance_by_asset_key": None,
        "partition_key": None,
        "partition_key_range": None,
        "partition_time_window": None,
        "run_id": "spark-submit-test",
        "job_name": "spark-submit-test",
        "retry_number": 0,
        "extras": {},
    }
    (folder / "context.json").write_text(json.dumps(context))
    return {
        "DAGSTER_PIPES_CONTEXT": encode_param({"path": str(folder / "context.json")}),
        "DAGSTER_PIPES_MESSAGES": encode_param({"path": str(folder / "messages.jsonl")}),
    }


@pytest.mark.timeout(1800)  # the package, a cluster and two JVMs: minutes on 2 busy cores
def test_spark_submit_of_the_package_ingests_every_record_once_and_reports_it(
    kinesalite_endpoint, tmp_path: Path
) -> None:
    archive = build_package()
    settings = make_settings(tmp_path / "data", kinesalite_endpoint.url)
    produce(settings, RECORDS, malformed_every=MALFORMED_EVERY)

    driver = tmp_path / "driver"  # what a cluster-mode driver's container holds
    (driver / "environment").mkdir(parents=True)
    with tarfile.open(archive) as packed:
        packed.extractall(driver / "environment", filter="tar")
    shutil.copy(settings.event_schema_path, driver / settings.event_schema_path.name)
    shutil.copy(PACKAGE / "kinesis_lake_submit.py", driver)
    home = spark_home()
    python = "./environment/bin/python"
    env = {
        "PATH": os.environ["PATH"],
        "JAVA_HOME": os.environ.get("JAVA_HOME", ""),
        **FAKE_AWS_ENV,
        **settings.to_env(),  # its SPARK_MASTER (local[2]) must lose to the submitted one
        "KINESIS_LAKE_EVENT_SCHEMA": settings.event_schema_path.name,
        "SPARK_HOME": str(home),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": python,
        "PYSPARK_DRIVER_PYTHON": python,
        **pipes_context(tmp_path),
    }

    cluster = SparkStandaloneCluster(
        tmp_path / "spark",
        workers=1,
        worker_cores=2,
        spark_home=home,
        env={"PYSPARK_PYTHON": python},
    )
    with cluster.start():
        submitted = subprocess.run(
            [
                str(home / "bin" / "spark-submit"),
                "--master",
                cluster.master_url,
                "--archives",
                f"{archive}#environment",
                "--conf",
                f"spark.executorEnv.PYSPARK_PYTHON={python}",
                "kinesis_lake_submit.py",
                "ingest",
                "--derive",
            ],
            cwd=driver,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        applications = cluster.status()["completedapps"]
    assert submitted.returncode == 0, submitted.stdout[-3000:] + submitted.stderr[-5000:]
    assert f"ingested {RECORDS} rows" in submitted.stdout
    assert len(applications) == 1, "the job ran on the cluster, not in a local Spark"

    assert_raw_is_the_stream_exactly_once(settings, RECORDS)
    malformed = RECORDS // MALFORMED_EVERY
    assert_derived_tables_add_up(settings, raw=RECORDS, malformed=malformed)

    messages = [json.loads(line) for line in (tmp_path / "messages.jsonl").read_text().splitlines()]
    assert messages[-1]["method"] == "closed" and not messages[-1]["params"], messages[-1]
    reported = {
        m["params"]["asset_key"]: {k: v["raw_value"] for k, v in m["params"]["metadata"].items()}
        for m in messages
        if m["method"] == "report_asset_materialization"
    }
    assert set(reported) == set(ASSETS)
    raw = reported["raw_events"]
    assert (raw["rows_added"], raw["dagster/row_count"], raw["skipped_ranges"]) == (
        RECORDS,
        RECORDS,
        0,
    )
    assert raw["batches"] >= 1
    assert raw["shards_committed"] == settings.shard_count
    assert all(raw[key] for key in raw if key.startswith("position/"))
    assert reported["events_quarantine"]["rows_added"] == malformed
    assert reported["events"]["rows_added"] == RECORDS - malformed
