"""The Spark side of the benchmarks: a child process holding one Spark session.

Why a child process: a SparkContext's master cannot change within a JVM's life cleanly,
the runner must be able to sample the memory and CPU of the whole driver tree (Python
driver, JVM, Python workers) and kill it on a timeout, and the runner's own threads
(producer, table poller) must not share a GIL with the Spark driver.

Why one child for several benchmarks: on a 2-core machine a JVM start plus the first
micro-batch's Python-worker start-up costs tens of seconds; paying it once per master
keeps ``make bench`` within its time budget. Every measurement still starts its own
query (or refresh) from scratch; only the JVM and the idle Python workers are shared.

Protocol: the child prints ``BENCH_READY`` once its session is up, then reads one JSON
command per line on stdin (``{"command": ..., "args": {...}}``). While a command runs it
may print ``BENCH_EVENT <json>``; it ends with ``BENCH_RESULT <json>`` or
``BENCH_ERROR <json>``. End of input (or ``{"command": "exit"}``) stops Spark and exits.

Commands:

* ``ingest``: ``run_ingestion`` once per label in ``runs`` (each into its own namespace,
  all reading ``stream`` from TRIM_HORIZON), after an optional warm-up run on a small
  stream of its own (``warmup_stream``).
* ``continuous``: ``run_continuous`` with a processing-time trigger until ``stop_file``
  appears (or ``max_seconds`` pass).
* ``derive``: builds raw tables of two sizes directly with pyiceberg, brings the derived
  tables up to date once, then times ``refresh_downstream`` after each addition of the
  same number of new raw rows.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from benchmarks.sandbox import REGION, configure_process_env
from benchmarks.streams import SHARDS

configure_process_env()

from pyspark.sql.streaming import StreamingQueryListener  # noqa: E402

from kinesis_lake.config import Settings  # noqa: E402

_EMIT_LOCK = threading.Lock()


def emit(kind: str, payload: Any = None) -> None:
    """One protocol line on stdout (listener callbacks emit from other threads)."""
    line = kind if payload is None else f"{kind} {json.dumps(payload, default=str)}"
    with _EMIT_LOCK:
        print(line, flush=True)


class ProgressRecorder(StreamingQueryListener):
    """Keeps every progress event per query name: Spark's own per-batch durations."""

    def __init__(self, *, announce: bool = False) -> None:
        self.announce = announce  # also emit every progress as a BENCH_EVENT
        self.progress: dict[str, list[dict[str, Any]]] = {}
        self.terminated: set[str] = set()
        self.spark: Any = None
        self._lock = threading.Lock()

    def onQueryStarted(self, event) -> None:
        pass

    def onQueryProgress(self, event) -> None:
        progress = event.progress
        entry = {
            "batchId": progress.batchId,
            "numInputRows": progress.numInputRows,
            "durationMs": dict(progress.durationMs),
            "timestamp": progress.timestamp,
        }
        with self._lock:
            self.progress.setdefault(progress.name, []).append(entry)
        if self.announce:
            emit("BENCH_EVENT", {"progress": entry["batchId"], "rows": entry["numInputRows"]})

    def onQueryIdle(self, event) -> None:
        pass

    def onQueryTerminated(self, event) -> None:
        with self._lock:
            self.terminated.add(str(event.id))

    def forget(self) -> None:
        """Detach from the session (one recorder per command)."""
        if self.spark is not None:
            self.spark.streams.removeListener(self)

    def take(self, name: str, *, settle_s: float = 3.0) -> list[dict[str, Any]]:
        """Events of query ``name``; waits briefly because listener calls are asynchronous."""
        deadline = time.monotonic() + settle_s
        count = -1
        while time.monotonic() < deadline:
            with self._lock:
                now = len(self.progress.get(name, []))
            if now == count and now > 0:
                break
            count = now
            time.sleep(0.5)
        with self._lock:
            return sorted(self.progress.get(name, []), key=lambda p: p["batchId"])


def _settings(args: Any, namespace: str, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "stream_name": args.stream,
        "endpoint_url": args.endpoint,
        "region": REGION,
        "shard_count": SHARDS,
        "starting_position": "trim_horizon",
        "data_dir": Path(args.data_dir),
        "namespace": namespace,
        "spark_master": args.master,
    }
    values.update(overrides)
    return Settings(**values)


def _table_shape(settings: Settings, table_name: str) -> dict[str, int]:
    from kinesis_lake.pipeline.lake import open_lake

    table = open_lake(settings).load_table(table_name)
    tasks = list(table.scan().plan_files()) if table.current_snapshot() else []
    return {
        "data_files": len(tasks),
        "snapshots": len(table.metadata.snapshots),
        "rows": sum(t.file.record_count for t in tasks),
        "bytes": sum(t.file.file_size_in_bytes for t in tasks),
    }


def _storage(settings: Settings) -> dict[str, int]:
    """What the run left beside the table: Spark's checkpoint and the source's progress
    records (one JSON per shard per epoch), in files and bytes."""
    from kinesis_lake.pipeline.ingest_query import checkpoint_location, source_metadata_path

    def files(root: str, pattern: str = "*") -> list[Path]:
        return [p for p in Path(root).rglob(pattern) if p.is_file()]

    checkpoint = files(checkpoint_location(settings))
    offsets = [p for p in checkpoint if p.parent.name == "offsets" and p.name.isdigit()]
    progress = [p for p in files(source_metadata_path(settings), "*.json")]
    records = [p for p in progress if p.name != "status.json"]
    return {
        "checkpoint_files": len(checkpoint),
        "checkpoint_bytes": sum(p.stat().st_size for p in checkpoint),
        "offset_log_entries": len(offsets),
        "largest_offset_log_entry_bytes": max((p.stat().st_size for p in offsets), default=0),
        "progress_records": len(records),
        "progress_record_bytes": sum(p.stat().st_size for p in records),
        "status_bytes": sum(p.stat().st_size for p in progress if p.name == "status.json"),
    }


def _recorder(spark: Any, *, announce: bool = False) -> ProgressRecorder:
    recorder = ProgressRecorder(announce=announce)
    spark.streams.addListener(recorder)
    recorder.spark = spark
    return recorder


def _session(master: str):
    from kinesis_lake.spark.runtime.session import build_spark_session

    started = time.perf_counter()
    spark = build_spark_session(master, app_name="kinesis-lake-bench")
    # Touch the JVM once so "session start" includes executor registration, not just
    # the gateway (local-cluster executors register asynchronously).
    spark.range(1).count()
    return spark, time.perf_counter() - started


# ----------------------------------------------------------------- ingest


def cmd_ingest(spark: Any, args: Any) -> dict[str, Any]:
    from kinesis_lake.pipeline.ingest import run_ingestion

    recorder = _recorder(spark)
    runs = []
    labels = args.runs.split(",")
    if args.warmup_stream:
        labels.insert(0, "warmup")
    try:
        for label in labels:
            overrides: dict[str, Any] = {}
            if args.max_records_per_shard:
                overrides["max_records_per_shard"] = args.max_records_per_shard
            if args.max_write_tasks is not None:
                overrides["max_write_tasks"] = args.max_write_tasks
            if label == "warmup":
                # A small stream of its own: starts the Python workers and the query
                # machinery once, so the measured runs see the steady state.
                overrides["stream_name"] = args.warmup_stream
            settings = _settings(args, f"{args.namespace}_{label}", **overrides)
            started = time.perf_counter()
            result = run_ingestion(spark, settings)
            wall = time.perf_counter() - started
            progress = recorder.take(f"ingest_{settings.namespace}_raw_events")
            runs.append(
                {
                    "label": label,
                    "rows": result.rows,
                    "seconds": round(wall, 3),
                    "rows_per_second": round(result.rows / wall, 1) if wall else None,
                    "batches": result.batches,
                    "progress": progress,
                    "table": _table_shape(settings, settings.raw_table),
                    "storage": _storage(settings),
                }
            )
            emit("BENCH_EVENT", {"run": label, "rows": result.rows, "seconds": round(wall, 2)})
    finally:
        recorder.forget()
    return {"runs": runs}


# ----------------------------------------------------------------- continuous


def cmd_continuous(spark: Any, args: Any) -> dict[str, Any]:
    from kinesis_lake.iceberg.raw_table import ensure_raw_table
    from kinesis_lake.pipeline.ingest import run_continuous
    from kinesis_lake.pipeline.ingest_report import BatchReport

    settings = _settings(args, args.namespace)
    ensure_raw_table(settings)
    stop = threading.Event()
    stop_file = Path(args.stop_file)
    deadline = time.monotonic() + args.max_seconds

    def watch() -> None:
        while not stop.wait(0.5):
            if stop_file.exists() or time.monotonic() > deadline:
                stop.set()

    threading.Thread(target=watch, name="stop-watch", daemon=True).start()
    batches: list[dict[str, Any]] = []

    def on_batch(report: BatchReport) -> None:
        entry = {
            "batch_id": report.batch_id,
            "rows": report.rows,
            "seconds": report.seconds,
            "reported_at": time.time(),
        }
        batches.append(entry)
        emit("BENCH_EVENT", entry)

    recorder = _recorder(spark, announce=True)
    emit("BENCH_EVENT", {"started": True})
    try:
        result = run_continuous(
            spark, settings, stop=stop, processing_time=args.trigger, on_batch=on_batch
        )
    finally:
        stop.set()
        progress = recorder.take(f"ingest_{settings.namespace}_raw_events", settle_s=2.0)
        recorder.forget()
    return {
        "trigger": args.trigger,
        "rows": result.rows,
        "batches": batches,
        "progress": progress,
    }


# ----------------------------------------------------------------- derive


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


# ----------------------------------------------------------------- upsert

_UPSERT_LAKE = """\
tables:
  - name: profile_changes
    fields:
      - {name: user_id, type: string, required: true}
      - {name: version, type: long, required: true}
      - {name: op, type: string}
      - {name: email, type: string}
      - {name: plan, type: string}
derived:
  - name: user_profiles
    from: profile_changes
    upsert: {key: user_id, version: version, delete: {field: op, equals: delete}}
"""


def _profile_rows(keys: list[int], version: int, first_sequence: int, schema: Any):
    """Parsed ``profile_changes`` rows (as derive writes them) for the users ``keys``."""
    import pyarrow as pa

    count = len(keys)
    now_us = int(time.time() * 1_000_000)
    columns = {
        "stream_name": ["bench"] * count,
        "shard_id": [f"shardId-{k % SHARDS:012d}" for k in keys],
        "sequence_number": [f"{49_000_000_000 + first_sequence + i:d}" for i in range(count)],
        "sub_sequence_number": [0] * count,
        "approximate_arrival_timestamp": [now_us] * count,
        "user_id": [f"user-{k:09d}" for k in keys],
        "version": [version] * count,
        "op": ["update"] * count,
        "email": [f"user-{k}@example.com" for k in keys],
        "plan": [("free", "pro", "team")[k % 3] for k in keys],
        "event_timestamp": [now_us] * count,
        "parsed_at": [now_us] * count,
    }
    return pa.Table.from_pydict(
        {name: pa.array(values, schema.field(name).type) for name, values in columns.items()},
        schema=schema,
    )


def _written(table: Any, source_snapshot_id: int | None) -> dict[str, int]:
    """What the refresh's commits wrote and removed: summed over its snapshots (a
    copy-on-write refresh commits a delete and an append, merge-on-read one snapshot)."""
    from kinesis_lake.iceberg.incremental import SOURCE_SNAPSHOT_PROPERTY

    totals = {
        "added-files-size": 0,
        "deleted-data-files": 0,
        "deleted-records": 0,
        "added-position-deletes": 0,
    }
    for snapshot in table.metadata.snapshots:
        summary = snapshot.summary
        if summary is None or summary.get(SOURCE_SNAPSHOT_PROPERTY) != str(source_snapshot_id):
            continue
        for key in totals:
            totals[key] += int(summary.get(key) or 0)
    return totals


def _read_seconds(table: Any, times: int = 3) -> float:
    """Median wall time of a full pyiceberg read of ``table`` (deletes applied)."""
    from statistics import median

    seconds = []
    for _ in range(times):
        started = time.perf_counter()
        table.scan().to_arrow()
        seconds.append(time.perf_counter() - started)
    return round(median(seconds), 3)


def cmd_upsert(spark: Any, args: Any) -> dict[str, Any]:
    """Upsert tables of ``small`` and ``large`` keys, each merge-on-read (the default) and
    copy-on-write; per round, the same ``new_rows`` updates of uniformly random existing
    keys are appended to each source and one refresh of each table is timed. Then the
    small tables get refreshes up to ``read_refreshes`` in all, and a full read of each
    is timed: copy-on-write, merge-on-read as left, and after maintenance folded its
    deletes."""
    import random

    import yaml

    from kinesis_lake.events.declaration_file import declaration_from_dict
    from kinesis_lake.events.tables import parsed_table_schema
    from kinesis_lake.iceberg.arrow_schema import table_arrow_schema
    from kinesis_lake.iceberg.catalog import ensure_namespace
    from kinesis_lake.iceberg.maintenance import compact
    from kinesis_lake.iceberg.tables import ensure_table
    from kinesis_lake.pipeline.lake import open_lake
    from kinesis_lake.pipeline.upsert import UPDATE_MODE, ensure_upsert_tables, refresh_upsert

    lake = declaration_from_dict(yaml.safe_load(_UPSERT_LAKE))
    (spec,) = lake.derived
    schema = parsed_table_schema(lake.table("profile_changes").schema)
    rng = random.Random(7)
    tables = {}
    build: dict[str, Any] = {}
    sizes = {"small": args.small, "large": args.large}
    for label, size in [
        (f"{mode}_{name}", n) for name, n in sizes.items() for mode in ("mor", "cow")
    ]:
        settings = _settings(args, f"{args.namespace}_{label}")
        catalog = open_lake(settings)
        ensure_namespace(catalog, settings.namespace)
        source = ensure_table(catalog, settings.table_identifier("profile_changes"), schema)
        arrow = table_arrow_schema(source.schema())
        started = time.perf_counter()
        for offset in range(0, size, 100_000):
            keys = list(range(offset, min(size, offset + 100_000)))
            source.append(_profile_rows(keys, 1, offset, arrow))
        append_s = time.perf_counter() - started
        started = time.perf_counter()
        upsert = ensure_upsert_tables(catalog, settings, spec, source)
        mode = "merge-on-read" if label.startswith("mor") else "copy-on-write"
        for table in (upsert.table, upsert.tombstones):
            with table.transaction() as tx:
                tx.set_properties(
                    {"write.target-file-size-bytes": str(args.file_bytes), UPDATE_MODE: mode}
                )
        refresh_upsert(spark, spec, source, ensure_upsert_tables(catalog, settings, spec, source))
        build[label] = {
            "keys": size,
            "mode": mode,
            "append_s": round(append_s, 2),
            "first_refresh_s": round(time.perf_counter() - started, 2),
            **_table_shape(settings, settings.table_identifier("user_profiles")),
        }
        tables[label] = (settings, size, arrow)
        emit("BENCH_EVENT", {"built": label, **build[label]})
    refreshes = []
    done = dict.fromkeys(tables, 0)

    def refresh(label: str, round_index: int) -> dict[str, Any]:
        settings, size, arrow = tables[label]
        catalog = open_lake(settings)
        source = catalog.load_table(settings.table_identifier("profile_changes"))
        keys = rng.sample(range(size), args.new_rows)
        source.append(_profile_rows(keys, round_index + 2, 10**9 + round_index * 10**6, arrow))
        upsert = ensure_upsert_tables(catalog, settings, spec, source)
        started = time.perf_counter()
        result = refresh_upsert(spark, spec, source, upsert)
        seconds = time.perf_counter() - started
        identifier = settings.table_identifier("user_profiles")
        written = _written(catalog.load_table(identifier), result.source_snapshot_id)
        done[label] += 1
        return {
            "table": label,
            "keys": size,
            "round": round_index,
            "seconds": round(seconds, 3),
            "keys_touched": result.rows_written,
            "bytes_written": written["added-files-size"],
            "files_rewritten": written["deleted-data-files"],
            "rows_rewritten": written["deleted-records"],
            "rows_deleted_by_position": written["added-position-deletes"],
            "data_files": _table_shape(settings, identifier)["data_files"],
        }

    for round_index in range(args.rounds):
        for label in tables:
            refreshes.append(refresh(label, round_index))
            emit("BENCH_EVENT", refreshes[-1])
    reads: dict[str, Any] = {}
    for label in ("mor_small", "cow_small"):
        started = time.perf_counter()
        while done[label] < args.read_refreshes:
            refresh(label, done[label])
        settings = tables[label][0]
        table = open_lake(settings).load_table(settings.table_identifier("user_profiles"))
        reads[label] = {
            "refreshes": done[label],
            "refresh_all_s": round(time.perf_counter() - started, 1),
            "read_s": _read_seconds(table),
            "rows": len(table.scan().to_arrow()),
            **_table_shape(settings, settings.table_identifier("user_profiles")),
        }
        emit("BENCH_EVENT", {"read": label, **reads[label]})
    settings = tables["mor_small"][0]
    table = open_lake(settings).load_table(settings.table_identifier("user_profiles"))
    started = time.perf_counter()
    report = compact(table, target_file_size_bytes=args.file_bytes)
    reads["mor_small_maintained"] = {
        "maintenance_s": round(time.perf_counter() - started, 2),
        "delete_files_folded": report.delete_files_folded,
        "read_s": _read_seconds(table),
        "rows": len(table.scan().to_arrow()),
        **_table_shape(settings, settings.table_identifier("user_profiles")),
    }
    emit("BENCH_EVENT", {"read": "mor_small_maintained", **reads["mor_small_maintained"]})
    return {"build": build, "refreshes": refreshes, "reads": reads}


# ----------------------------------------------------------------- entry point

_COMMANDS: dict[str, Callable[[Any, Any], dict[str, Any]]] = {
    "ingest": lambda spark, a: cmd_ingest(spark, a),
    "continuous": lambda spark, a: cmd_continuous(spark, a),
    "derive": lambda spark, a: cmd_derive(spark, a),
    "upsert": lambda spark, a: cmd_upsert(spark, a),
}

_DEFAULTS: dict[str, Any] = {
    "stream": "unused",
    "endpoint": None,
    "namespace": "bench",
    "runs": "warm",
    "warmup_stream": "",
    "max_records_per_shard": 0,
    "max_write_tasks": None,  # the setting's default: tasks sized by the data
    "trigger": "1 second",
    "stop_file": "",
    "max_seconds": 600.0,
    "small": 10_000,
    "large": 100_000,
    "new_rows": 10_000,
    "rounds": 2,
    "file_bytes": 8 * 1024 * 1024,
}


def serve(master: str) -> None:
    """Start the session, then run commands from stdin until it closes."""
    spark, session_s = _session(master)
    emit("BENCH_READY", {"master": master, "session_start_s": round(session_s, 3)})
    try:
        for line in sys.stdin:
            if not line.strip():
                continue
            request = json.loads(line)
            if request.get("command") == "exit":
                break
            args = SimpleNamespace(**{**_DEFAULTS, **request.get("args", {}), "master": master})
            try:
                result = _COMMANDS[request["command"]](spark, args)
            except Exception as error:  # reported to the runner, which fails the benchmark
                emit(
                    "BENCH_ERROR",
                    {"error": f"{type(error).__name__}: {error}", "trace": traceback.format_exc()},
                )
                continue
            emit("BENCH_RESULT", {**result, "master": master, "session_start_s": session_s})
    finally:
        spark.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--master", default="local[2]")
    serve(parser.parse_args(argv).master)


if __name__ == "__main__":
    main()
