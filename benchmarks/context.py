"""One benchmark run as the benchmarks see it: mode, sizes, endpoint, scratch, Spark.

Benchmarks share what is costly to make: the produced streams (one per record count)
and the Spark worker children (one per master), so a JVM's start is paid once per run.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.sizes import Sizes
from benchmarks.spark_worker import SparkWorker
from benchmarks.streams import produce_backlog


@dataclass
class BenchContext:
    """One benchmark run: mode, sizes, the shared endpoint, scratch space and results."""

    mode: str
    scale: float
    sizes: Sizes
    endpoint_url: str
    work_dir: Path
    results_dir: Path
    environment: dict[str, Any]
    # Measurements one benchmark makes and another compares against (e.g. our ingest
    # throughput, used by both the ceiling and the hand-written comparisons).
    shared: dict[str, Any] = field(default_factory=dict)
    endpoint_pid: int | None = None
    _streams: dict[int, str] = field(default_factory=dict)
    _workers: dict[str, Any] = field(default_factory=dict)

    def spark(self, master: str = "local[2]") -> SparkWorker:
        """The shared Spark worker child for ``master`` (started on first use)."""
        worker = self._workers.get(master)
        if worker is None or worker._process is None:
            name = re.sub(r"[^a-z0-9]+", "-", master.lower()).strip("-")
            worker = SparkWorker(self, master, f"spark-{name}").start()
            self._workers[master] = worker
        return worker

    def stop_spark(self, master: str | None = None) -> None:
        """Stop one shared Spark worker (or all): no JVM outlives its benchmarks."""
        for key in [master] if master else list(self._workers):
            worker = self._workers.pop(key, None)
            if worker is not None:
                worker.stop()

    def scratch(self, name: str) -> Path:
        path = self.work_dir / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def reset_streams(self) -> None:
        """Forget produced streams (a new endpoint starts empty)."""
        self._streams.clear()

    def stream_with(self, count: int, *, seed: int = 7) -> str:
        """A 4-shard stream holding exactly ``count`` sample events, produced once."""
        if count not in self._streams:
            name = f"bench-{count}-{os.getpid()}-{len(self._streams)}"
            produced = produce_backlog(self.endpoint_url, name, count, seed=seed)
            self.shared.setdefault("produce", []).append(produced)
            self._streams[count] = name
        return self._streams[count]
