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
* ``upsert``: upsert tables of two sizes, merge-on-read and copy-on-write, refreshed
  after the same number of updated keys; then a full read of each after many refreshes.

This module is the child's entry point and command loop; each job is in a module of its
own (``spark_job_ingest`` for ``ingest`` and ``continuous``, ``spark_job_derive``,
``spark_job_upsert``), and what they share (``emit``, Spark's progress, a job's
settings) in ``spark_job_kit``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from benchmarks.sandbox import configure_process_env

configure_process_env()

from benchmarks.spark_job_derive import cmd_derive  # noqa: E402
from benchmarks.spark_job_ingest import cmd_continuous, cmd_ingest  # noqa: E402
from benchmarks.spark_job_kit import emit  # noqa: E402
from benchmarks.spark_job_upsert import cmd_upsert  # noqa: E402


def _session(master: str):
    from kinesis_lake.spark.runtime.session import build_spark_session

    started = time.perf_counter()
    spark = build_spark_session(master, app_name="kinesis-lake-bench")
    # Touch the JVM once so "session start" includes executor registration, not just
    # the gateway (local-cluster executors register asynchronously).
    spark.range(1).count()
    return spark, time.perf_counter() - started


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
