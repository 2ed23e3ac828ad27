"""Benchmark 7: scale-out, 1 vs 2 executors reading the same 4-shard backlog.

Each master gets a fresh driver JVM and a local standalone cluster of that many
1-core, 1 GiB executors (``local-cluster[N,1,1024]``: real separate executor JVMs with
their own Python workers), ingests a small warm-up stream, then the backlog, as in
benchmark 1. The ratio compares the warm runs.

On a 2-core machine this cannot show linear scale-out: two executors share the same
two cores with the driver JVM, kinesalite (one Node thread that answers every
GetRecords) and whatever else runs, so the second executor mostly adds contention. The
result is reported with the CPU time the pieces used, to say which resource ran out.
"""

from __future__ import annotations

from typing import Any

from benchmarks.context import BenchContext
from benchmarks.ingest_ceiling import ours_ingest
from benchmarks.machine import load_now
from benchmarks.stats import ratio, verdict

NAME = "scale_out"
TARGET = 1.6
MASTERS = {"one": "local-cluster[1,1,1024]", "two": "local-cluster[2,1,1024]"}
SPARK_MASTERS = tuple(MASTERS.values())


def run(ctx: BenchContext) -> dict[str, Any]:
    results = {}
    for label, master in MASTERS.items():
        try:
            results[label] = ours_ingest(ctx, master=master, label=f"cluster-{label}")
        finally:
            ctx.stop_spark(master)  # never two clusters at once on 2 cores
    one = results["one"]["runs"]["warm"]["rows_per_second"]
    two = results["two"]["runs"]["warm"]["rows_per_second"]
    headline = ratio(two, one)
    return {
        "records": ctx.sizes.backlog,
        "masters": MASTERS,
        "runs": results,
        "rows_per_second": {"one_executor": one, "two_executors": two},
        "ratio": headline,
        "ratio_batches_only": ratio(
            results["two"]["runs"]["warm"]["batch_rows_per_second"],
            results["one"]["runs"]["warm"]["batch_rows_per_second"],
        ),
        "cores": ctx.environment.get("cores_logical"),
        "target": f">= {TARGET}",
        "verdict": verdict(headline, TARGET, at_least=True),
        "load_average": load_now(),
        "notes": (
            "warm-run rows/s with 2 executors / with 1 executor (each 1 core, 1 GiB). "
            "The machine has only "
            f"{ctx.environment.get('cores_logical')} cores for driver, executors and "
            "kinesalite together."
        ),
    }
