"""Real local Kinesis endpoints for the kinesis library tests (nothing of ours is mocked).

One kinesalite and one moto server per test session, on 127.0.0.1; each test works on its
own freshly named stream, so tests do not see each other's records.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest

from kinesis_lake.kinesis.client import KinesisClient, kinesis_client
from kinesis_lake.kinesis.endpoint import LocalKinesisEndpoint, resolve_endpoint_kind
from kinesis_lake.kinesis.fault_proxy import FaultProxy
from kinesis_lake.kinesis.streams import ensure_stream


@pytest.fixture(autouse=True)
def fake_aws_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """Placeholder credentials and a fixed region; never a real profile or metadata service."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "kinesis-lake-test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "kinesis-lake-test")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)


def _start(kind: str) -> LocalKinesisEndpoint:
    try:
        resolve_endpoint_kind(kind)
    except FileNotFoundError as error:
        pytest.skip(str(error))
    return LocalKinesisEndpoint(kind).start()


@pytest.fixture(scope="session")
def kinesalite() -> Iterator[LocalKinesisEndpoint]:
    endpoint = _start("kinesalite")
    yield endpoint
    endpoint.stop()


@pytest.fixture(scope="session")
def moto() -> Iterator[LocalKinesisEndpoint]:
    endpoint = _start("moto")
    yield endpoint
    endpoint.stop()


@pytest.fixture(params=["kinesalite", "moto"])
def endpoint(request: pytest.FixtureRequest) -> LocalKinesisEndpoint:
    """Each test using this runs against both endpoints."""
    return request.getfixturevalue(request.param)


@pytest.fixture
def client(endpoint: LocalKinesisEndpoint) -> KinesisClient:
    return kinesis_client(endpoint.url, timeout_s=10)


@pytest.fixture
def new_stream() -> Callable[..., str]:
    """Create a uniquely named, ACTIVE stream on the given client; returns its name."""

    def create(client: KinesisClient, shard_count: int = 1) -> str:
        name = f"test-{uuid.uuid4().hex[:12]}"
        ensure_stream(client, name, shard_count)
        return name

    return create


@pytest.fixture
def proxy(endpoint: LocalKinesisEndpoint) -> Iterator[FaultProxy]:
    fault_proxy = FaultProxy(endpoint.url).start()
    yield fault_proxy
    fault_proxy.stop()
