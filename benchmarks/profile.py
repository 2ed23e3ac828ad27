"""py-spy profiles of the measured code paths, summarised into ``results/profile_*.json``.

    .venv/bin/pip install py-spy         # not a project dependency (yet)
    python -m benchmarks.profile --scale 0.25 [--only ingest,derive,commits]

Separate from ``benchmarks.run`` on purpose: sampling slows what it samples, so profiled
runs never produce the reported numbers. What is profiled:

* ``ingest``: the *warm* ``run_ingestion`` of a backlog (py-spy attaches to the Spark child
  after its cold run and stops when the warm run ends), every Python process of the
  driver tree (driver, streaming source/sink runners, executor Python workers).
* ``freshness``: ``run_continuous`` at a 1 s trigger and ~1,000 records/s, during the
  steady-state window of benchmark 3.
* ``derive``: the timed ``refresh_downstream`` calls of benchmark 4 (attached after the
  tables are built and the first refresh ran).
* ``commits``: benchmark 5's commit loop, in a child process.

Each summary lists the functions holding the most samples (self time, "where the CPU
goes") and the most inclusive samples among kinesis-lake / pyiceberg / pyspark frames
("which call it was under"), per process role. ``REPORT.md`` includes them.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.context import BenchContext
from benchmarks.machine import environment_info
from benchmarks.sandbox import RESULTS_DIR, configure_process_env, new_work_dir
from benchmarks.sizes import Sizes

_PROCESS = re.compile(r'^process (\d+):"([^"]*)"$')
# Frames worth naming in the inclusive view: our code and the libraries it drives.
_INTERESTING = (
    "kinesis_lake",
    "pyiceberg",
    "pyspark/sql",
    "botocore",
    "pyarrow",
    "fsspec",
    "gc.collect",
    "<module>",
)


def _py_spy() -> str:
    found = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(found).exists():
        raise SystemExit("py-spy is not installed: .venv/bin/pip install py-spy")
    return found


class _Attached:
    """A py-spy recorder attached to a running process tree, stopped with SIGINT."""

    def __init__(self, pid: int, out: Path, rate: int = 67) -> None:
        self.out = out
        self._process = subprocess.Popen(
            [
                _py_spy(),
                "record",
                "--pid",
                str(pid),
                "--subprocesses",
                "--format",
                "raw",
                "--rate",
                str(rate),
                "--nonblocking",
                "-o",
                str(out),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def stop(self) -> None:
        if self._process.poll() is None:
            self._process.send_signal(signal.SIGINT)
        try:
            self._process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()


def _role(command: str) -> str:
    """A readable name for the process a stack was sampled in."""
    for marker, role in (
        ("write_into_data_source", "python worker: sink planning"),
        ("commit_data_source_write", "python worker: sink commit"),
        ("python_streaming_sink_runner", "driver-side sink runner (commit)"),
        ("python_streaming_source_runner", "driver-side source runner (planning)"),
        ("plan_data_source_read", "python worker: source planning"),
        ("pyspark.daemon pyspark.worker", "executor python worker"),
        ("pyspark.worker", "executor python worker"),
        ("pyspark.sql.worker.", "python worker: data source lookup/planning"),
        ("benchmarks.spark_job", "driver (python)"),
        ("benchmarks.profile", "profiled process"),
    ):
        if marker in command:
            return role
    return command[:60]


# Named costs the report discusses: a sample counts once in a bucket when any frame of
# its stack matches one of the bucket's markers.
BUCKETS: dict[str, tuple[str, ...]] = {
    "gc.collect() after each task (PySpark daemon)": ("gc.collect() after each task",),
    "botocore timestamp parsing + epoch_ms": (
        "_handle_timestamp",
        "_parse_timestamp_utc (",
        "epoch_ms (kinesis_lake",
    ),
    "Kinesis client built in a new worker": ("kinesis_client (kinesis_lake/kinesis/client.py",),
    "sink position tracking": ("_BatchTracker.__call__ (",),
    "imports in Python workers": ("<frozen importlib._bootstrap>", "<frozen zipimport>"),
    "GetRecords request + response parsing": ("ShardReader._get_records",),
    "records_to_arrow": ("records_to_arrow (",),
    "Parquet writing on executors": ("write_data_files (",),
    "sink commit on the driver": ("IcebergStreamWriter.commit (",),
    "source planning on the driver": ("KinesisStreamReader.latestOffset (",),
    "pyiceberg Transaction.table_metadata (deepcopy)": ("Transaction.table_metadata (",),
    "commit_files": ("commit_files (",),
    "manifest merges (pyiceberg merge_append)": ("_ManifestMergeManager._merge_group",),
    "expire_snapshots": ("expire_snapshots (kinesis_lake",),
    "derive: route_on_executors": ("route_on_executors.",),
}


def summarise(raw: Path, *, top: int = 25) -> dict[str, Any]:
    """Self and inclusive sample shares from py-spy's raw (collapsed) output."""
    self_counts: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    roles: Counter[str] = Counter()
    buckets: Counter[str] = Counter()
    total = 0
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        role = "profiled process"
        # With --subprocesses each stack starts with the chain of processes it ran in
        # (driver;JVM;worker daemon;...): the innermost one is where it ran.
        while frames and (match := _PROCESS.match(frames[0])):
            role = _role(match.group(2))
            frames = frames[1:]
        if not frames:
            continue
        if _is_idle(frames):
            continue
        if frames[-1].startswith(_DAEMON_GC):
            frames = [*frames[:-1], "gc.collect() after each task (pyspark/daemon.py:275)"]
        total += count
        roles[role] += count
        self_counts[f"[{role}] {_short(frames[-1])}"] += count
        for frame in dict.fromkeys(frames):  # once per stack, however deep the recursion
            if any(marker in frame for marker in _INTERESTING):
                inclusive[f"[{role}] {_short(frame)}"] += count
        stack_text = ";".join(frames)
        for bucket, markers in BUCKETS.items():
            if any(marker in stack_text for marker in markers):
                buckets[bucket] += count
    return {
        "samples": total,
        "buckets": {name: round(n / total, 4) for name, n in buckets.most_common() if total},
        "by_process": [
            {"share": round(n / total, 4), "frame": role} for role, n in roles.most_common()
        ],
        "top_self": [
            {"share": round(n / total, 4), "frame": f} for f, n in self_counts.most_common(top)
        ],
        "top_inclusive": [
            {"share": round(n / total, 4), "frame": f} for f, n in inclusive.most_common(top)
        ],
    }


# pyspark/daemon.py: line 184 is the daemon's poll loop (idle); line 275 is the
# ``gc.collect()`` a reused worker runs after every task (CPU work, and a lot of it).
_DAEMON_GC = "manager (daemon.py:275)"
_IDLE_LEAVES = (
    "manager (daemon.py:184)",
    "select (",
    "poll (",
    "wait (threading.py",
    "_wait_for_tstate_lock",
    "accept (socket.py",
    "_worker (concurrent/futures/thread.py:81)",  # idle pool thread waiting for work
)


def _is_idle(frames: list[str]) -> bool:
    """Stacks parked in a wait (daemon select loop, socket read, lock): not CPU work.

    py-spy's default already drops most idle threads, but a process blocked in
    ``select``/``recv`` through a C call is often still sampled; counting those would
    bury the frames that do use the CPU.
    """
    leaf = frames[-1]
    return any(marker in leaf for marker in _IDLE_LEAVES)


def _short(frame: str) -> str:
    """``func (path/to/site-packages/pkg/mod.py:12)`` -> ``func (pkg/mod.py:12)``."""
    for marker in ("site-packages/", "/work/main/"):
        if marker in frame:
            head, _, tail = frame.partition(marker)
            name = head.split(" (")[0]
            return f"{name} ({tail}"
    return frame


def _write(results_dir: Path, name: str, title: str, how: str, raw: Path, env: dict) -> None:
    summary = summarise(raw)
    # The raw stacks, for flamegraph.pl or speedscope (gzip: they are megabytes of text).
    with (
        raw.open("rb") as source,
        gzip.open(results_dir / f"profile_{name}.collapsed.gz", "wb") as out,
    ):
        shutil.copyfileobj(source, out)
    payload = {"title": title, "how": how, "environment": env, **summary}
    (results_dir / f"profile_{name}.json").write_text(json.dumps(payload, indent=2) + "\n")
    print(f"profile {name}: {summary['samples']} samples -> profile_{name}.json", flush=True)


def profile_ingest(ctx: BenchContext) -> None:
    from benchmarks.ingest_ceiling import WARMUP_RECORDS

    stream = ctx.stream_with(ctx.sizes.backlog)
    raw = ctx.work_dir / "ingest.pyspy.txt"
    recorder: list[_Attached] = []

    def on_event(event: dict[str, Any], pid: int) -> None:
        if event.get("run") == "warmup":
            recorder.append(_Attached(pid, raw))
        elif event.get("run") == "warm" and recorder:
            recorder[0].stop()

    worker = ctx.spark("local[2]")
    try:
        worker.call(
            "ingest",
            {
                "stream": stream,
                "warmup_stream": ctx.stream_with(WARMUP_RECORDS, seed=3),
                "endpoint": ctx.endpoint_url,
                "data_dir": str(ctx.scratch("profile-ingest")),
                "namespace": "prof",
                "runs": "warm",
            },
            timeout_s=1800,
            on_event=on_event,
        )
    finally:
        for attached in recorder:
            attached.stop()
        ctx.stop_spark()
    _write(
        ctx.results_dir,
        "ingest",
        f"warm run_ingestion of {ctx.sizes.backlog:,} records (local[2])",
        "py-spy record --subprocesses over the Spark driver tree during the warm run only",
        raw,
        ctx.environment,
    )


def profile_derive(ctx: BenchContext) -> None:
    raw = ctx.work_dir / "derive.pyspy.txt"
    recorder: list[_Attached] = []

    def on_event(event: dict[str, Any], pid: int) -> None:
        if event.get("built") == "large" and not recorder:
            recorder.append(_Attached(pid, raw))

    worker = ctx.spark("local[2]")
    try:
        worker.call(
            "derive",
            {
                "data_dir": str(ctx.scratch("profile-derive")),
                "small": ctx.sizes.derive_small,
                "large": ctx.sizes.derive_large,
                "new_rows": ctx.sizes.derive_new_rows,
                "rounds": 1,
            },
            timeout_s=3600,
            on_event=on_event,
        )
    finally:
        for attached in recorder:
            attached.stop()
        ctx.stop_spark()
    _write(
        ctx.results_dir,
        "derive",
        f"refresh_downstream of {ctx.sizes.derive_new_rows:,} new rows on "
        f"{ctx.sizes.derive_small:,}- and {ctx.sizes.derive_large:,}-row raw tables",
        "py-spy record --subprocesses over the Spark driver tree during the timed refreshes",
        raw,
        ctx.environment,
    )


def profile_freshness(ctx: BenchContext) -> None:
    from benchmarks import freshness

    raw = ctx.work_dir / "freshness.pyspy.txt"
    recorder: list[_Attached] = []

    def observe(phase: str, pid: int) -> None:
        if phase == "steady":
            recorder.append(_Attached(pid, raw))
        elif phase == "done" and recorder:
            recorder[0].stop()

    try:
        freshness.measure(ctx, "1 second", observe=observe)
    finally:
        for attached in recorder:
            attached.stop()
        ctx.stop_spark()
    _write(
        ctx.results_dir,
        "freshness",
        f"run_continuous, trigger 1 second, {ctx.sizes.freshness_rate:,} records/s",
        "py-spy record --subprocesses over the Spark driver tree during the steady-state "
        "window only",
        raw,
        ctx.environment,
    )


def profile_commits(ctx: BenchContext) -> None:
    raw = ctx.work_dir / "commits.pyspy.txt"
    command = [
        _py_spy(),
        "record",
        "--format",
        "raw",
        "--rate",
        "200",
        "-o",
        str(raw),
        "--",
        sys.executable,
        "-m",
        "benchmarks.profile",
        "--commit-loop",
        str(ctx.sizes.commits),
        "--work-dir",
        str(ctx.scratch("profile-commits")),
    ]
    subprocess.run(command, check=True, timeout=3600, capture_output=True)
    _write(
        ctx.results_dir,
        "commits",
        f"benchmark 5's commit loop, {ctx.sizes.commits} commits with expiry",
        "py-spy record of a child process running benchmarks.commit_cost.run",
        raw,
        ctx.environment,
    )


def _commit_loop(commits: int, work_dir: Path) -> None:
    from benchmarks import commit_cost

    sizes = Sizes.for_mode("quick")
    ctx = BenchContext(
        mode="profile",
        scale=1.0,
        sizes=Sizes(**{**sizes.__dict__, "commits": commits}),
        endpoint_url="",
        work_dir=work_dir,
        results_dir=work_dir,
        environment={},
    )
    commit_cost.run(ctx)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=0.25)
    parser.add_argument("--only", default="ingest,freshness,derive,commits")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    parser.add_argument("--commit-loop", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--work-dir", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    configure_process_env()
    if args.commit_loop:
        _commit_loop(args.commit_loop, args.work_dir)
        return
    from benchmarks.run import _endpoint_pid
    from kinesis_lake.kinesis.endpoint import LocalKinesisEndpoint

    work_dir = new_work_dir()
    environment = environment_info("profile", args.scale)
    args.results_dir.mkdir(parents=True, exist_ok=True)
    try:
        with LocalKinesisEndpoint("kinesalite") as endpoint:
            ctx = BenchContext(
                mode="profile",
                scale=args.scale,
                sizes=Sizes.for_mode("quick", args.scale),
                endpoint_url=endpoint.url,
                work_dir=work_dir,
                results_dir=args.results_dir,
                environment=environment,
                endpoint_pid=_endpoint_pid(),
            )
            jobs = {
                "ingest": profile_ingest,
                "freshness": profile_freshness,
                "derive": profile_derive,
                "commits": profile_commits,
            }
            for name in args.only.split(","):
                started = time.perf_counter()
                jobs[name.strip()](ctx)
                print(f"{name}: {time.perf_counter() - started:.0f} s", flush=True)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
