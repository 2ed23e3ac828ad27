"""The Spark child's ``derive`` job: derived refreshes timed on raw tables of two sizes.

Builds raw tables of two sizes directly with pyiceberg, brings the derived tables up to
date once, then times ``refresh_downstream`` after each addition of the same number of
new raw rows, recording the rows each step reads (the runner side is
``benchmarks.derive_refresh``).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

from benchmarks.spark_job_kit import _settings, emit
from benchmarks.streams import SHARDS


def _raw_rows(count: int, *, first_sequence: int, start_ms: int, seed: int):
    """``count`` raw-table rows holding sample events, as ingestion would have written them.

    Event times are 10 ms apart from ``start_ms``: later additions carry later events,
    as a live stream does. Sequence numbers are unique decimal strings per shard.
    """
    import pyarrow as pa

    from kinesis_lake.iceberg.raw_table import RAW_ARROW_SCHEMA
    from kinesis_lake.kinesis.producer import sample_events

    events = sample_events(count, seed=seed, start_ms=start_ms)
    now_us = int(time.time() * 1_000_000)
    shards = [f"shardId-{i % SHARDS:012d}" for i in range(count)]
    sequences = [f"{49_000_000_000_000_000_000 + first_sequence + i:d}" for i in range(count)]
    arrivals = [(start_ms + i * 10) * 1000 for i in range(count)]
    columns = {
        "stream_name": pa.array(["bench"] * count, pa.string()),
        "shard_id": pa.array(shards, pa.string()),
        "sequence_number": pa.array(sequences, pa.string()),
        "sub_sequence_number": pa.array([0] * count, pa.int64()),
        "partition_key": pa.array([key for key, _ in events], pa.string()),
        "approximate_arrival_timestamp": pa.array(arrivals, pa.timestamp("us", tz="UTC")),
        "data": pa.array([data for _, data in events], pa.binary()),
        "aggregated": pa.array([False] * count, pa.bool_()),
        "source_error": pa.nulls(count, pa.string()),
        "ingested_at": pa.array([now_us] * count, pa.timestamp("us", tz="UTC")),
        "batch_id": pa.array([0] * count, pa.int64()),
    }
    return pa.Table.from_pydict(columns, schema=RAW_ARROW_SCHEMA)


class _ReadLog:
    """Counts the data files and rows each derive step reads (wraps ``read_table_files``).

    This is the evidence for where refresh time goes: whether a step reads only the new
    rows or rows proportional to the table.
    """

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def wrap(self, original: Callable[..., Any]) -> Callable[..., Any]:
        import inspect

        import pyarrow.parquet as pq

        @functools.wraps(original)
        def wrapper(spark, table, paths, **kwargs):
            caller = inspect.stack()[1].function
            rows = 0
            for path in paths:
                local = path.removeprefix("file://")
                rows += pq.read_metadata(local).num_rows
            self.calls.append({"step": caller, "files": len(paths), "rows": rows})
            return original(spark, table, paths, **kwargs)

        return wrapper


def _timed(log: dict[str, float], name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            log[name] = log.get(name, 0.0) + time.perf_counter() - started

    return wrapper


def cmd_derive(spark: Any, args: Any) -> dict[str, Any]:
    from kinesis_lake.iceberg.catalog import ensure_namespace
    from kinesis_lake.iceberg.raw_table import ensure_raw_table
    from kinesis_lake.pipeline import dedup, derive, routed_refresh
    from kinesis_lake.pipeline.lake import open_lake

    # Instrument (in this process only, undone afterwards) the steps refresh_downstream
    # runs, to see where the time goes; the code path itself is unchanged.
    read_log = _ReadLog()
    step_seconds: dict[str, float] = {}
    originals = {
        (module, name): getattr(module, name)
        for module, name in (
            (routed_refresh, "read_table_files"),
            (dedup, "read_table_files"),
            (derive, "refresh_routed"),
            (derive, "refresh_aggregate"),
            (routed_refresh, "deduplicate"),
        )
    }
    for (module, name), original in originals.items():
        wrapped = (
            read_log.wrap(original)
            if name == "read_table_files"
            else _timed(step_seconds, name, original)
        )
        setattr(module, name, wrapped)

    sizes = {"small": args.small, "large": args.large}
    # All events fall on one UTC day (01:00 onwards, 10 ms apart): a busy stream's day,
    # and the day partition the duplicate check and the window counts look into.
    day_ms = int(time.time() * 1000) // 86_400_000 * 86_400_000
    base_ms = day_ms + 3_600_000
    next_ms = base_ms + args.large * 10 + 60_000
    tables = {}
    build: dict[str, Any] = {}
    try:
        for label, size in sizes.items():
            settings = _settings(args, f"{args.namespace}_{label}")
            catalog = open_lake(settings)
            ensure_namespace(catalog, settings.namespace)
            raw = ensure_raw_table(catalog, settings.raw_table)
            started = time.perf_counter()
            for offset in range(0, size, 100_000):
                chunk = min(100_000, size - offset)
                raw.append(
                    _raw_rows(
                        chunk,
                        first_sequence=offset,
                        start_ms=base_ms + offset * 10,
                        seed=offset + 1,
                    )
                )
            append_s = time.perf_counter() - started
            started = time.perf_counter()
            derive.refresh_downstream(spark, settings)
            build[label] = {
                "raw_rows": size,
                "append_s": round(append_s, 2),
                "first_refresh_s": round(time.perf_counter() - started, 2),
            }
            tables[label] = (settings, size)
            emit("BENCH_EVENT", {"built": label, **build[label]})
        refreshes = []
        for round_index in range(args.rounds):
            # Interleaved (small, large, small, large...): drift in machine load hits both.
            for label, (settings, size) in tables.items():
                raw = open_lake(settings).load_table(settings.raw_table)
                raw.append(
                    _raw_rows(
                        args.new_rows,
                        first_sequence=10_000_000 + round_index * args.new_rows,
                        start_ms=next_ms + round_index * args.new_rows * 10,
                        seed=1_000 + round_index,
                    )
                )
                read_log.calls.clear()
                step_seconds.clear()
                started = time.perf_counter()
                result = derive.refresh_downstream(spark, settings)
                seconds = time.perf_counter() - started
                refreshes.append(
                    {
                        "table": label,
                        "raw_rows_before": size + round_index * args.new_rows,
                        "round": round_index,
                        "seconds": round(seconds, 3),
                        "parsed_rows_written": result.tables["events"].rows_written,
                        "quarantined_rows_written": result.quarantine.rows_written,
                        "raw_rows_read": result.tables["events"].source_rows_read,
                        "windows_recomputed": result.windows_recomputed,
                        "reads": list(read_log.calls),
                        "step_seconds": {k: round(v, 3) for k, v in step_seconds.items()},
                    }
                )
                emit("BENCH_EVENT", refreshes[-1])
    finally:
        for (module, name), original in originals.items():
            setattr(module, name, original)
    return {"build": build, "refreshes": refreshes}
