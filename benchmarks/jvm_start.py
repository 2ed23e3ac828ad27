"""Benchmark 11: a local driver JVM's start, with and without the class archive.

What every ``kinesis-lake ingest`` and bounded Dagster run pays before its first record
(issue 14, target 2), and what :mod:`kinesis_lake.spark.runtime.class_archive` takes off it.
Each round starts a new Python process that builds the project's Spark session and runs
one small query, once mapping the archive ``make setup`` recorded and once without it
(``-Xshare:auto``, the JDK's own classes only, which leaves ours out), alternating so
that a drift of the machine's load hits both alike. Reported: medians of the session's
start, the first query, the JVM's CPU seconds and its memory (PSS, after the query).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from typing import Any

from benchmarks.context import BenchContext
from benchmarks.machine import load_now
from benchmarks.stats import ratio
from kinesis_lake.spark.runtime.class_archive import archive_path

NAME = "jvm_start"
SPARK_MASTERS: tuple[str, ...] = ()  # its own processes
ROUNDS = 3

ONE_START = """
import json, sys, time
import psutil
from pyspark import SparkContext
from kinesis_lake.spark.runtime.session import build_spark_session
began = time.perf_counter()
conf = {"spark.driver.extraJavaOptions": sys.argv[2]} if sys.argv[2] else {}
spark = build_spark_session(conf=conf, log_dir=sys.argv[1])
started = time.perf_counter()
spark.range(1000).selectExpr("sum(id)").collect()
queried = time.perf_counter()
jvm = psutil.Process(SparkContext._gateway.proc.pid)
cpu = jvm.cpu_times()
print(json.dumps({
    "session_s": started - began,
    "first_query_s": queried - started,
    "jvm_cpu_s": cpu.user + cpu.system,
    "jvm_pss_mb": jvm.memory_full_info().pss / 2**20,
}))
spark.stop()
"""

VARIANTS = {"with_archive": "", "without_archive": "-Xshare:auto"}


def _start_once(ctx: BenchContext, label: str, round_number: int) -> dict[str, float]:
    log_dir = ctx.work_dir / "jvm_start" / f"{label}-{round_number}"
    completed = subprocess.run(
        [sys.executable, "-c", ONE_START, str(log_dir), VARIANTS[label]],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    return json.loads(completed.stdout.strip().splitlines()[-1])


def run(ctx: BenchContext) -> dict[str, Any]:
    if not archive_path().is_file():
        raise RuntimeError(f"no class archive at {archive_path()}: run make setup first")
    rounds: dict[str, list[dict[str, float]]] = {label: [] for label in VARIANTS}
    for round_number in range(ROUNDS):
        for label in VARIANTS:
            rounds[label].append(_start_once(ctx, label, round_number))
    medians = {
        label: {key: round(statistics.median(run[key] for run in runs), 2) for key in runs[0]}
        for label, runs in rounds.items()
    }
    with_archive, without = medians["with_archive"], medians["without_archive"]
    start_with = with_archive["session_s"] + with_archive["first_query_s"]
    start_without = without["session_s"] + without["first_query_s"]
    return {
        "rounds": rounds,
        "medians": medians,
        "ratio": ratio(start_with, start_without),
        "archive_mb": round(archive_path().stat().st_size / 2**20),
        "target": "n/a (measures what issue 14 target 2 is limited by)",
        "verdict": "measured",
        "load_average": load_now(),
        "notes": (
            "ratio = (session start + first query) with the archive / without it, medians "
            f"of {ROUNDS} alternating rounds, each a new process and JVM."
        ),
    }
