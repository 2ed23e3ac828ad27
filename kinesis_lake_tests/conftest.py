"""Fixtures every pipeline test shares: real endpoints over HTTP, one real Spark session.

Nothing of ours is mocked. Endpoints bind 127.0.0.1 only, and so does Spark
(``build_spark_session`` pins the driver to loopback; SPARK_LOCAL_IP is set here too).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

FAKE_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "kinesis-lake-test",
    "AWS_SECRET_ACCESS_KEY": "kinesis-lake-test",
    "AWS_REGION": "us-east-1",
    "AWS_DEFAULT_REGION": "us-east-1",
}
for _key, _value in FAKE_AWS_ENV.items():
    os.environ.setdefault(_key, _value)
# Keep boto3 away from any profile or instance metadata on the test machine.
os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")


@pytest.fixture(scope="session")
def kinesalite_endpoint() -> Iterator:
    from kinesis_lake.kinesis.endpoint import LocalKinesisEndpoint

    with LocalKinesisEndpoint("kinesalite") as endpoint:
        yield endpoint


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator:
    from kinesis_lake.kinesis.endpoint import LocalKinesisEndpoint

    with LocalKinesisEndpoint("moto") as endpoint:
        yield endpoint


@pytest.fixture(params=["kinesalite", "moto"])
def any_endpoint(request):
    """Both local endpoints: kinesalite (the default) and moto (the pip-only fallback)."""
    return request.getfixturevalue(f"{request.param}_endpoint")


@pytest.fixture(scope="session")
def spark():
    from kinesis_lake.spark.session import build_spark_session

    session = build_spark_session("local[2]", app_name="kinesis-lake-tests")
    yield session
    session.stop()


def make_settings(data_dir: Path, endpoint_url: str, **overrides):
    from kinesis_lake.config import Settings

    values = {
        "stream_name": f"test-{uuid.uuid4().hex[:10]}",
        "endpoint_url": endpoint_url,
        "region": "us-east-1",
        "shard_count": 2,
        "starting_position": "trim_horizon",
        "data_dir": data_dir,
        "namespace": "lake",
    }
    values.update(overrides)
    return Settings(**values)


@pytest.fixture
def settings_factory(tmp_path: Path):
    """Settings for a fresh stream and a fresh catalog/warehouse under tmp_path."""

    def build(endpoint, **overrides):
        return make_settings(tmp_path / "data", endpoint.url, **overrides)

    return build
