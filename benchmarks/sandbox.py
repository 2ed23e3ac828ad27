"""Where a benchmark runs: loopback only, fake AWS credentials, scratch under results/tmp.

Benchmarks run against one local endpoint on 127.0.0.1 that the run starts and stops.
Fake AWS credentials are set before any boto3 client exists, and instance-metadata
lookups are disabled, so nothing a benchmark starts can reach AWS or leave loopback.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"
# Ignored by git (see .gitignore): streams' Iceberg warehouses and Spark checkpoints.
WORK_ROOT = RESULTS_DIR / "tmp"

REGION = "us-east-1"

FAKE_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "kinesis-lake-bench",
    "AWS_SECRET_ACCESS_KEY": "kinesis-lake-bench",
    "AWS_REGION": REGION,
    "AWS_DEFAULT_REGION": REGION,
    # No profile, no instance metadata: only the fake keys above can be used.
    "AWS_EC2_METADATA_DISABLED": "true",
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    "SPARK_LOCAL_IP": "127.0.0.1",
    "PYSPARK_PYTHON": sys.executable,
    "PYSPARK_DRIVER_PYTHON": sys.executable,
}


def configure_process_env() -> None:
    """Pin credentials, region and loopback for this process and every child it starts.

    Overrides rather than ``setdefault``: a developer's real AWS keys in the shell must
    never be used by a benchmark.
    """
    os.environ.update(FAKE_AWS_ENV)


def new_work_dir() -> Path:
    """A fresh scratch directory for one run, under the git-ignored ``WORK_ROOT``."""
    WORK_ROOT.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix="run-", dir=WORK_ROOT))


def dagster_deployment_env(
    data_dir: Path, endpoint_url: str, stream_name: str, shards: int, **settings: str
) -> tuple[Path, dict[str, str]]:
    """A ``make dev``-like deployment in ``data_dir``: its DAGSTER_HOME (holding the
    repository's dagster.yaml) and the environment its ``dagster dev`` runs with."""
    home = data_dir / "dagster_home"
    home.mkdir(exist_ok=True)
    shutil.copy(REPO_ROOT / "dagster.yaml", home / "dagster.yaml")
    env = {
        **os.environ,
        "KINESIS_ENDPOINT_URL": endpoint_url,
        "KINESIS_LAKE_DATA_DIR": str(data_dir),
        "KINESIS_SHARD_COUNT": str(shards),
        "AWS_REGION": REGION,
        "KINESIS_STREAM_NAME": stream_name,
        **settings,
    }
    return home, env
