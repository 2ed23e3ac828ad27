"""Random schedules from a seed, run, and shrunk to a minimal replay when one fails.

A seed determines everything: the stream's shape, the steps, and therefore every call
the real code makes (the simulated clock never reads the wall clock). So "seed 1234
fails" is a complete bug report, and the shrinker (delta debugging over the step list)
turns it into the few steps a regression test pins.
"""

from __future__ import annotations

import random
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from kinesis_lake_tests.simulation.driver import CRASH_POINTS
from kinesis_lake_tests.simulation.invariants import Violation
from kinesis_lake_tests.simulation.kinesis import GRANT, REFUSE
from kinesis_lake_tests.simulation.world import Step, run_schedule

_MINUTE = 60_000
_HOUR = 60 * _MINUTE


@dataclass(frozen=True)
class Schedule:
    seed: int
    shards: int
    trimmed_position: str
    steps: list[Step]

    def replay(self) -> str:
        """The schedule as the arguments of a regression test."""
        lines = ",\n".join(f"    {step!r}" for step in self.steps)
        return (
            f"run_schedule(root, [\n{lines},\n], shards={self.shards}, "
            f"trimmed_position={self.trimmed_position!r})"
        )


def generate(seed: int, *, short: bool = False) -> Schedule:
    """The schedule of ``seed``: 25-60 steps, or 8-20 when ``short`` (the bounded run of
    ``make test``: the defects found so far needed 4-10 steps, and short schedules try
    more beginnings in the same time)."""
    rng = random.Random(seed)
    steps = [_step(rng) for _ in range(rng.randint(8, 20) if short else rng.randint(25, 60))]
    return Schedule(seed, rng.randint(1, 3), rng.choice([GRANT, REFUSE]), steps)


def _advance(rng: random.Random) -> int:
    """Mostly seconds, often an hour, sometimes past retention: quiet spells and outages."""
    roll = rng.random()
    if roll < 0.5:
        return rng.randint(200, 10_000)
    if roll < 0.75:
        return rng.randint(_MINUTE, _HOUR)
    if roll < 0.95:
        return rng.randint(2 * _HOUR, 30 * _HOUR)
    return rng.randint(48 * _HOUR, 96 * _HOUR)


_KINDS: list[tuple[float, Callable[[random.Random], Step]]] = [
    (28, lambda r: ("put", r.randrange(8), r.randint(1, 8), r.random() < 0.1)),
    (13, lambda r: ("advance", _advance(r))),
    (3, lambda r: ("outage", _advance(r))),
    (
        14,
        lambda r: (
            "run",
            "main",
            r.randint(1, 4),
            r.choice(CRASH_POINTS) if r.random() < 0.2 else None,
        ),
    ),
    (10, lambda r: ("sensor",)),
    (2, lambda r: ("split", r.randrange(8))),
    (2, lambda r: ("merge", r.randrange(8))),
    (3, lambda r: ("throttle", r.randrange(8), r.randint(1, 6))),
    (2, lambda r: ("expire_iterators", r.randint(1, 3))),
    (2, lambda r: ("lagging_pages", r.randint(1, 3))),
    (
        5,
        lambda r: ("catalog_fault", r.random() < 0.6, r.choice(["unknown", "conflict", "generic"])),
    ),
    (2, lambda r: ("late_commit", r.choice(["unknown", "generic"]))),
    (2, lambda r: ("late_commits_land",)),
    (3, lambda r: ("save_checkpoint",)),
    (2, lambda r: ("second_writer", r.random() < 0.5)),
    (
        5,
        lambda r: (
            "run",
            "second",
            r.randint(1, 3),
            r.choice(CRASH_POINTS) if r.random() < 0.2 else None,
        ),
    ),
    (
        4,
        lambda r: ("race", *r.choice([("main", "second"), ("second", "main")]), r.randint(0, 5)),
    ),
    (1, lambda r: ("stop_second",)),
    (2, lambda r: ("lose_checkpoint",)),
    (3, lambda r: ("maintenance", r.random() < 0.5)),
]


def _step(rng: random.Random) -> Step:
    weights = [weight for weight, _ in _KINDS]
    _, make = rng.choices(_KINDS, weights=weights)[0]
    return make(rng)


@dataclass
class Figures:
    """What a run of many schedules did, for the report."""

    schedules: int = 0
    steps: int = 0
    faults: Counter[str] = field(default_factory=Counter)
    failures: list[tuple[Schedule, Violation]] = field(default_factory=list)

    def summary(self) -> str:
        faults = ", ".join(f"{kind} {count}" for kind, count in sorted(self.faults.items()))
        seeds: dict[str, list[str]] = {}
        for schedule, violation in self.failures:
            seeds.setdefault(violation.kind, []).append(str(schedule.seed))
        by_kind = ", ".join(
            f"{kind} {len(found)} (seeds {', '.join(found)})"
            for kind, found in sorted(seeds.items())
        )
        return (
            f"{self.schedules} schedules, {self.steps} steps; faults: {faults or 'none'}; "
            f"failures: {len(self.failures)}{': ' + by_kind if by_kind else ''}"
        )


def run(schedule: Schedule, figures: Figures | None = None) -> Violation | None:
    """Run ``schedule`` in a fresh temporary folder; the violation it found, if any."""
    with tempfile.TemporaryDirectory(prefix="kinesis-lake-sim-") as folder:
        try:
            state = run_schedule(
                Path(folder),
                schedule.steps,
                shards=schedule.shards,
                trimmed_position=schedule.trimmed_position,
            )
        except Violation as violation:
            if figures is not None:
                figures.schedules += 1
            return violation
    if figures is not None:
        figures.schedules += 1
        figures.steps += state.steps
        figures.faults.update(state.faults)
    return None


def shrink(schedule: Schedule, kind: str) -> Schedule:
    """The shortest sub-schedule found (ddmin) that still fails with ``kind``."""

    def fails(steps: list[Step]) -> bool:
        candidate = Schedule(schedule.seed, schedule.shards, schedule.trimmed_position, steps)
        found = run(candidate)
        return found is not None and found.kind == kind

    steps = list(schedule.steps)
    chunks = 2
    while len(steps) >= 2:
        size = max(1, len(steps) // chunks)
        reduced = False
        for start in range(0, len(steps), size):
            candidate = steps[:start] + steps[start + size :]
            if candidate and fails(candidate):
                steps, chunks, reduced = candidate, max(chunks - 1, 2), True
                break
        if not reduced:
            if size == 1:
                break
            chunks = min(chunks * 2, len(steps))
    return Schedule(schedule.seed, schedule.shards, schedule.trimmed_position, steps)
