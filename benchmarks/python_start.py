"""Benchmark 12: a new `kinesis-lake ingest`, with PySpark's archive compiled and without.

A cold query starts its Python processes one after another (the data-source lookup and
planners, the streaming source and sink runners, the executors' worker daemon), and each
imports PySpark from the archive Spark puts first on its path. :mod:`kinesis_lake.spark.
compiled_pyspark` adds compiled modules to that archive at setup; this measures what that
takes off a whole `kinesis-lake ingest` of a small backlog, where start-up is nearly all
of the time (issue 14, target 2). Each round runs the command twice in new processes, once
over the source-only archive and once over the compiled one, alternating which goes first
so that a drift of the machine's load hits both alike. The compiled archive is put back at
the end, whatever happens. One more run, compiled, records when each process of the
command's tree first appeared: the profile of where a cold run's time goes.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path
from typing import Any

from benchmarks.common import BenchContext, load_now, ratio, settings_env, settings_for
from kinesis_lake.spark.compiled_pyspark import ARCHIVE_DIR, compile_archive, is_compiled

NAME = "python_start"
SPARK_MASTERS: tuple[str, ...] = ()  # its own processes
ROUNDS = 5
RECORDS = 2_000
VARIANTS = ("source_only", "compiled")


def _source_only_copy(compiled: Path, target: Path) -> Path:
    """``compiled`` without its .pyc entries: the archive as pip installs it."""
    with zipfile.ZipFile(compiled) as full, zipfile.ZipFile(target, "w") as plain:
        for entry in full.infolist():
            if not entry.filename.endswith(".pyc"):
                plain.writestr(entry, full.read(entry))
    return target


def _ingest_once(ctx: BenchContext, stream: str, label: str) -> float:
    settings = settings_for(ctx, stream, label, data_dir=ctx.scratch(f"python-start-{label}"))
    started = time.perf_counter()
    completed = subprocess.run(
        [sys.executable, "-m", "kinesis_lake.cli", "ingest"],
        env=settings_env(settings),
        capture_output=True,
        text=True,
        timeout=600,
    )
    seconds = time.perf_counter() - started
    if completed.returncode != 0 or f"ingested {RECORDS} rows" not in completed.stdout:
        raise RuntimeError(f"kinesis-lake ingest failed:\n{completed.stdout[-2000:]}")
    return seconds


def _role(command: list[str]) -> str:
    """What a process of the command's tree is, from its command line."""
    if command and command[0].endswith("java"):
        return "driver JVM (spark-submit)"
    if "-m" in command:
        module = command[command.index("-m") + 1 :]
        return " ".join(module[:2]) if module else "python"
    return "python -c (Spark asking the Python version)" if "-c" in command else command[0]


def _timeline(ctx: BenchContext, stream: str) -> dict[str, Any]:
    """One compiled run of the command, with the moment each process first appeared."""
    import psutil

    settings = settings_for(ctx, stream, "timeline", data_dir=ctx.scratch("python-start-tl"))
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-u", "-m", "kinesis_lake.cli", "ingest"],
        env=settings_env(settings),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    seen: dict[int, tuple[float, str]] = {}

    def watch() -> None:
        while process.poll() is None:
            try:
                children = psutil.Process(process.pid).children(recursive=True)
            except psutil.Error:
                break
            for child in children:
                if child.pid not in seen:
                    try:
                        seen[child.pid] = (time.perf_counter() - started, _role(child.cmdline()))
                    except psutil.Error:
                        continue
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    ingested_at = None
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("ingested "):
            ingested_at = time.perf_counter() - started
    process.wait(timeout=600)
    watcher.join()
    # spark-submit's own shell scripts (bash, rm) are not part of the story
    events = sorted(event for event in seen.values() if event[1] not in ("bash", "rm"))
    return {
        "seconds": round(time.perf_counter() - started, 2),
        "ingested_at_s": round(ingested_at, 2) if ingested_at else None,
        "processes": [(round(at, 2), role) for at, role in events],
    }


def run(ctx: BenchContext) -> dict[str, Any]:
    installed = ARCHIVE_DIR / "pyspark.zip"
    if not is_compiled(installed):
        raise RuntimeError(f"{installed} is not compiled: run make setup first")
    work = ctx.scratch("python_start")
    archives = {
        "compiled": Path(shutil.copy(installed, work / "compiled.zip")),
        "source_only": _source_only_copy(installed, work / "source-only.zip"),
    }
    stream = ctx.stream_with(RECORDS)
    seconds: dict[str, list[float]] = {label: [] for label in VARIANTS}
    try:
        for round_number in range(ROUNDS):
            order = VARIANTS if round_number % 2 == 0 else VARIANTS[::-1]
            for label in order:
                shutil.copy(archives[label], installed)
                seconds[label].append(
                    round(_ingest_once(ctx, stream, f"{label}_{round_number}"), 2)
                )
    finally:
        shutil.copy(archives["compiled"], installed)
        compile_archive(installed)  # a no-op unless the copy above failed halfway
    timeline = _timeline(ctx, stream)
    medians = {label: round(statistics.median(runs), 2) for label, runs in seconds.items()}
    return {
        "records": RECORDS,
        "seconds": seconds,
        "medians": medians,
        "ratio": ratio(medians["compiled"], medians["source_only"]),
        "timeline": timeline,
        "target": "n/a (measures what issue 14 target 2 is limited by)",
        "verdict": "measured",
        "load_average": load_now(),
        "notes": (
            f"ratio = median seconds of a new `kinesis-lake ingest` of {RECORDS:,} records "
            f"(JVM start included) with the compiled archive / with the source-only one, "
            f"{ROUNDS} alternating rounds, each run a new process, JVM and data directory."
        ),
    }
