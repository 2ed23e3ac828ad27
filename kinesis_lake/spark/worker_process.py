"""Cheaper Python workers: keep the imported code out of the garbage collector's way.

A reused PySpark worker runs a full ``gc.collect()`` after every task (``pyspark/daemon.py``),
and a full collection walks every tracked object: with pyarrow, pyiceberg, boto3 and
this package imported, that walk cost about a third of the worker's CPU in the
ingestion profile (``benchmarks/results/REPORT.md``). The imported modules live as long
as the process, so they are moved to the permanent generation once, the first time a
task of ours runs in the process; what tasks allocate later is still collected.
"""

from __future__ import annotations

import atexit
import gc
import os

_frozen_in_pid: int | None = None


def freeze_imported_objects() -> None:
    """Once per process (a forked worker gets its own pid, so it freezes its own heap)."""
    global _frozen_in_pid
    if _frozen_in_pid != os.getpid():
        gc.collect()
        gc.freeze()
        # Thaw at exit so the interpreter can still finalize what was frozen: otherwise
        # extension modules (DuckDB's nanobind bindings) report every live object as leaked.
        atexit.register(gc.unfreeze)
        _frozen_in_pid = os.getpid()
