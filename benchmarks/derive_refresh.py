"""Benchmark 4: incremental derived refresh, small vs 10x larger raw table.

Two raw tables (``derive_small`` and ``derive_large`` rows, 10x apart) are built directly
with pyiceberg appends of sample events (the raw schema, ``RAW_ARROW_SCHEMA``); going
through Kinesis would only make the setup slower. One ``refresh_downstream`` brings each
table's derived tables up to date and commits their watermark. Then, per round, the
same number of new raw rows (later events, as a live stream adds) is appended to each
table and ``refresh_downstream`` is timed; rounds alternate small/large so that drift in
machine load hits both. All events fall on one UTC day, the normal case for a busy
stream (the day partition is what the duplicate check and window counts look into).

Evidence of where the time goes is collected in the Spark child: the files and rows each
step reads (a wrapper around ``read_table_files``) and the time of each step.
"""

from __future__ import annotations

from statistics import median
from typing import Any

from benchmarks.context import BenchContext
from benchmarks.machine import load_now
from benchmarks.stats import ratio, verdict

NAME = "derive_refresh"
SPARK_MASTERS = ("local[2]",)
TARGET = 1.2


def run(ctx: BenchContext) -> dict[str, Any]:
    sizes = ctx.sizes
    worker = ctx.spark("local[2]")
    job = worker.call(
        "derive",
        {
            "data_dir": str(ctx.scratch("derive")),
            "namespace": "derive",
            "small": sizes.derive_small,
            "large": sizes.derive_large,
            "new_rows": sizes.derive_new_rows,
            "rounds": sizes.derive_rounds,
        },
        timeout_s=3600,
    )
    refreshes = job.result["refreshes"]
    for refresh in refreshes:
        if refresh["raw_rows_read"] != sizes.derive_new_rows:
            raise RuntimeError(f"refresh read {refresh['raw_rows_read']} new raw rows: {refresh}")
    small = [r["seconds"] for r in refreshes if r["table"] == "small"]
    large = [r["seconds"] for r in refreshes if r["table"] == "large"]
    headline = ratio(median(large), median(small))
    reads = _reads_by_step(refreshes)
    return {
        "raw_rows": {"small": sizes.derive_small, "large": sizes.derive_large},
        "new_rows_per_refresh": sizes.derive_new_rows,
        "rounds": sizes.derive_rounds,
        "build": job.result["build"],
        "refreshes": refreshes,
        "median_seconds": {"small": median(small), "large": median(large)},
        "rows_read_by_step": reads,
        "ratio": headline,
        "target": f"<= {TARGET}",
        "verdict": verdict(headline, TARGET, at_least=False),
        "session_start_s": worker.session_start_s,
        "load_average": load_now(),
        "notes": (
            "ratio = median refresh time with the large raw table / with the small one, "
            f"same {sizes.derive_new_rows} new raw rows each time. Workers are warm: "
            "the first (untimed) refresh of each table ran before, in the same JVM."
        ),
    }


def _reads_by_step(refreshes: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Median rows read per step and table size: shows which step grows with the table."""
    out: dict[str, dict[str, int]] = {}
    for label in ("small", "large"):
        per_step: dict[str, list[int]] = {}
        for refresh in refreshes:
            if refresh["table"] != label:
                continue
            totals: dict[str, int] = {}
            for read in refresh["reads"]:
                totals[read["step"]] = totals.get(read["step"], 0) + read["rows"]
            for step, rows in totals.items():
                per_step.setdefault(step, []).append(rows)
        out[label] = {step: int(median(rows)) for step, rows in per_step.items()}
    return out
