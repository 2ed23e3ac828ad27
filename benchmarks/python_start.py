"""Benchmark 12: a new `kinesis-lake ingest`, with PySpark's archive compiled and without.

A cold query starts its Python processes one after another (the data-source lookup and
planners, the streaming source and sink runners, the executors' worker daemon), and each
imports PySpark from the archive Spark puts first on its path. :mod:`kinesis_lake.spark.
compiled_pyspark` adds compiled modules to that archive at setup; this measures what that
takes off a whole `kinesis-lake ingest` of a small backlog, where start-up is nearly all
of the time (issue 14, target 2). Each round runs the command twice in new processes, once
over the source-only archives and once over the compiled ones, alternating which goes first
so that a drift of the machine's load hits both alike.

Spark takes the archives from ``$SPARK_HOME/python/lib``, so each variant runs under a
Spark home of its own: pip's pyspark linked in, but for those archives. The installed
ones are never touched (running Spark processes would break if they were), and the class
archive still applies (a linked jars directory passes its check; measured). One more run,
compiled, records when each process of the command's tree first appeared: the profile of
where a cold run's time goes.
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
import zipfile
from pathlib import Path
from typing import Any

import psutil

from benchmarks.context import BenchContext
from benchmarks.machine import load_now
from benchmarks.processes import run_with_timeout
from benchmarks.stats import ratio
from benchmarks.streams import settings_env, settings_for
from kinesis_lake.spark.runtime.compiled_pyspark import ARCHIVE_DIR, archives, is_compiled

NAME = "python_start"
SPARK_MASTERS: tuple[str, ...] = ()  # its own processes
ROUNDS = 5
RECORDS = 2_000
VARIANTS = ("source_only", "compiled")
_PYSPARK_DIR = ARCHIVE_DIR.parent.parent
_RECOMPILE = "python -m kinesis_lake.spark.runtime.compiled_pyspark"


def _spark_home(work: Path, label: str) -> Path:
    """pip's pyspark as a Spark home, with the archives compiled or as pip ships them."""
    home = work / f"spark-home-{label}"
    lib = home / "python" / "lib"
    lib.mkdir(parents=True, exist_ok=True)
    for name in ("bin", "jars", "sbin"):
        if (_PYSPARK_DIR / name).exists() and not (home / name).exists():
            (home / name).symlink_to(_PYSPARK_DIR / name)
    for installed in archives():
        with zipfile.ZipFile(installed) as full, zipfile.ZipFile(lib / installed.name, "w") as copy:
            for entry in full.infolist():
                if label == "compiled" or not entry.filename.endswith(".pyc"):
                    copy.writestr(entry, full.read(entry))
    return home


def _ingest(
    ctx: BenchContext, stream: str, home: Path, label: str, *, watch: bool = False
) -> tuple[float, list[tuple[float, str]]]:
    """One new `kinesis-lake ingest` under ``home``: its seconds and, with ``watch``, when
    each process of its tree first appeared."""
    settings = settings_for(ctx, stream, label, data_dir=ctx.scratch(f"python-start-{label}"))
    seen: dict[int, tuple[float, str]] = {}
    started = time.perf_counter()

    def watch_tree(process: Any) -> threading.Thread:
        def poll() -> None:
            while process.poll() is None:
                try:
                    children = psutil.Process(process.pid).children(recursive=True)
                except psutil.Error:
                    return
                for child in children:
                    if child.pid not in seen:
                        try:
                            seen[child.pid] = (time.perf_counter() - started, _role(child))
                        except psutil.Error:
                            continue
                time.sleep(0.05)

        watcher = threading.Thread(target=poll, daemon=True)
        watcher.start()
        return watcher

    completed, watcher = run_with_timeout(
        [sys.executable, "-m", "kinesis_lake.cli", "ingest"],
        env={**settings_env(settings), "SPARK_HOME": str(home)},
        timeout_s=600,
        on_start=watch_tree if watch else None,
    )
    seconds = time.perf_counter() - started
    if watcher is not None:
        watcher.join()
    if completed.returncode != 0 or f"ingested {RECORDS} rows" not in completed.stdout:
        raise RuntimeError(
            f"kinesis-lake ingest ({label}) failed:\n{completed.stdout[-1500:]}"
            f"\n{completed.stderr[-3000:]}"
        )
    # spark-submit's own shell scripts are not part of the story
    events = sorted(event for event in seen.values() if event[1] not in ("bash", "rm"))
    return seconds, events


def _role(process: psutil.Process) -> str:
    """What a process of the command's tree is, from its command line."""
    command = process.cmdline()
    if command and command[0].endswith("java"):
        return "driver JVM (spark-submit)"
    if "-m" in command:
        return " ".join(command[command.index("-m") + 1 :][:2])
    if "-c" in command:
        return "python -c (Spark asking the Python version)"
    return process.name()


def run(ctx: BenchContext) -> dict[str, Any]:
    if not all(is_compiled(path) for path in archives()):
        raise RuntimeError(f"PySpark's archives in {ARCHIVE_DIR} are not compiled: {_RECOMPILE}")
    work = ctx.scratch("python_start")
    homes = {label: _spark_home(work, label) for label in VARIANTS}
    stream = ctx.stream_with(RECORDS)
    seconds: dict[str, list[float]] = {label: [] for label in VARIANTS}
    for round_number in range(ROUNDS):
        for label in VARIANTS if round_number % 2 == 0 else VARIANTS[::-1]:
            took, _ = _ingest(ctx, stream, homes[label], f"{label}_{round_number}")
            seconds[label].append(round(took, 2))
    took, processes = _ingest(ctx, stream, homes["compiled"], "timeline", watch=True)
    medians = {label: round(statistics.median(runs), 2) for label, runs in seconds.items()}
    return {
        "records": RECORDS,
        "seconds": seconds,
        "medians": medians,
        "ratio": ratio(medians["compiled"], medians["source_only"]),
        "timeline": {
            "seconds": round(took, 2),
            "processes": [(round(at, 2), role) for at, role in processes],
        },
        "target": "n/a (measures what issue 14 target 2 is limited by)",
        "verdict": "measured",
        "load_average": load_now(),
        "notes": (
            f"ratio = median seconds of a new `kinesis-lake ingest` of {RECORDS:,} records "
            f"(JVM start included) with the compiled archives / with the source-only ones, "
            f"{ROUNDS} alternating rounds, each run a new process, JVM and data directory."
        ),
    }
