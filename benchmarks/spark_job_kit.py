"""What every job in the Spark child (``benchmarks.spark_job``) uses.

The protocol's output line (``emit``), Spark's own per-batch progress (``ProgressRecorder``),
a job's ``Settings`` for its namespace, and the shape of the table it wrote: shared by the
jobs, so each job's module holds only its own measurement.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

from pyspark.sql.streaming import StreamingQueryListener

from benchmarks.sandbox import REGION
from benchmarks.streams import SHARDS
from kinesis_lake.config import Settings

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


def _recorder(spark: Any, *, announce: bool = False) -> ProgressRecorder:
    recorder = ProgressRecorder(announce=announce)
    spark.streams.addListener(recorder)
    recorder.spark = spark
    return recorder
