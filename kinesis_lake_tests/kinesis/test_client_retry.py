"""client.py and retry.py: the retry contract that fault tests rely on."""

from __future__ import annotations

import os
import random
import subprocess
import sys

import pytest
from botocore.exceptions import (
    ClientError,
    EndpointConnectionError,
    NoRegionError,
    ReadTimeoutError,
)

from kinesis_lake.kinesis.client import kinesis_client
from kinesis_lake.kinesis.retry import RetryPolicy, is_retryable
from kinesis_lake_tests.kinesis.fault_proxy import FaultProxy


def _client_error(code: str, status: int = 400) -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": "x"}, "ResponseMetadata": {"HTTPStatusCode": status}},
        "GetRecords",
    )


def test_full_jitter_delays_stay_within_the_exponential_ceiling() -> None:
    policy = RetryPolicy(base_delay_s=0.1, max_delay_s=1.0)
    rng = random.Random(7)
    for attempt in range(12):
        ceiling = min(1.0, 0.1 * 2**attempt)
        delays = [policy.delay(attempt, rng) for _ in range(200)]
        assert all(0.0 <= d <= ceiling for d in delays)
        # Full jitter spreads over the whole range, not just near the ceiling.
        assert min(delays) < ceiling / 4 < ceiling * 3 / 4 < max(delays)
    assert policy.delay(10_000, rng) <= 1.0


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (_client_error("ProvisionedThroughputExceededException"), True),
        (_client_error("LimitExceededException"), True),
        (_client_error("KMSThrottlingException"), True),
        (_client_error("SomethingNew", status=503), True),
        (_client_error("ResourceNotFoundException"), False),
        (_client_error("ExpiredIteratorException"), False),
        (_client_error("InvalidArgumentException"), False),
        (EndpointConnectionError(endpoint_url="http://127.0.0.1:1"), True),
        (ReadTimeoutError(endpoint_url="http://127.0.0.1:1"), True),
        (ValueError("bug"), False),
    ],
)
def test_is_retryable(error: BaseException, expected: bool) -> None:
    assert is_retryable(error) is expected


def test_a_missing_region_fails_when_the_client_is_built(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not at its first call, deep in a Spark task: each caller names its own setting."""
    monkeypatch.delenv("AWS_REGION")
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    with pytest.raises(NoRegionError):
        kinesis_client("http://127.0.0.1:1")


def test_botocore_does_not_retry_behind_our_back(proxy: FaultProxy) -> None:
    """One injected throttle must surface: our retry code, not botocore's, owns retries."""
    client = kinesis_client(proxy.url)
    proxy.inject("Kinesis_20131202.ListStreams", "throttle", 1)
    with pytest.raises(ClientError, match="ProvisionedThroughputExceededException"):
        client.list_streams()
    assert proxy.counts[("ListStreams", "throttle")] == 1
    assert "StreamNames" in client.list_streams()


_MODEL_FILES_OPENED = """
import sys
from kinesis_lake.spark.runtime import worker_daemon
worker_daemon.preload()
opened = []
sys.addaudithook(
    lambda event, args: opened.append(str(args[0]))
    if event == "open" and "botocore/data" in str(args[0])
    else None
)
from kinesis_lake.kinesis.client import kinesis_client
kinesis_client("http://127.0.0.1:9", "us-east-1")
kinesis_client("http://127.0.0.1:10", "us-east-1")
print(opened)
"""


def test_clients_built_after_the_worker_daemon_s_preload_read_no_service_model(
    tmp_path,
) -> None:
    """Every Spark task that reads a shard builds its client in a worker forked from the
    daemon, which inherits what the daemon's preload read: the Kinesis service model (a
    100 kB JSON file and its endpoint rules) is parsed once there, not again in each
    worker and for each endpoint. (Preload and clients run in one process here; a fork
    inherits the same memory.)"""
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_CONFIG_FILE": str(tmp_path / "none"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
    }
    result = subprocess.run(
        [sys.executable, "-c", _MODEL_FILES_OPENED],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert result.stdout.strip() == "[]", result.stdout
