"""Benchmark 6: peak memory of the ingestion driver, backlog of N vs 10N records.

Runs ``python -m kinesis_lake.cli ingest`` (a fresh process: Python driver, its Spark JVM,
and in local mode the Python workers) exactly as an operator would, with the settings in
the environment, and samples the summed RSS of that whole process tree every 200 ms with
psutil. The two backlogs are separate 4-shard streams; ``max_records_per_shard`` keeps
its default, so the larger backlog takes more micro-batches rather than bigger ones,
which is what should keep memory flat.
"""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any

from benchmarks.context import BenchContext
from benchmarks.machine import load_now
from benchmarks.processes import TreeRssSampler, kill_tree
from benchmarks.sandbox import REGION
from benchmarks.stats import ratio, verdict
from benchmarks.streams import settings_env, settings_for

NAME = "memory"
SPARK_MASTERS: tuple[str, ...] = ()  # its own CLI processes
TARGET = 1.3
CONNECT_PORT = 15013  # not make dev's 15002 nor benchmark 10's 15012
CONNECT_WARM_UP_RECORDS = 2_000
_INGESTED = re.compile(r"ingested (\d+) rows from \S+ in (\d+) micro-batches \(([\d,.]+) rows/s\)")


def cli_ingest(
    ctx: BenchContext, records: int, *, spark_master: str = "local[2]"
) -> dict[str, Any]:
    """``kinesis-lake ingest`` of a ``records`` backlog in a new process (cached per size
    and master).

    Also the end-to-end measurement of benchmark 1: a fresh process, JVM start-up and
    the first micro-batch's Python-worker start-up included; with an ``sc://`` master
    the process attaches to a Spark Connect server instead and starts no JVM.
    """
    connect = spark_master.startswith("sc://")
    key = f"cli_ingest:{records}:{'connect' if connect else spark_master}"
    if key in ctx.shared:
        return ctx.shared[key]
    label = f"cli{records}{'connect' if connect else ''}"
    stream = ctx.stream_with(records)
    settings = settings_for(
        ctx, stream, label, data_dir=ctx.scratch(f"memory-{label}"), spark_master=spark_master
    )
    log_path = ctx.work_dir / f"memory-{label}.log"
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "kinesis_lake.cli", "ingest"],
            env=settings_env(settings),
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        with TreeRssSampler(process.pid, interval_s=0.5, pss=True) as sampler:
            try:
                process.wait(timeout=3600)
            except BaseException:
                kill_tree(process)
                raise
    output = log_path.read_text(errors="replace")
    match = _INGESTED.search(output)
    if process.returncode != 0 or match is None or int(match.group(1)) != records:
        raise RuntimeError(f"cli ingest of {records} records failed:\n{output[-3000:]}")
    wall = sampler.samples[-1][0] if sampler.samples else None
    result = {
        "records": records,
        "micro_batches": int(match.group(2)),
        # run_ingestion's own rows/s: query start + first batch's worker start-up included.
        "run_ingestion_rows_per_second": float(match.group(3).replace(",", "")),
        "process_seconds": round(wall, 2) if wall else None,
        "process_rows_per_second": round(records / wall, 1) if wall else None,
        "peak_rss_mb": round(sampler.peak_mb, 1),
        "peak_rss_by_kind_mb": _kinds(sampler.peak_by_kind),
        "peak_pss_mb": round(sampler.peak_pss_mb, 1),
        "peak_pss_by_kind_mb": _kinds(sampler.peak_pss_by_kind),
        "max_processes": sampler.max_processes,
        "samples": [(round(t, 2), round(v, 1)) for t, v, _ in sampler.samples],
        "pss_samples": [(round(t, 2), round(v, 1)) for t, v in sampler.pss_samples],
        "seconds": round(wall, 1) if wall else None,
        "load_average": load_now(),
    }
    ctx.shared[key] = result
    return result


def cli_ingest_over_connect(ctx: BenchContext, records: int) -> dict[str, Any]:
    """``cli_ingest`` attached to a Spark Connect server (cached): the deployment ``make
    dev`` runs. The server starts first and is warmed by one small ingest of its own, as
    a long-lived server has run queries before; its JVM start is not the command's."""
    from kinesis_lake.spark.runtime.connect_server import ConnectServer

    key = f"cli_ingest:{records}:connect"
    if key in ctx.shared:
        return ctx.shared[key]
    server_dir = ctx.scratch("cli-connect-server")
    with ConnectServer(port=CONNECT_PORT, log_dir=server_dir, env={"AWS_REGION": REGION}) as server:
        cli_ingest(ctx, CONNECT_WARM_UP_RECORDS, spark_master=server.url)
        return cli_ingest(ctx, records, spark_master=server.url)


def _kinds(peaks: dict[str, float]) -> dict[str, float]:
    """Peaks of the JVM and Python processes (shell helpers of spark-submit are noise)."""
    return {k: round(v, 1) for k, v in peaks.items() if k in ("jvm", "python")}


def run(ctx: BenchContext) -> dict[str, Any]:
    small = cli_ingest(ctx, ctx.sizes.memory_small)
    large = cli_ingest(ctx, ctx.sizes.memory_large)
    headline = ratio(large["peak_rss_mb"], small["peak_rss_mb"])
    return {
        "small": small,
        "large": large,
        "ratio": headline,
        "ratio_pss": ratio(large["peak_pss_mb"], small["peak_pss_mb"]),
        "ratio_jvm": ratio(
            large["peak_rss_by_kind_mb"].get("jvm"), small["peak_rss_by_kind_mb"].get("jvm")
        ),
        "ratio_python": ratio(
            large["peak_rss_by_kind_mb"].get("python"), small["peak_rss_by_kind_mb"].get("python")
        ),
        "target": f"<= {TARGET}",
        "verdict": verdict(headline, TARGET, at_least=False),
        "load_average": load_now(),
        "notes": (
            "peak of the summed RSS of the `kinesis-lake ingest` process tree (Python "
            "driver + Spark JVM + Python workers), sampled every 0.5 s; local[2]. Summed "
            "RSS counts memory shared by forked Python workers once per process; the PSS "
            "sum (ratio_pss) splits it fairly."
        ),
    }
