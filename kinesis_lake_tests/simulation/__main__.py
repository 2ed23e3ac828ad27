"""``python -m kinesis_lake_tests.simulation --seconds N [--seed S]``: simulate for N s.

Runs schedules with consecutive seeds from ``--seed`` until the time is up, prints the
figures (schedules, steps, faults of each kind, failures) and, for each failure, its seed
and a shrunk replay to paste into a regression test. Exit status 1 if any failed.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

from kinesis_lake_tests.simulation.schedules import Figures, generate, run, shrink


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kinesis_lake_tests.simulation")
    parser.add_argument("--seconds", type=float, default=60, help="how long to simulate")
    parser.add_argument("--seed", type=int, default=0, help="first schedule's seed")
    parser.add_argument("--no-shrink", action="store_true", help="print failures unshrunk")
    parser.add_argument("--short", action="store_true", help="8-20 steps per schedule")
    parser.add_argument(
        "--ignore",
        action="append",
        default=[],
        metavar="KIND",
        help="a violation kind known and open: it ends its schedule uncounted (repeatable)",
    )
    args = parser.parse_args(argv)
    # The code under test logs every retry and skipped gap; the figures say it shorter.
    logging.disable(logging.WARNING)
    figures = Figures()
    deadline = time.monotonic() + args.seconds
    seed = args.seed
    while time.monotonic() < deadline:
        schedule = generate(seed, short=args.short)
        violation = run(schedule, figures)
        if violation is not None and violation.kind in args.ignore:
            figures.faults[f"ignored-{violation.kind}"] += 1
        elif violation is not None:
            figures.failures.append((schedule, violation))
            print(f"seed {seed} FAILED: {violation}", flush=True)
        seed += 1
    print(figures.summary(), flush=True)
    for schedule, violation in figures.failures:
        shown = schedule if args.no_shrink else shrink(schedule, violation.kind)
        print(f"\nseed {schedule.seed}: {violation.kind}; minimal replay:\n{shown.replay()}")
    return 1 if figures.failures else 0


if __name__ == "__main__":
    sys.exit(main())
