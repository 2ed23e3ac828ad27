"""Benchmark 9: many shards, by simulation: what a micro-batch costs the driver at 500 shards.

On-demand streams reach hundreds or thousands of shards, and every shard is a planned
read and a progress record. Until issue 34 it was also a write task, and so a data file,
per micro-batch on a cluster master (``one task per shard`` below: 287 files per commit at
500 shards); by default the source now packs shards into tasks by the bytes their last
reads gave (kinesis_lake/spark/kinesis/task_groups.py). Two kinesalite streams, of
``SMALL_SHARDS`` and ``ctx.sizes.many_shards`` shards, hold the same number of records
per shard (random partition keys spread them), and ``run_ingestion`` drains each in
``BATCHES`` micro-batches of the same records per shard (``maxRecordsPerShard``), in a
shared warm worker on ``MASTER``, a cluster master (two executor JVMs, no
``spark.default.parallelism``): every setting at its default but the batch size.

Per micro-batch with rows, from Spark's progress: the driver's own phases (``latestOffset``
= ListShards, the previous epoch's progress records and the read plan; ``getBatch``,
``queryPlanning``, ``walCommit``, ``commitOffsets``) and ``addBatch`` (the tasks and the
sink's commit). The sink's commit is also timed apart, in this process: ``commit_files``
of as many files as the run's commits held (one file each, with the positions of every
shard, as the sink commits a micro-batch) on a table with a streaming table's retained
history (100 snapshots: more than the raw table's floor of 10, as a writer accumulates
between maintenance passes). Also reported: tasks and data files per commit, the
checkpoint's offset-log entry and the progress records' bytes per micro-batch, and the
table metadata's size.

Headline: driver time per micro-batch (driver phases + commit) at many shards / at
``SMALL_SHARDS``, both in the default configuration; target <= 3. For comparison, the
same at many shards with one task per shard (``KINESIS_LAKE_MAX_WRITE_TASKS=0``, the
cluster default before issue 34).
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from statistics import median
from typing import Any

from benchmarks.context import BenchContext
from benchmarks.machine import load_now
from benchmarks.sandbox import REGION
from benchmarks.stats import ratio, verdict

NAME = "many_shards"
MASTER = "local-cluster[2,1,1024]"
SPARK_MASTERS: tuple[str, ...] = (MASTER,)
TARGET = 3.0
SMALL_SHARDS = 4
BATCHES = 3
RECORDS_PER_SHARD_PER_BATCH = 8
COMMITS_TIMED = 5
HISTORY_COMMITS = 150
PER_SHARD = 0
"""KINESIS_LAKE_MAX_WRITE_TASKS=0: one write task (and file) per shard."""
DRIVER_PHASES = ("latestOffset", "getBatch", "queryPlanning", "walCommit", "commitOffsets")


def _produce(ctx: BenchContext, shards: int) -> str:
    """A stream of ``shards`` shards with about the same records in each."""
    from kinesis_lake.kinesis.client import kinesis_client
    from kinesis_lake.kinesis.producer import put_records, sample_events
    from kinesis_lake.kinesis.streams import ensure_stream

    name = f"bench-shards-{shards}-{uuid.uuid4().hex[:6]}"
    client = kinesis_client(ctx.endpoint_url, REGION, max_attempts=3)
    ensure_stream(client, name, shards)
    count = shards * RECORDS_PER_SHARD_PER_BATCH * BATCHES
    events = [(uuid.uuid4().hex, data) for _, data in sample_events(count, seed=11, start_ms=0)]
    sent = put_records(client, name, events).sent
    if sent != count:
        raise RuntimeError(f"produced {sent} of {count} records into {name}")
    return name


def _ingest(ctx: BenchContext, stream: str, shards: int, write_tasks: int | None) -> dict[str, Any]:
    label = f"shards_{shards}_tasks_{'default' if write_tasks is None else write_tasks}"
    call = ctx.spark(MASTER).call(
        "ingest",
        {
            "stream": stream,
            "endpoint": ctx.endpoint_url,
            "data_dir": str(ctx.scratch(f"many-shards-{label}")),
            "namespace": label,
            "runs": "run",
            "max_records_per_shard": RECORDS_PER_SHARD_PER_BATCH,
            "max_write_tasks": write_tasks,
        },
        timeout_s=1800,
    )
    run = call.result["runs"][-1]
    batches = [p for p in run["progress"] if p["numInputRows"] > 0]
    if not batches:
        raise RuntimeError(f"the {shards}-shard run read no rows")

    def phase(name: str) -> float:
        return median(p["durationMs"].get(name, 0) for p in batches)

    phases = {name: phase(name) for name in (*DRIVER_PHASES, "addBatch", "triggerExecution")}
    storage = run["storage"]
    return {
        "shards": shards,
        "write_tasks": "default" if write_tasks is None else (write_tasks or shards),
        "rows": run["rows"],
        "micro_batches": len(batches),
        "median_ms": phases,
        "driver_phases_ms": round(sum(phases[name] for name in DRIVER_PHASES), 1),
        "data_files_per_commit": round(run["table"]["data_files"] / len(batches), 1),
        "offset_log_entry_bytes": storage["largest_offset_log_entry_bytes"],
        "progress_records_per_batch": round(storage["progress_records"] / len(batches), 1),
        "progress_bytes_per_batch": round(storage["progress_record_bytes"] / len(batches)),
        "status_bytes": storage["status_bytes"],
        "checkpoint_bytes": storage["checkpoint_bytes"],
        "seconds": run["seconds"],
    }


def _commit_cost(ctx: BenchContext, shards: int, files_per_commit: int) -> dict[str, Any]:
    """The sink's commit of one micro-batch, with a streaming table's history behind it.

    First ``HISTORY_COMMITS`` commits of one file each (the positions of every shard move
    each time, routine expiry keeps 100 snapshots), then
    ``COMMITS_TIMED`` commits of ``files_per_commit`` small files, timed from the table load.
    """
    from benchmarks.commit_cost import _batch
    from kinesis_lake.iceberg.catalog import ensure_namespace, open_catalog
    from kinesis_lake.iceberg.commit import commit_files
    from kinesis_lake.iceberg.data_files import TableWriteTarget, write_data_files
    from kinesis_lake.iceberg.maintenance import expire_snapshots
    from kinesis_lake.iceberg.raw_table import ensure_raw_table
    from kinesis_lake.iceberg.summary import POSITIONS

    scratch = ctx.scratch(f"many-shards-commit-{shards}-{files_per_commit}")
    catalog = open_catalog("kinesis_lake", data_dir=scratch)
    ensure_namespace(catalog, "shards")
    table = ensure_raw_table(catalog, "shards.raw_events")
    target = TableWriteTarget.from_table(table)
    one_row = _batch(0, 0).slice(0, 1)
    seconds: list[float] = []
    for batch_id in range(HISTORY_COMMITS + COMMITS_TIMED):
        timed = batch_id >= HISTORY_COMMITS
        files = [
            file
            for shard in range(files_per_commit if timed else 1)
            for file in write_data_files(target, [one_row], file_prefix=f"b{batch_id}-s{shard}")
        ]
        positions = {f"shardId-{s:012d}": str(10**50 + batch_id) for s in range(shards)}
        started = time.perf_counter()
        table = catalog.load_table("shards.raw_events")
        commit_files(
            table,
            files,
            writer_id="bench",
            batch_id=batch_id,
            summary={POSITIONS: json.dumps(positions, sort_keys=True)},
        )
        if timed:
            seconds.append(time.perf_counter() - started)
        elif (batch_id + 1) % 50 == 0:
            expire_snapshots(table, older_than_ms=int(time.time() * 1000), retain_last=100)
    return {
        "shards": shards,
        "files_per_commit": files_per_commit,
        "history_commits": HISTORY_COMMITS,
        "snapshots": len(table.metadata.snapshots),
        "commit_s_median": round(median(seconds), 4),
        "metadata_json_bytes": Path(table.metadata_location.removeprefix("file://")).stat().st_size,
    }


def run(ctx: BenchContext) -> dict[str, Any]:
    many = ctx.sizes.many_shards
    # (label, shards, KINESIS_LAKE_MAX_WRITE_TASKS): None is the default (tasks by bytes).
    configs = (
        (f"{SMALL_SHARDS}", SMALL_SHARDS, None),
        (f"{many}", many, None),
        (f"{many}, one task per shard", many, PER_SHARD),
    )
    streams = {shards: _produce(ctx, shards) for shards in (SMALL_SHARDS, many)}
    runs: dict[str, dict[str, Any]] = {}
    commits: dict[str, dict[str, Any]] = {}
    driver: dict[str, float] = {}
    for key, shards, write_tasks in configs:
        runs[key] = _ingest(ctx, streams[shards], shards, write_tasks)
        files = max(1, round(runs[key]["data_files_per_commit"]))
        commits[key] = _commit_cost(ctx, shards, files)
        driver[key] = round(
            runs[key]["driver_phases_ms"] + commits[key]["commit_s_median"] * 1000, 1
        )
    small, large, per_shard = (configs[i][0] for i in range(3))
    headline = ratio(driver[large], driver[small])
    return {
        "shards": [SMALL_SHARDS, many],
        "master": MASTER,
        "records_per_shard_per_batch": RECORDS_PER_SHARD_PER_BATCH,
        "runs": runs,
        "commits": commits,
        "driver_ms": driver,
        "ratio": headline,
        "ratio_one_task_per_shard": ratio(driver[per_shard], driver[small]),
        "ratio_add_batch": ratio(
            runs[large]["median_ms"]["addBatch"], runs[small]["median_ms"]["addBatch"]
        ),
        "target": f"<= {TARGET}",
        "verdict": verdict(headline, TARGET, at_least=False),
        "load_average": load_now(),
        "notes": (
            "driver time per micro-batch = Spark's driver phases (median over micro-batches "
            "with rows) + the sink's commit_files timed apart (as many files as the run's "
            f"commits held, on a table holding 100 snapshots); {many} vs {SMALL_SHARDS} "
            f"shards, same records per shard per micro-batch, on {MASTER} with every setting "
            "at its default (shards packed into tasks by bytes). A commit holds "
            f"{runs[large]['data_files_per_commit']:g} files at {many} shards; with one "
            "task per shard (KINESIS_LAKE_MAX_WRITE_TASKS=0, the cluster default before "
            f"issue 34) {runs[per_shard]['data_files_per_commit']:g}, and the ratio is "
            f"{ratio(driver[per_shard], driver[small])}."
        ),
    }
