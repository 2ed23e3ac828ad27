"""Fixtures for the production-shaped tests: the AWS profile on moto, Postgres, a cluster.

Nothing here talks to real AWS. The one moto server of the test session (``moto_endpoint``,
a ``python -m moto.server -H 127.0.0.1`` subprocess) stands in for Kinesis, S3 and Glue.
Every process a test starts gets explicit loopback endpoints for each service (the
settings a real deployment leaves unset) *and* ``AWS_ENDPOINT_URL``, botocore's own
override, as a safety net, plus placeholder credentials and no instance metadata.

The environment of each test is built from scratch: variables of the developer's own
setup (``PYICEBERG_*``, ``KINESIS_*``, ``~/.pyiceberg.yaml``) cannot leak in.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from kinesis_lake_tests.production.cluster import SparkStandaloneCluster
from kinesis_lake_tests.production.postgres import PostgresServer, reachable_postgres
from kinesis_lake_tests.production.profiles import aws_profile_env, isolate_environment


@pytest.fixture(autouse=True)
def isolated_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    isolate_environment(monkeypatch, tmp_path / "home")


@pytest.fixture
def aws_profile(moto_endpoint, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """The AWS profile applied to the environment, for a fresh bucket and stream on moto.

    Returns the bucket; ``Settings.from_env()`` gives the settings (tests may change
    variables first, as a deployment would).
    """
    bucket = f"lake-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=moto_endpoint.url).create_bucket(Bucket=bucket)
    env = aws_profile_env(
        bucket=bucket,
        endpoint_url=moto_endpoint.url,
        stream_name=f"prod-{uuid.uuid4().hex[:10]}",
        local_dir=tmp_path / "node-a",
    )
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return bucket


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory, moto_endpoint) -> Iterator:
    """A standalone master and 2 workers (1 core, 1 GiB each) on 127.0.0.1.

    Depends on ``moto_endpoint`` so that the workers (whose environment their executors
    inherit) start with ``AWS_ENDPOINT_URL`` pointing at it: an executor that built an AWS
    client without an explicit endpoint would still stay on loopback.
    """
    cluster = SparkStandaloneCluster(
        tmp_path_factory.mktemp("spark-cluster"),
        env={"AWS_ENDPOINT_URL": moto_endpoint.url, "AWS_EC2_METADATA_DISABLED": "true"},
    )
    with cluster.start():
        yield cluster


@pytest.fixture(scope="session")
def postgres() -> PostgresServer:
    """The Postgres server the tests use; FAILS (never skips) when none answers."""
    return reachable_postgres()


@pytest.fixture
def postgres_database(postgres: PostgresServer) -> Iterator[str]:
    """A throwaway database, dropped after the test."""
    with postgres.temporary_database() as name:
        yield name
