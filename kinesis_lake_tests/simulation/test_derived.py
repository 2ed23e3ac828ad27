"""The bounded Spark-in-the-loop run of the derived-table simulation (``derived.py``).

``make test`` runs a sample of fixed seeds (``SIM_DERIVED_SEEDS``, default one schedule;
each takes about a minute on two cores); ``python -m kinesis_lake_tests.simulation.derived
--schedules N`` runs many. A failure prints the seed and its step list; each bug found is a
fixed short schedule below.
"""

from __future__ import annotations

import logging
import os

from kinesis_lake_tests.simulation.derived import Figures, run_schedule
from kinesis_lake_tests.simulation.derived_schedules import Schedule, Step, generate

SEEDS = [int(s) for s in os.environ.get("SIM_DERIVED_SEEDS", "2").split(",")]


def test_a_sample_of_schedules_keeps_every_derived_table_equal_to_its_model(
    spark, kinesalite_endpoint, settings_factory
):
    logging.disable(logging.WARNING)
    try:
        base = settings_factory(kinesalite_endpoint)
        base.data_dir.parent.mkdir(parents=True, exist_ok=True)
        figures = Figures()
        failures = []
        for seed in SEEDS:
            schedule = generate(seed, steps=(4, 8), faults=False)
            violation = run_schedule(spark, base, schedule, figures)
            if violation is not None:
                failures.append(f"seed {seed}: {violation}\n{schedule.replay()}")
        print(figures.summary())
        assert not failures, "\n\n".join(failures)
    finally:
        logging.disable(logging.NOTSET)


def test_the_model_is_not_vacuous(spark, kinesalite_endpoint, settings_factory):
    """A fixed schedule that covers a repeat of a dedup key on the same day, a value too big
    for int, an unrouted and a malformed record, versions out of order, a widening, a replay
    before the next refresh and a re-created input: the model agrees with the lake."""
    base = settings_factory(kinesalite_endpoint)
    base.data_dir.parent.mkdir(parents=True, exist_ok=True)
    at = "2024-05-01T10:00:00Z"
    schedule = Schedule(
        0,
        [
            Step(
                "put",
                (
                    {"id": "v1", "type": "view", "n": 1, "at": at},
                    {"id": "v1", "type": "view", "n": 2, "at": "2024-05-01T23:00:00Z"},
                    {"id": "b1", "type": "view", "n": 3_000_000_000, "at": at},
                    {"id": "s1", "type": "signup"},
                    b"{broken",
                    {"id": "p1", "type": "profile", "user_id": "ann", "version": 2, "at": at},
                    {"id": "p2", "type": "profile", "user_id": "ann", "version": 1, "at": at},
                ),
            ),
            Step("derive"),
            Step("edit", arg="widen"),
            Step("replay"),
            Step("drop", arg="views"),
            Step("derive"),
        ],
    )
    assert run_schedule(spark, base, schedule) is None
