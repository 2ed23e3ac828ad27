"""Benchmark 3: freshness in continuous mode, from send to visible in a table scan.

A producer in this process sends ~1,000 records/s (one PutRecords every 100 ms) into a
fresh 4-shard stream, stamping each payload with its send time (``sent_ms``) right
before the call. ``run_continuous`` (processing-time trigger) runs in the shared Spark
worker child (``local[2]``). A poller in this process reloads the raw table every 100 ms
and notes when each snapshot first becomes visible. Afterwards every committed row is
matched to the snapshot that made it visible (through its ``batch_id``), and

    latency = time the poller first saw that snapshot - sent_ms.

That is what a reader polling the table experiences (it includes up to one poll
interval). ``commit_latency`` uses the snapshot's own commit timestamp instead: the
lower bound. The query starts on an empty stream and the producer starts only after its
first micro-batch has run: that batch pays the query's Python-worker start-up, and its
duration is reported as ``first_batch_s``. Records sent in the first seconds of
production (the warm-up) are reported apart from the steady state. The first trigger is
measured three times in a row, each run reported, and judged on its worst run.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.context import BenchContext
from benchmarks.machine import load_now
from benchmarks.sandbox import REGION
from benchmarks.spark_worker import cpu_delta
from benchmarks.stats import percentile, phase_medians, verdict
from benchmarks.streams import SHARDS

NAME = "freshness"
SPARK_MASTERS = ("local[2]",)
TARGET_P99_S = 1.0
HEADLINE_RUNS = 3  # the target: p99 <= 1 s in three consecutive runs
POLL_S = 0.1
TICK_S = 0.1
MAX_RUN_S = 1800.0
MAINTAIN_EVERY_S = 10.0


class Producer:
    """Sends ``rate`` records/s in ticks of ``TICK_S``; each payload carries its send time."""

    def __init__(self, endpoint_url: str, stream: str, rate: int, max_seconds: float) -> None:
        from kinesis_lake.kinesis.client import kinesis_client
        from kinesis_lake.kinesis.producer import sample_events

        self._client = kinesis_client(endpoint_url, REGION, max_attempts=3)
        self._stream = stream
        self._per_tick = max(1, round(rate * TICK_S))
        # A pool of events reused round-robin; sent_ms makes every payload distinct.
        self._events = sample_events(self._per_tick * 100, seed=11)
        self._max_ticks = max(1, round(max_seconds / TICK_S))
        self._stop = threading.Event()
        self.sent = 0
        self.late_ticks = 0
        self.stopped = threading.Event()
        self.error: BaseException | None = None

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        from kinesis_lake.kinesis.producer import put_records

        try:
            next_at = time.monotonic()
            for tick in range(self._max_ticks):  # bounded even if nobody stops it
                if self._stop.is_set():
                    break
                delay = next_at - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                else:
                    self.late_ticks += 1
                first = (tick % 100) * self._per_tick
                chunk = self._events[first : first + self._per_tick]
                sent_ms = int(time.time() * 1000)
                stamp = f',"sent_ms":{sent_ms}}}'.encode()
                entries = [(key, data[:-1] + stamp) for key, data in chunk]
                self.sent += put_records(self._client, self._stream, entries).sent
                next_at += TICK_S
        except BaseException as error:  # reported by the benchmark, never swallowed
            self.error = error
        finally:
            self.stopped.set()


class Poller:
    """Notes when each raw-table snapshot first becomes visible to a fresh table load."""

    def __init__(self, data_dir: Path, table_name: str) -> None:
        self._data_dir = data_dir
        self._table_name = table_name
        self.first_seen: dict[int, float] = {}
        self.batches: dict[int, tuple[int, int]] = {}
        """batch id -> (snapshot id, commit ms), kept as seen: maintenance expires
        snapshots while the measurement runs."""
        self.rows_visible = 0
        self.data_files_max = 0
        self.files_added: dict[int, int] = {}  # the sink's snapshots: data files each added
        self.polls = 0
        self._stop = threading.Event()

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        from kinesis_lake.iceberg.catalog import open_catalog

        catalog = open_catalog("kinesis_lake", data_dir=self._data_dir)
        deadline = time.monotonic() + MAX_RUN_S  # bounded even if nobody stops it
        while not self._stop.is_set() and time.monotonic() < deadline:
            self.polls += 1
            try:
                table = catalog.load_table(self._table_name)
            except Exception:
                table = None  # not created yet
            seen_at = time.time()
            if table is not None:
                self._note(table, seen_at)
            self._stop.wait(POLL_S)

    def _note(self, table: Any, seen_at: float) -> None:
        snapshot = table.current_snapshot()
        if snapshot is None or snapshot.snapshot_id in self.first_seen:
            return
        self.first_seen[snapshot.snapshot_id] = seen_at
        summary = snapshot.summary or {}
        self.rows_visible = int(summary.get("total-records", 0))
        self.data_files_max = max(self.data_files_max, int(summary.get("total-data-files", 0)))
        self.batches.update(batch_snapshots(table))
        for listed in table.metadata.snapshots:
            batch = listed.summary.get("kinesis-lake.batch-id") if listed.summary else None
            if batch is not None:
                self.files_added[listed.snapshot_id] = int(
                    listed.summary.get("added-data-files", 0)
                )


class Maintainer:
    """The ``iceberg_maintenance`` job's pass over the raw table (compact, expire, remove
    orphans), every ``MAINTAIN_EVERY_S`` while the stream is being written, so the
    latency is measured with the data files kept bounded, as the target asks. Expiry
    keeps the last snapshots only (a continuous writer commits twice a second)."""

    def __init__(self, data_dir: Path, stream: str, namespace: str) -> None:
        from kinesis_lake.config import Settings

        self._settings = Settings(stream_name=stream, data_dir=data_dir, namespace=namespace)
        self._stop = threading.Event()
        self.passes: list[Any] = []
        self.error: BaseException | None = None

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        from kinesis_lake.pipeline.maintain import MaintenancePolicy, run_maintenance

        policy = MaintenancePolicy(snapshot_max_age_hours=0.0)
        deadline = time.monotonic() + MAX_RUN_S
        try:
            while not self._stop.wait(MAINTAIN_EVERY_S) and time.monotonic() < deadline:
                self.passes.append(run_maintenance(self._settings, "raw_events", policy))
        except BaseException as error:  # reported by the benchmark, never swallowed
            self.error = error

    def summary(self) -> dict[str, Any]:
        seconds = sorted(p.seconds for p in self.passes)
        return {
            "every_s": MAINTAIN_EVERY_S,
            "passes": len(self.passes),
            "files_rewritten": sum(p.files_rewritten for p in self.passes),
            "snapshots_expired": sum(p.snapshots_expired for p in self.passes),
            "data_files_after_each": [p.files_after for p in self.passes],
            "seconds_p50": percentile(seconds, 50),
        }


@dataclass(frozen=True)
class RecordLatency:
    sent_s: float
    seen_s: float  # first poll that showed the record's snapshot - sent
    committed_s: float  # the snapshot's commit timestamp - sent


@dataclass(frozen=True)
class Visibility:
    records: list[RecordLatency]
    unseen: int  # rows whose snapshot no poll saw


def batch_snapshots(table: Any) -> dict[int, tuple[int, int]]:
    """batch id -> (snapshot id, commit ms) of the sink's snapshots ``table`` still lists."""
    found = {}
    for snapshot in table.metadata.snapshots:
        summary = snapshot.summary
        batch = summary.get("kinesis-lake.batch-id") if summary else None
        if batch is not None:
            found[int(batch)] = (snapshot.snapshot_id, snapshot.timestamp_ms)
    return found


def visibility(table: Any, poller: Poller) -> Visibility:
    """Every committed row matched to the first poll that showed its snapshot.

    Rows find their snapshot through ``batch_id`` (one writer per table). Two commits
    within one poll: the row became visible when the poller saw the later snapshot.
    """
    by_batch = {**poller.batches, **batch_snapshots(table)}
    rows = table.scan(selected_fields=("batch_id", "data")).to_arrow()
    records: list[RecordLatency] = []
    unseen = 0
    for batch_id, data in zip(
        rows.column("batch_id").to_pylist(), rows.column("data").to_pylist(), strict=True
    ):
        sent_s = json.loads(data)["sent_ms"] / 1000
        snapshot_id, committed_ms = by_batch[batch_id]
        seen = poller.first_seen.get(snapshot_id)
        if seen is None:
            later = [t for s, t in poller.first_seen.items() if s != snapshot_id]
            seen = min((t for t in later if t * 1000 >= committed_ms), default=None)
            if seen is None:
                unseen += 1
                continue
        records.append(RecordLatency(sent_s, seen - sent_s, committed_ms / 1000 - sent_s))
    return Visibility(records, unseen)


def stats(values: list[float]) -> dict[str, float | int | None]:
    def r(v: float | None) -> float | None:
        return None if v is None else round(v, 3)

    return {
        "count": len(values),
        "p50": r(percentile(values, 50)),
        "p95": r(percentile(values, 95)),
        "p99": r(percentile(values, 99)),
        "max": r(max(values)) if values else None,
    }


def measure(
    ctx: BenchContext, trigger: str, *, observe: Callable[[str, int], None] | None = None
) -> dict[str, Any]:
    """One continuous run with ``trigger``; latencies per record.

    ``observe(phase, child pid)`` is told when the steady-state window starts ("steady")
    and ends ("done"): the profiler attaches to the Spark child in between.
    """
    from kinesis_lake.iceberg.catalog import open_catalog
    from kinesis_lake.kinesis.client import kinesis_client
    from kinesis_lake.kinesis.streams import ensure_stream

    sizes = ctx.sizes
    tag = trigger.replace(" ", "")
    stream = f"fresh-{tag}-{int(time.time())}"
    ensure_stream(kinesis_client(ctx.endpoint_url, REGION), stream, SHARDS)
    data_dir = ctx.scratch(stream)  # its own: repeated runs must not share a checkpoint
    namespace = "fresh"
    table_name = f"{namespace}.raw_events"
    stop_file = data_dir / "STOP"
    producer = Producer(ctx.endpoint_url, stream, sizes.freshness_rate, max_seconds=MAX_RUN_S)
    poller = Poller(data_dir, table_name)
    maintainer = Maintainer(data_dir, stream, namespace)
    threads: list[threading.Thread] = []

    first_batch = threading.Event()
    timeline: dict[str, float] = {}
    worker = ctx.spark("local[2]")

    def drive() -> None:
        """Produce once the query is up; stop after the window; let the tail land."""
        poller_thread = threading.Thread(target=poller.run, name="poller", daemon=True)
        threads.append(poller_thread)
        poller_thread.start()
        # The stream is empty until the first micro-batch has run: that batch starts the
        # query's Python workers (its cost is reported as start-up, not as latency).
        first_batch.wait(600)
        timeline["first_batch_done"] = time.time()
        producer_thread = threading.Thread(target=producer.run, name="producer", daemon=True)
        threads.append(producer_thread)
        timeline["producer_started"] = time.time()
        producer_thread.start()
        maintainer_thread = threading.Thread(target=maintainer.run, name="maintainer", daemon=True)
        threads.append(maintainer_thread)
        maintainer_thread.start()
        time.sleep(sizes.freshness_warmup_seconds)
        if observe is not None:
            observe("steady", worker.pid)
        time.sleep(sizes.freshness_seconds)
        if observe is not None:
            observe("done", worker.pid)
        producer.stop()
        maintainer.stop()
        producer.stopped.wait(30)
        timeline["producer_stopped"] = time.time()
        deadline = time.monotonic() + 60
        while poller.rows_visible < producer.sent and time.monotonic() < deadline:
            time.sleep(0.2)
        timeline["all_visible"] = time.time()
        stop_file.touch()

    def on_event(event: dict[str, Any], _pid: int) -> None:
        if event.get("started"):
            timeline["query_started"] = time.time()
            threading.Thread(target=drive, name="freshness-driver", daemon=True).start()
        elif "progress" in event:
            first_batch.set()

    run_time = sizes.freshness_warmup_seconds + sizes.freshness_seconds
    call = worker.call(
        "continuous",
        {
            "stream": stream,
            "endpoint": ctx.endpoint_url,
            "data_dir": str(data_dir),
            "namespace": namespace,
            "trigger": trigger,
            "stop_file": str(stop_file),
            "max_seconds": run_time + 700,
        },
        timeout_s=run_time + 900,
        on_event=on_event,
    )
    stop_file.touch()
    producer.stop()
    maintainer.stop()
    poller.stop()
    for thread in threads:
        thread.join(timeout=60)
    if producer.error is not None:
        raise RuntimeError(f"producer failed: {producer.error!r}")
    if maintainer.error is not None:
        raise RuntimeError(f"maintenance failed: {maintainer.error!r}")

    table = open_catalog("kinesis_lake", data_dir=data_dir).load_table(table_name)
    warm_from = timeline.get("producer_started", 0.0) + sizes.freshness_warmup_seconds
    seen = visibility(table, poller)
    observed_warm = [v.seen_s for v in seen.records if v.sent_s >= warm_from]
    observed_cold = [v.seen_s for v in seen.records if v.sent_s < warm_from]
    commit_warm = [v.committed_s for v in seen.records if v.sent_s >= warm_from]
    unseen = seen.unseen
    # CPU per micro-batch in the steady state, from the cumulative CPU readings taken at
    # each progress event: machine-load-independent cost of one trigger.
    progress_events = [e for e in call.events if "progress" in e]
    steady = progress_events[len(progress_events) // 3 :]
    cpu_per_batch = {}
    if len(steady) >= 2:
        spent = cpu_delta(steady[-1]["cpu"], steady[0]["cpu"])
        cpu_per_batch = {k: round(v / (len(steady) - 1), 3) for k, v in spent.items() if v}
    batches = call.result["progress"]
    moving = [p for p in batches if p["numInputRows"] > 0]
    durations = sorted(p["durationMs"].get("triggerExecution", 0) / 1000 for p in moving[1:])
    warm = stats(observed_warm)
    return {
        "trigger": trigger,
        "rate_records_per_second": sizes.freshness_rate,
        "sent": producer.sent,
        "committed": len(seen.records) + unseen,
        "producer_late_ticks": producer.late_ticks,
        "warmup_seconds": sizes.freshness_warmup_seconds,
        "measured_seconds": sizes.freshness_seconds,
        "latency_s": warm,
        "commit_latency_s": stats(commit_warm),
        "warmup_latency_s": stats(observed_cold),
        "first_batch_s": round(timeline["first_batch_done"] - timeline["query_started"], 2)
        if "first_batch_done" in timeline and "query_started" in timeline
        else None,
        "unmatched_rows": unseen,
        "batches_with_rows": len(moving),
        "batch_duration_s": {
            "p50": percentile(durations, 50),
            "p95": percentile(durations, 95),
            "max": durations[-1] if durations else None,
        },
        "batch_duration_breakdown_ms_median": phase_medians(moving[1:]),
        "cpu_s_per_batch": cpu_per_batch,
        "poller_polls": poller.polls,
        "data_files_max": poller.data_files_max,
        "data_files_at_end": _data_files(table),
        "data_files_written": sum(poller.files_added.values()),
        "maintenance": maintainer.summary(),
        "session_start_s": worker.session_start_s,
        "latencies_for_plot": [round(v, 3) for v in observed_warm],
        "load_average": load_now(),
    }


def _data_files(table: Any) -> int:
    snapshot = table.current_snapshot()
    return int((snapshot.summary or {}).get("total-data-files", 0)) if snapshot else 0


def run(ctx: BenchContext) -> dict[str, Any]:
    """The headline trigger three times in a row, then each other trigger once.

    The target asks for p99 <= 1 s in three consecutive runs, each reported: the verdict
    is met only if every run's p99 is, and the headline is the worst run, not the best.
    """
    first, *others = ctx.sizes.freshness_triggers
    headline = [measure(ctx, first) | {"headline_run": n} for n in range(1, HEADLINE_RUNS + 1)]
    runs = [*headline, *(measure(ctx, trigger) for trigger in others)]
    p99s = [run["latency_s"]["p99"] for run in headline]
    # A run without a p99 (nothing became visible) leaves the headline unknown: n/a.
    worst = {} if None in p99s else headline[p99s.index(max(p99s))]["latency_s"]
    return {
        "runs": runs,
        "headline_runs": [
            {f"{p}_s": run["latency_s"][p] for p in ("p50", "p95", "p99")} for run in headline
        ],
        "trigger": first,
        "p50_s": worst.get("p50"),
        "p95_s": worst.get("p95"),
        "p99_s": worst.get("p99"),
        "target": f"p99 <= {TARGET_P99_S} s in {HEADLINE_RUNS} consecutive runs",
        "verdict": verdict(worst.get("p99"), TARGET_P99_S, at_least=False),
        "notes": (
            f"latency = first time a table poll (every {POLL_S} s) shows the record's "
            "snapshot - send time stamped in the payload. The producer starts after the "
            "query's first (empty) micro-batch (first_batch_s: worker start-up); records "
            "of the first warmup_seconds of production are reported as warmup_latency_s. "
            f"The {first} trigger runs {HEADLINE_RUNS} times in a row; p50_s, p95_s and "
            "p99_s are those of the run with the worst p99."
        ),
    }
