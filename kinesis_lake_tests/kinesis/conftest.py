"""Real local Kinesis endpoints for the kinesis library tests (nothing of ours is mocked).

One kinesalite and one moto server per test session, on 127.0.0.1; each test works on its
own freshly named stream, so tests do not see each other's records.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest

from kinesis_lake.kinesis.client import KinesisClient, kinesis_client
from kinesis_lake.kinesis.endpoint import LocalKinesisEndpoint
from kinesis_lake.kinesis.streams import ensure_stream
from kinesis_lake_tests.kinesis.fault_proxy import FaultProxy


@pytest.fixture
def endpoint(any_endpoint: LocalKinesisEndpoint) -> LocalKinesisEndpoint:
    """Each test using this runs against both endpoints (the root conftest's pair)."""
    return any_endpoint


@pytest.fixture
def kinesalite(kinesalite_endpoint: LocalKinesisEndpoint) -> LocalKinesisEndpoint:
    return kinesalite_endpoint


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
