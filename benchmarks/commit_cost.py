"""Benchmark 5: commit latency over a streaming writer's life, with routine expiry on.

Plays the Iceberg sink's driver-side commit, without Spark: per micro-batch, four small
Parquet files (one per shard task, written with ``write_data_files`` as executors do)
are committed with ``commit_files`` under a writer id and batch id, with the per-shard
positions summary the sink writes. Every ``commit_expire_every`` commits,
``maintenance.expire_snapshots`` runs with the raw table's own retention
(``history.expire.min-snapshots-to-keep``), as a maintenance schedule would.

Timed apart, per commit: the sink's table load, its ``committed_positions`` lookup and
``commit_files`` itself. File writing is not timed (it runs on executors in real life).
The headline compares the median ``commit_files`` latency of the first 20 commits with
the last 20; the CPU seconds of the same calls (all threads of this process) are compared
too, as they are less disturbed by other jobs on a shared machine.
"""

from __future__ import annotations

import json
import time
from statistics import linear_regression, median
from typing import Any

import pyarrow as pa

from benchmarks.context import BenchContext
from benchmarks.machine import load_now
from benchmarks.stats import percentile, ratio, verdict
from kinesis_lake.iceberg.summary import POSITIONS

NAME = "commit_cost"
SPARK_MASTERS: tuple[str, ...] = ()
TARGET = 1.5
WINDOW = 20
FILES_PER_COMMIT = 4
ROWS_PER_FILE = 250
TIMED = ("load_s", "positions_s", "commit_s", "commit_cpu_s")


def _batch(shard: int, batch_id: int) -> pa.RecordBatch:
    from kinesis_lake.iceberg.raw_table import RAW_ARROW_SCHEMA

    now_us = int(time.time() * 1_000_000)
    n = ROWS_PER_FILE
    first = batch_id * n
    payload = b'{"event_id":"x","event_type":"view","amount":1.0}' + b" " * 150
    return pa.RecordBatch.from_pydict(
        {
            "stream_name": ["bench"] * n,
            "shard_id": [f"shardId-{shard:012d}"] * n,
            "sequence_number": [str(10**50 + first + i) for i in range(n)],
            "sub_sequence_number": [0] * n,
            "partition_key": [f"user-{i % 100}" for i in range(n)],
            "approximate_arrival_timestamp": [now_us] * n,
            "data": [payload] * n,
            "aggregated": [False] * n,
            "source_error": [None] * n,
            "ingested_at": [now_us] * n,
            "batch_id": [batch_id] * n,
        },
        schema=RAW_ARROW_SCHEMA,
    )


def run(ctx: BenchContext) -> dict[str, Any]:
    from kinesis_lake.iceberg import maintenance
    from kinesis_lake.iceberg.catalog import ensure_namespace, open_catalog
    from kinesis_lake.iceberg.commit import commit_files
    from kinesis_lake.iceberg.data_files import TableWriteTarget, write_data_files
    from kinesis_lake.iceberg.raw_table import ensure_raw_table
    from kinesis_lake.iceberg.summary import committed_positions
    from kinesis_lake.spark.iceberg.writer import merge_positions

    commits = ctx.sizes.commits
    every = ctx.sizes.commit_expire_every
    data_dir = ctx.scratch("commit-cost")
    catalog = open_catalog("kinesis_lake", data_dir=data_dir)
    ensure_namespace(catalog, "commits")
    table = ensure_raw_table(catalog, "commits.raw_events")
    retain_last = int(table.properties["history.expire.min-snapshots-to-keep"])
    target = TableWriteTarget.from_table(table)
    samples: list[dict[str, Any]] = []
    expiries: list[dict[str, Any]] = []
    for batch_id in range(commits):
        files = [
            file
            for shard in range(FILES_PER_COMMIT)
            for file in write_data_files(
                target, [_batch(shard, batch_id)], file_prefix=f"b{batch_id}-s{shard}"
            )
        ]
        t0 = time.perf_counter()
        table = catalog.load_table("commits.raw_events")  # the sink loads it per commit
        t1 = time.perf_counter()
        positions = committed_positions(table)
        for shard in range(FILES_PER_COMMIT):
            positions = merge_positions(
                positions, {f"shardId-{shard:012d}": str(10**50 + batch_id * ROWS_PER_FILE)}
            )
        t2 = time.perf_counter()
        cpu = time.process_time()
        commit_files(
            table,
            files,
            writer_id="bench-writer",
            batch_id=batch_id,
            summary={POSITIONS: json.dumps(positions, sort_keys=True)},
            just_loaded=True,  # as the sink, which loads the table right before
        )
        t3 = time.perf_counter()
        cpu = time.process_time() - cpu
        current = table.current_snapshot()  # never None here: a commit just landed
        samples.append(
            {
                "commit": batch_id + 1,
                "load_s": round(t1 - t0, 4),
                "positions_s": round(t2 - t1, 4),
                "commit_s": round(t3 - t2, 4),
                "commit_cpu_s": round(cpu, 4),
                "snapshots": len(table.metadata.snapshots),
                "manifests": len(current.manifests(table.io)) if current else 0,
            }
        )
        if (batch_id + 1) % every == 0:
            started = time.perf_counter()
            report = maintenance.expire_snapshots(
                table, older_than_ms=int(time.time() * 1000), retain_last=retain_last
            )
            expiries.append(
                {
                    "after_commit": batch_id + 1,
                    "seconds": round(time.perf_counter() - started, 3),
                    "expired": report.snapshots_expired,
                    "snapshots_after": len(table.metadata.snapshots),
                }
            )
    first = samples[:WINDOW]
    last = samples[-WINDOW:]

    def med(rows: list[dict[str, Any]], key: str) -> float:
        return round(median(r[key] for r in rows), 4)

    def sink_path(rows: list[dict[str, Any]]) -> float:
        return round(median(r["load_s"] + r["positions_s"] + r["commit_s"] for r in rows), 4)

    headline = ratio(med(last, "commit_s"), med(first, "commit_s"))
    slowest = max(samples, key=lambda r: r["commit_s"])
    return {
        "commits": commits,
        "files_per_commit": FILES_PER_COMMIT,
        "expire_every": every,
        "retain_last": retain_last,
        "first_window": {k: med(first, k) for k in TIMED},
        "last_window": {k: med(last, k) for k in TIMED},
        "first_window_p95_commit_s": percentile([r["commit_s"] for r in first], 95),
        "last_window_p95_commit_s": percentile([r["commit_s"] for r in last], 95),
        "ratio": headline,
        "ratio_sink_path": ratio(sink_path(last), sink_path(first)),
        "ratio_cpu": ratio(med(last, "commit_cpu_s"), med(first, "commit_cpu_s")),
        "target": f"<= {TARGET}",
        "verdict": verdict(headline, TARGET, at_least=False),
        "ms_per_retained_snapshot": _ms_per_retained_snapshot(samples),
        "slowest_commit": {k: slowest[k] for k in ("commit", "commit_s", "manifests")},
        "final_snapshots": len(table.metadata.snapshots),
        "final_manifests": samples[-1]["manifests"],
        "final_data_files": commits * FILES_PER_COMMIT,
        "expiries": expiries,
        "samples": samples,
        "load_average": load_now(),
        "notes": (
            f"median commit_files latency of the last {WINDOW} commits / first {WINDOW}; "
            "ratio_sink_path adds the sink's per-commit table load and positions lookup."
        ),
    }


def _ms_per_retained_snapshot(samples: list[dict[str, Any]]) -> float:
    """Least-squares slope of commit_files milliseconds over retained snapshots, the
    slowest 5% (manifest merges, scheduler noise) left out: what each snapshot of
    history adds to every commit."""
    ms = [r["commit_s"] * 1000 for r in samples]
    cut = sorted(ms)[int(len(ms) * 0.95) - 1]
    kept = [(r["snapshots"], m) for r, m in zip(samples, ms, strict=True) if m <= cut]
    fit = linear_regression([float(s) for s, _ in kept], [m for _, m in kept])
    return round(fit.slope, 4)
