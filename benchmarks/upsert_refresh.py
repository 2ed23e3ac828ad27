"""Benchmark 8: an upsert refresh on a table of N keys vs 10N keys (issue 13's target: at
most 1.3x).

Two ``profile_changes`` source tables (``upsert_small`` and ``upsert_large`` users, one
row each) are written directly with pyiceberg and loaded into their upsert tables by one
untimed refresh. Then, per round, the same number of updates of random existing users is
appended to each source and ``refresh_upsert`` is timed; rounds alternate small/large so
that drift in machine load hits both. The files and rows each refresh rewrote
(copy-on-write) come from the commit's snapshot summaries: they are what should not grow
with the table.

Copy-on-write rewrites every file that holds a touched key, so a refresh's cost is bounded
by (touched keys) x (file size) once the table has many more files than a refresh touches
keys: what a large table with the default 8 MiB files has. These tables are small (a few
MiB), so they are written with ``upsert_file_bytes`` files to have that layout; with 8 MiB
files every bucket would be one file, and each refresh would rewrite all of them.
"""

from __future__ import annotations

from statistics import median
from typing import Any

from benchmarks.context import BenchContext
from benchmarks.machine import load_now
from benchmarks.stats import ratio, verdict

NAME = "upsert_refresh"
SPARK_MASTERS = ("local[2]",)
TARGET = 1.3


def run(ctx: BenchContext) -> dict[str, Any]:
    sizes = ctx.sizes
    worker = ctx.spark("local[2]")
    job = worker.call(
        "upsert",
        {
            "data_dir": str(ctx.scratch("upsert")),
            "namespace": "upsert",
            "small": sizes.upsert_small,
            "large": sizes.upsert_large,
            "new_rows": sizes.upsert_updates,
            "rounds": sizes.upsert_rounds,
            "file_bytes": sizes.upsert_file_bytes,
        },
        timeout_s=3600,
    )
    refreshes = job.result["refreshes"]
    small = [r["seconds"] for r in refreshes if r["table"] == "small"]
    large = [r["seconds"] for r in refreshes if r["table"] == "large"]
    headline = ratio(median(large), median(small))

    def median_of(label: str, key: str) -> float:
        return median(r[key] for r in refreshes if r["table"] == label)

    return {
        "keys": {"small": sizes.upsert_small, "large": sizes.upsert_large},
        "updates_per_refresh": sizes.upsert_updates,
        "rounds": sizes.upsert_rounds,
        "target_file_bytes": sizes.upsert_file_bytes,
        "build": job.result["build"],
        "refreshes": refreshes,
        "median_seconds": {"small": median(small), "large": median(large)},
        "median_files_rewritten": {
            label: median_of(label, "files_rewritten") for label in ("small", "large")
        },
        "median_rows_rewritten": {
            label: median_of(label, "rows_rewritten") for label in ("small", "large")
        },
        "ratio": headline,
        "target": f"<= {TARGET}",
        "verdict": verdict(headline, TARGET, at_least=False),
        "session_start_s": worker.session_start_s,
        "load_average": load_now(),
        "notes": (
            "ratio = median refresh time with the large upsert table / with the small one, "
            f"the same {sizes.upsert_updates} updated keys each time. Workers are warm."
        ),
    }
