"""The Spark child's ingestion jobs: ``ingest`` (bounded runs) and ``continuous``.

Both time the ingestion query itself: ``run_ingestion`` once per label, and
``run_continuous`` with a processing-time trigger until told to stop.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from benchmarks.spark_job_kit import _recorder, _settings, _table_shape, emit
from kinesis_lake.config import Settings


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


def cmd_continuous(spark: Any, args: Any) -> dict[str, Any]:
    from kinesis_lake.pipeline.ingest import run_continuous
    from kinesis_lake.pipeline.ingest_query import prepare_raw_table
    from kinesis_lake.pipeline.ingest_report import BatchReport

    settings = _settings(args, args.namespace)
    prepare_raw_table(settings)
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
