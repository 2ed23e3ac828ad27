"""Fixtures every pipeline test shares: real endpoints over HTTP, one real Spark session.

Nothing of ours is mocked. Endpoints bind 127.0.0.1 only, and so does Spark
(``build_spark_session`` pins the driver to loopback; SPARK_LOCAL_IP is set here too).
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyiceberg.catalog.sql import SqlCatalog

from kinesis_lake_tests import scheduling, tiers
from kinesis_lake_tests.aws_env import FAKE_AWS_ENV
from kinesis_lake_tests.lake_settings import make_settings

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

# Session-wide too: session fixtures (endpoints, the Spark session) start before any test.
for _key, _value in FAKE_AWS_ENV.items():
    os.environ.setdefault(_key, _value)


@pytest.fixture(autouse=True)
def isolated_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Every test: placeholder AWS credentials and region, never a real profile, shared
    credentials file or metadata service; and no pyiceberg configuration of the developer's
    (``PYICEBERG_*`` variables, ``~/.pyiceberg.yaml``), as pyiceberg's own tests isolate it.
    """
    for key, value in FAKE_AWS_ENV.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    for name in list(os.environ):
        if name.upper().startswith("PYICEBERG_"):
            monkeypatch.delenv(name)
    home = tmp_path / "no-pyiceberg-config"
    home.mkdir()
    monkeypatch.setenv("PYICEBERG_HOME", str(home))


_SHARED_ENDPOINTS: list = []
"""The session's endpoints, once started: checked after every test."""

_DIED_LOGS = Path(__file__).resolve().parents[1] / "test-output" / "endpoints"


@pytest.fixture(autouse=True)
def shared_endpoints_survive(request: pytest.FixtureRequest) -> Iterator[None]:
    """A shared endpoint that died during a test fails that test, keeps what it printed
    (``test-output/endpoints/``) and is started again on its URL: one crash would
    otherwise refuse every later test's connections and take its explanation with it."""
    yield
    died = []
    for endpoint in _SHARED_ENDPOINTS:
        with tiers.shared():  # a fast test may see a shared endpoint started again
            last_words = endpoint.revive()
        if last_words is not None:
            _DIED_LOGS.mkdir(parents=True, exist_ok=True)
            test = re.sub(r"[^\w.-]+", "_", request.node.nodeid)[-150:]
            log = _DIED_LOGS / f"{endpoint.kind}-{test}.log"
            log.write_text(last_words)
            died.append(
                f"the shared {endpoint.kind} endpoint died during this test; see {log}; it "
                f"ended with:\n{last_words[-1500:]}"  # CI keeps the output, not the file
            )
    if died:
        pytest.fail("; ".join(died))


def _shared_endpoint(kind: str) -> Iterator:
    from kinesis_lake.kinesis.endpoint import LocalKinesisEndpoint

    with LocalKinesisEndpoint(kind) as endpoint:
        _SHARED_ENDPOINTS.append(endpoint)
        try:
            yield endpoint
        finally:
            _SHARED_ENDPOINTS.remove(endpoint)


@pytest.fixture(scope="session")
def kinesalite_endpoint() -> Iterator:
    yield from _shared_endpoint("kinesalite")


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator:
    yield from _shared_endpoint("moto")


@pytest.fixture
def clock(kinesalite_endpoint) -> Iterator:
    """The shared kinesalite behind a clock proxy of its own: the test moves the server's
    clock (retention, iterator lifetimes) forward."""
    from kinesis_lake_tests.kinesis.clock_proxy import ClockProxy

    with ClockProxy(kinesalite_endpoint.url) as proxy:
        yield proxy


@pytest.fixture
def registry(moto_endpoint) -> Iterator:
    """A fresh schema registry on moto's Glue (the shared endpoint), deleted after the test:
    Glue, moto's too, holds at most ten registries."""
    from kinesis_lake_tests.events.registry import Registry

    with Registry(moto_endpoint.url) as registry:
        yield registry


@pytest.fixture(scope="session")
def kinesis_mock_endpoint() -> Iterator:
    """kinesis-mock: the local endpoint that serves SubscribeToShard (enhanced fan-out)."""
    from kinesis_lake.kinesis.kinesis_mock import KinesisMockEndpoint

    endpoint = KinesisMockEndpoint().start()
    yield endpoint
    endpoint.stop()


@pytest.fixture
def s3_root(moto_endpoint, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """An empty S3 prefix on moto; s3fs finds moto through botocore's AWS_ENDPOINT_URL."""
    import boto3

    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint.url)
    bucket = f"state-{uuid.uuid4().hex[:12]}"
    boto3.client("s3").create_bucket(Bucket=bucket)
    yield f"s3://{bucket}/checkpoints/lake/raw_events/kinesis-source"


@pytest.fixture(params=["kinesalite", "moto"])
def any_endpoint(request):
    """Both local endpoints: kinesalite (the default) and moto (the pip-only fallback)."""
    return request.getfixturevalue(f"{request.param}_endpoint")


@pytest.fixture(scope="session")
def spark():
    from kinesis_lake.spark.runtime.session import build_spark_session

    session = build_spark_session("local[2]", app_name="kinesis-lake-tests")
    yield session
    session.stop()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """Where a test's lake (catalog database and warehouse) lives."""
    return tmp_path / "data"


@pytest.fixture
def catalog(tmp_path: Path) -> SqlCatalog:
    """A fresh pyiceberg SqlCatalog with the ``lake`` namespace, for tests that write tables
    without a lake's settings (the iceberg tests have one of their own, over ``data_dir``)."""
    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}/wh")
    catalog.create_namespace("lake")
    return catalog


@pytest.fixture
def settings_factory(tmp_path: Path):
    """Settings for a fresh stream and a fresh catalog/warehouse under tmp_path; with
    ``declaration=`` (a lake.yaml text), declared by it (:func:`make_settings`)."""

    def build(endpoint, **overrides):
        return make_settings(tmp_path / "data", endpoint.url, **overrides)

    return build


@pytest.fixture
def streamless_settings(tmp_path: Path):
    """Settings whose endpoint nothing reads, for tests that never touch Kinesis: no
    endpoint is started for them, and a call that reached Kinesis would fail."""
    return make_settings(tmp_path / "data", "http://127.0.0.1:9")


def pytest_configure(config: pytest.Config) -> None:
    """The kinds of test (fast, spark, processes, system): kinesis_lake_tests/tiers.py;
    files run heaviest first: kinesis_lake_tests/scheduling.py."""
    tiers.register(config)
    scheduling.use_our_order(config)


@pytest.hookimpl(trylast=True)  # after tiers.py has given every test its kind
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    scheduling.heaviest_files_first(items)
