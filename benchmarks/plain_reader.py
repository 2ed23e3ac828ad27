"""The fastest plain reader of a stream: parallel GetRecords per shard, nothing else.

It is the ceiling any consumer on the same endpoint can reach: the response JSON is
parsed, but nothing is decoded (botocore's base64 and timestamp parsers are replaced by
the identity: its default timestamp parsing alone costs ~30 us per record), no Arrow, no
files, no commits, and no call pacing (real Kinesis allows 5 GetRecords per second per
shard; kinesalite does not throttle, so pacing would only lower the ceiling). Each
worker opens its client and its shard iterator before a common start signal, so set-up
is not timed.
"""

from __future__ import annotations

import multiprocessing
import queue
import threading
import time
from typing import Any

import psutil

from benchmarks.sandbox import REGION, configure_process_env
from benchmarks.streams import kinesis


def _identity(value: Any) -> Any:
    return value


def raw_client(endpoint_url: str) -> Any:
    """A Kinesis client whose responses are parsed from JSON but not decoded further."""
    import boto3
    import botocore.session
    from botocore.config import Config

    session = botocore.session.get_session()
    session.get_component("response_parser_factory").set_parser_defaults(
        timestamp_parser=_identity, blob_parser=_identity
    )
    return boto3.Session(botocore_session=session).client(
        "kinesis",
        endpoint_url=endpoint_url,
        region_name=REGION,
        config=Config(retries={"max_attempts": 5, "mode": "standard"}),
    )


def _read_shard(
    endpoint_url: str,
    stream_name: str,
    shard_id: str,
    start: Any,
    out: Any,
    limit: int,
) -> None:
    """Worker body (thread or process): drain one shard from TRIM_HORIZON to its tip."""
    configure_process_env()
    client = raw_client(endpoint_url)
    iterator = client.get_shard_iterator(
        StreamName=stream_name, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON"
    )["ShardIterator"]
    out.put(("ready", shard_id))
    start.wait()
    cpu_started = time.thread_time()
    records = payload = calls = 0
    # Bounded: a shard of N records needs about N / limit calls; the cap is generous.
    for _ in range(100_000):
        page = client.get_records(ShardIterator=iterator, Limit=limit)
        calls += 1
        batch = page["Records"]
        records += len(batch)
        payload += sum(len(r["Data"]) * 3 // 4 for r in batch)  # still base64 text
        iterator = page.get("NextShardIterator")
        if not batch or iterator is None:
            break
    out.put(
        ("done", shard_id, records, payload, calls, time.time(), time.thread_time() - cpu_started)
    )


def _cpu(pid: int | None) -> float:
    if pid is None:
        return 0.0
    try:
        times = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return 0.0
    return times.user + times.system


def plain_read(
    endpoint_url: str,
    stream_name: str,
    *,
    workers: str,
    limit: int = 10_000,
    endpoint_pid: int | None = None,
) -> dict[str, Any]:
    """Read every shard of ``stream_name`` in parallel with ``workers`` = threads|processes.

    CPU seconds are the readers' own (per thread, or per process) and the endpoint's.
    """
    client = kinesis(endpoint_url)
    shards = [s["ShardId"] for s in client.list_shards(StreamName=stream_name)["Shards"]]
    if workers == "processes":
        context = multiprocessing.get_context("spawn")
        start: Any = context.Event()
        out: Any = context.Queue()
        runners: list[Any] = [
            context.Process(
                target=_read_shard, args=(endpoint_url, stream_name, s, start, out, limit)
            )
            for s in shards
        ]
    else:
        start = threading.Event()
        out = queue.Queue()
        runners = [
            threading.Thread(
                target=_read_shard, args=(endpoint_url, stream_name, s, start, out, limit)
            )
            for s in shards
        ]
    for runner in runners:
        runner.start()
    try:
        for _ in shards:
            out.get(timeout=120)  # "ready"
        started = time.time()
        endpoint_cpu = _cpu(endpoint_pid)
        start.set()
        done = [out.get(timeout=600) for _ in shards]
        endpoint_cpu = _cpu(endpoint_pid) - endpoint_cpu
    finally:
        for runner in runners:
            runner.join(timeout=30)
            if isinstance(runner, multiprocessing.process.BaseProcess) and runner.is_alive():
                runner.kill()
    records = sum(d[2] for d in done)
    seconds = max(d[5] for d in done) - started
    return {
        "workers": workers,
        "records": records,
        "payload_bytes": sum(d[3] for d in done),
        "calls": sum(d[4] for d in done),
        "seconds": round(seconds, 3),
        "records_per_second": round(records / seconds, 1) if seconds > 0 else None,
        "cpu_s": {
            "reader": round(sum(d[6] for d in done), 2),
            "kinesalite": round(endpoint_cpu, 2),
        },
    }
