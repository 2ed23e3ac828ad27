"""The order files run in under ``-n 2 --dist loadfile``: the heaviest first.

pytest-xdist's loadfile hands whole files to whichever worker asks next, by default in
the order of their number of tests, most first (``--loadscope-reorder``). That puts the
one-test files last, and the slowest tests of the suite are one-test files (the soak, the
chaos run, the browser, ``spark-submit``, the AWS-shaped cluster): one of them started at
the end keeps one worker busy for minutes while the other has nothing left to take. Run
longest-first instead, so the hundreds of quick tests are what is left at the end, to fill
in beside the last long file.

A file's weight is the sum of its tests' typical seconds by kind (tiers.py finds the
kind at collection, so a new test needs nothing here): an estimate for ordering only,
never for passing or failing. Tests keep their order inside a file.
"""

from __future__ import annotations

import pytest

from kinesis_lake_tests.tiers import FAST, KINDS, PROCESSES, SPARK, SYSTEM

TYPICAL_SECONDS = {SYSTEM: 150.0, PROCESSES: 30.0, SPARK: 10.0, FAST: 0.25}
"""Worker seconds of a typical test of each kind on CI's 2 cores (make test at 953297d:
13 system tests of 60-460 s, CLI and JVM-starting tests ~30 s, in-process Spark ~10 s,
fast ones ~0.25 s)."""


def weight(item: pytest.Item) -> float:
    kinds = [mark.name for mark in item.iter_markers() if mark.name in KINDS]
    return TYPICAL_SECONDS[kinds[0]] if kinds else TYPICAL_SECONDS[PROCESSES]


def heaviest_files_first(items: list[pytest.Item]) -> None:
    """Reorder ``items`` in place: files by total weight, heaviest first (ties keep
    collection order), each file's tests in their own order."""
    files: dict[str, list[pytest.Item]] = {}
    for item in items:
        files.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    ordered = sorted(files.values(), key=lambda tests: -sum(weight(test) for test in tests))
    items[:] = [item for tests in ordered for item in tests]


def use_our_order(config: pytest.Config) -> None:
    """Keep xdist from re-sorting the files by their number of tests (its default)."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False
