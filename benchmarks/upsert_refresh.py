"""Benchmark 8, upsert at scale (issue 34): a refresh after 1,000 uniformly random keys
were updated, on a table of N keys vs 10N keys (1M vs 10M in full mode; the quick mode
scales both and the file size down by the same factor, 50), target at most 1.5x; the
bytes each refresh writes; and a full read of the table after 100 refreshes, with and
without maintenance, against copy-on-write's read time (target at most 1.3x).

Per size, two ``profile_changes`` source tables are written directly with pyiceberg and
loaded into an upsert table each by one untimed refresh: one refreshed merge-on-read (the
default: position delete files), one set to copy-on-write, for comparison. Per round the
same number of updates of uniformly random existing users is appended to every source and
each ``refresh_upsert`` is timed; rounds interleave the tables so drift in machine load
hits all of them. With 1,000 uniform keys nearly every file holds a touched key:
copy-on-write rewrites the whole table each time, merge-on-read writes one delete file
and the new rows. Then the small tables are refreshed up to 100 times in all and read
whole with pyiceberg (median of 3), the merge-on-read one again after
``maintenance.compact`` folded its deletes.
"""

from __future__ import annotations

from statistics import median
from typing import Any

from benchmarks.context import BenchContext
from benchmarks.machine import load_now
from benchmarks.stats import ratio, verdict

NAME = "upsert_refresh"
SPARK_MASTERS = ("local[2]",)
TARGET = 1.5
READ_TARGET = 1.3
TABLES = ("mor_small", "mor_large", "cow_small", "cow_large")


def run(ctx: BenchContext) -> dict[str, Any]:
    sizes = ctx.sizes
    worker = ctx.spark("local[2]")
    load_before = load_now()
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
            "read_refreshes": sizes.upsert_read_refreshes,
        },
        timeout_s=7200,
    )
    refreshes = job.result["refreshes"]
    reads = job.result["reads"]

    def median_of(label: str, key: str) -> float:
        return median(r[key] for r in refreshes if r["table"] == label)

    seconds = {label: median_of(label, "seconds") for label in TABLES}
    headline = ratio(seconds["mor_large"], seconds["mor_small"])
    cow_read = reads["cow_small"]["read_s"]
    read_ratio = ratio(reads["mor_small"]["read_s"], cow_read)
    maintained_ratio = ratio(reads["mor_small_maintained"]["read_s"], cow_read)
    return {
        "keys": {"small": sizes.upsert_small, "large": sizes.upsert_large},
        "updates_per_refresh": sizes.upsert_updates,
        "rounds": sizes.upsert_rounds,
        "target_file_bytes": sizes.upsert_file_bytes,
        "build": job.result["build"],
        "refreshes": refreshes,
        "median_seconds": seconds,
        "median_bytes_written": {label: median_of(label, "bytes_written") for label in TABLES},
        "median_files_rewritten": {label: median_of(label, "files_rewritten") for label in TABLES},
        "median_rows_rewritten": {label: median_of(label, "rows_rewritten") for label in TABLES},
        "cow_ratio": ratio(seconds["cow_large"], seconds["cow_small"]),
        "ratio": headline,
        "target": f"<= {TARGET}",
        "verdict": verdict(headline, TARGET, at_least=False),
        "reads": reads,
        "read_ratio": read_ratio,
        "read_ratio_maintained": maintained_ratio,
        "read_target": f"<= {READ_TARGET}",
        "read_verdict": verdict(read_ratio, READ_TARGET, at_least=False),
        "read_verdict_maintained": verdict(maintained_ratio, READ_TARGET, at_least=False),
        "session_start_s": worker.session_start_s,
        "load_average_before": load_before,
        "load_average": load_now(),
        "notes": (
            "ratio = median merge-on-read refresh time with the large table / the small one, "
            f"the same {sizes.upsert_updates} uniformly random updated keys each time; "
            "read ratios = full pyiceberg read of the merge-on-read table after "
            f"{sizes.upsert_read_refreshes} refreshes (as left, then after compact folded "
            "its deletes) / the copy-on-write table's. Workers are warm."
        ),
    }
