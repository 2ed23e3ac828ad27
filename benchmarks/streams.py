"""The benchmarks' Kinesis streams: filling them, reading them, pointing Settings at them."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.sandbox import REGION

if TYPE_CHECKING:
    from benchmarks.context import BenchContext

SHARDS = 4


def kinesis(endpoint_url: str):
    """A plain boto3 Kinesis client with botocore's own retries (benchmark plumbing)."""
    import boto3
    from botocore.config import Config

    return boto3.client(
        "kinesis",
        endpoint_url=endpoint_url,
        region_name=REGION,
        config=Config(retries={"max_attempts": 5, "mode": "standard"}, max_pool_connections=16),
    )


def _chunks(count: int, size: int) -> Iterator[tuple[int, int]]:
    start = 0
    while start < count:
        yield start, min(size, count - start)
        start += size


def produce_backlog(
    endpoint_url: str, stream_name: str, count: int, *, seed: int = 7, threads: int = 2
) -> dict[str, Any]:
    """Create a 4-shard stream and fill it with ``count`` ~200-byte sample events.

    Uses the project's own producer (partial-failure handling included) so that the data
    is what ``kinesis-lake produce`` writes. Events are generated in chunks so a 2M
    backlog never sits in memory at once, and two threads keep kinesalite busy while
    the next chunk is being generated.
    """
    from concurrent.futures import ThreadPoolExecutor

    from kinesis_lake.kinesis.client import kinesis_client
    from kinesis_lake.kinesis.producer import put_records, sample_events
    from kinesis_lake.kinesis.streams import ensure_stream

    client = kinesis_client(endpoint_url, REGION, max_attempts=3)
    ensure_stream(client, stream_name, SHARDS)
    base_ms = int(time.time() * 1000) - count * 10
    payload_bytes = 0
    lock = threading.Lock()

    def send(chunk: tuple[int, int]) -> int:
        nonlocal payload_bytes
        start, size = chunk
        events = sample_events(size, seed=seed * 1_000_003 + start, start_ms=base_ms + start * 10)
        with lock:
            payload_bytes += sum(len(data) for _, data in events)
        local = kinesis_client(endpoint_url, REGION, max_attempts=3)
        return put_records(local, stream_name, events).sent

    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        sent = sum(pool.map(send, _chunks(count, 20_000)))
    seconds = time.perf_counter() - started
    if sent != count:
        raise RuntimeError(f"produced {sent} of {count} records into {stream_name}")
    return {
        "stream": stream_name,
        "records": count,
        "seconds": round(seconds, 2),
        "records_per_second": round(count / seconds),
        "mean_payload_bytes": round(payload_bytes / max(1, count), 1),
    }


def settings_for(
    ctx: BenchContext,
    stream_name: str,
    namespace: str,
    *,
    data_dir: Path | None = None,
    spark_master: str = "local[2]",
    **overrides: Any,
):
    """Settings as the tests build them: fresh namespace and checkpoint, trim horizon."""
    from kinesis_lake.config import Settings

    return Settings(
        stream_name=stream_name,
        endpoint_url=ctx.endpoint_url,
        region=REGION,
        shard_count=SHARDS,
        starting_position="trim_horizon",
        data_dir=data_dir or ctx.scratch("lake"),
        namespace=namespace,
        spark_master=spark_master,
        **overrides,
    )


def settings_env(settings: Any) -> dict[str, str]:
    """Environment making ``Settings.from_env()`` equal ``settings`` in a child process."""
    return {**os.environ, **settings.to_env()}
