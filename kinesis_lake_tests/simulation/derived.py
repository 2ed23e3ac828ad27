"""A seeded, Spark-in-the-loop simulation of the derived tables (issue 31, "The simulation").

Each schedule (a seeded RNG draws 4 to ~12 steps) runs against the real local stack: a local
Kinesis endpoint (kinesalite), a real Spark session, a SQLite Iceberg catalog under a
temporary directory and a declaration file it writes and edits. Steps: put records (valid,
malformed JSON, unrouted, a field of the wrong type, a value too big for ``int``, a repeat
of a dedup key on the same UTC day, upsert versions out of order, deletes); ``ingest
--derive`` (``run_ingestion`` then ``refresh_downstream``, what the CLI calls); a derive in
a new process whose commit of one table fails or lands then raises; declaration edits (a new
table, a new optional field, ``int`` widened to ``long``); ``replay``; dropping a routed
table (the input of the SQL tables) or a derived table so that the next refresh re-creates
and rebuilds it (what the ``SnapshotExpiredError`` message advises); maintenance
(compaction, folding the upsert table's deletes, and snapshot expiry; the upsert table
rewrites its mostly deleted files from its first deleted row); and a race: a derive in a new
process inside one of whose commits (of a routed, quarantine or derived table, whichever
process Spark commits it in) a maintenance pass with the tightest policy (compact, keep one
snapshot, none by age) runs over a source table, the raw table included, before that commit
lands, as a schedule racing the refresh does on a busy deployment. With the defect 32750b0
fixed put back by hand (expiry ignoring a table before its first refresh), ``put, derive,
put, edit(add_table), race(raw_events@signups)`` finds it (reconcile: a record repeated);
the schedules with races pass on the fixed code. Races draw only with faults on (they start
a process each), so ``make test``'s sample does not run them: ``make simulate-derived``
does.

After every step the lake is compared with a reference model kept in plain Python from
what was put (routing by the record's ``type`` and field validity written here, not taken
from ``kinesis_lake.events``): no record twice in any table; each routed table holds
exactly the records its route and fields take (``dedup``: the first per key and UTC day,
in Kinesis order), the upsert table equals the winners, the windowed and full SQL tables
equal their SQL re-run with DuckDB over their inputs as they are now, and the pipeline's
own ``reconciles_with_raw`` computation passes; and before a derive with nothing but
records since the last one, a fresh read of each table it offers (raw, routed, upsert)
equals, row for row, that table after the derive. After a step that failed on purpose only
"no record twice" is checked; the next successful step must converge.

The schedules and their draw are in ``derived_schedules``, the model and the invariants in
``derived_invariants``; this module runs them against the stack.

``python -m kinesis_lake_tests.simulation.derived --schedules N [--seed S]`` runs N
schedules, prints figures and, for each failure, its seed and a shrunk step list.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kinesis_lake.config import Settings
from kinesis_lake.iceberg.dead_rows import FLOOR_PROPERTY
from kinesis_lake.iceberg.summary import REWRITTEN_RECORDS
from kinesis_lake.pipeline.derive import refresh_downstream
from kinesis_lake.pipeline.ingest import run_ingestion
from kinesis_lake.pipeline.lake import open_lake
from kinesis_lake.pipeline.maintain import MaintenancePolicy, run_maintenance
from kinesis_lake.pipeline.replay import replay_quarantine
from kinesis_lake_tests.pipeline_helpers import put
from kinesis_lake_tests.simulation.derived_invariants import (
    Model,
    Violation,
    check,
    check_fresh,
    fresh_reads,
    table_identifier,
)
from kinesis_lake_tests.simulation.derived_schedules import ROUTED, Schedule, declaration, generate


@dataclass
class Figures:
    schedules: int = 0
    steps: Counter = field(default_factory=Counter)
    faults: Counter = field(default_factory=Counter)  # failing commits: table/mode, outcome
    failures: list[tuple[Schedule, Violation]] = field(default_factory=list)
    seconds: float = 0.0
    rewrites: int = 0  # upsert refreshes that rewrote mostly deleted files

    def summary(self) -> str:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(self.steps.items()))
        faults = ", ".join(f"{k} {v}" for k, v in sorted(self.faults.items()))
        return (
            f"{self.schedules} schedules, {sum(self.steps.values())} steps ({kinds}), "
            f"failing commits ({faults or 'none'}), {self.rewrites} upsert rewrites, "
            f"{len(self.failures)} failed, {self.seconds:.0f} s"
        )


def _put(settings: Settings, model: Model, records: tuple[Any, ...]) -> None:
    model.put += zip(put(settings, *records), records, strict=True)


def _ingest(spark: Any, settings: Settings, model: Model) -> None:
    run_ingestion(spark, settings)
    model.ingested = len(model.put)


def _fail(settings: Settings, arg: str) -> bool:
    """The derive in a new process; True if the armed commit came and failed it."""
    from kinesis_lake_tests.pipeline_helpers import derive_with_a_failing_commit

    table, mode = arg.split("/")
    return (
        derive_with_a_failing_commit(
            settings, table_identifier(settings, table), mode=mode
        ).returncode
        != 0
    )


def upkeep_with_the_tightest_policy(table: str) -> None:
    """A maintenance pass over ``table`` that keeps one snapshot and none by age, in
    whichever process a raced commit runs it (the lake's settings are in its environment)."""
    settings = Settings.from_env()
    if open_lake(settings).table_exists(settings.table_identifier(table)):
        policy = MaintenancePolicy(snapshot_max_age_hours=0, retain_last_snapshots=1)
        run_maintenance(settings, table, policy)


def _race(settings: Settings, arg: str) -> bool:
    """The derive in a new process with upkeep of ``source`` inside the commit of ``table``;
    True if that commit came (the pass ran). A derive that fails is a finding."""
    from kinesis_lake_tests.ambiguous_catalog import pending
    from kinesis_lake_tests.pipeline_helpers import derive_raced_inside_a_commit

    source, table = arg.split("@")
    faults = settings.data_dir.parent / "catalog-faults.json"
    faults.unlink(missing_ok=True)  # a fault a ``fail`` step armed and no commit took
    call = f"kinesis_lake_tests.simulation.derived:{upkeep_with_the_tightest_policy.__name__}"
    done = derive_raced_inside_a_commit(settings, table_identifier(settings, table), call, source)
    raced = pending(faults) == 0
    faults.unlink(missing_ok=True)
    if done.returncode != 0:
        raise Violation("raced-derive-failed", done.stderr[-2000:])
    return raced


def _rewrite_small_tables(settings: Settings) -> None:
    """The upsert table's refreshes rewrite its mostly deleted files from its first deleted
    row (``iceberg/dead_rows.py``; by default only past 1,000): the simulation's tables are
    small, and the rewrites must race folds, failures and replays too."""
    catalog = open_lake(settings)
    identifier = settings.table_identifier("profiles")
    if catalog.table_exists(identifier):
        table = catalog.load_table(identifier)
        if table.properties.get(FLOOR_PROPERTY) != "0":
            with table.transaction() as tx:
                tx.set_properties({FLOOR_PROPERTY: "0"})


def _upsert_rewrites(settings: Settings) -> int:
    """The upsert table's snapshots that rewrote files (those expiry left)."""
    catalog = open_lake(settings)
    identifier = settings.table_identifier("profiles")
    if not catalog.table_exists(identifier):
        return 0
    snapshots = catalog.load_table(identifier).metadata.snapshots
    return sum(1 for s in snapshots if s.summary and s.summary.get(REWRITTEN_RECORDS))


def run_schedule(
    spark: Any, base: Settings, schedule: Schedule, figures: Figures | None = None
) -> Violation | None:
    """Run ``schedule`` on a fresh stream and catalog under ``base.data_dir``'s parent."""
    root = Path(tempfile.mkdtemp(prefix=f"derived-{schedule.seed}-", dir=base.data_dir.parent))
    path = root / "lake.yaml"
    path.write_text(declaration(set()))
    settings = replace(
        base,
        stream_name=f"sim-{uuid.uuid4().hex[:10]}",
        data_dir=root / "data",
        event_schema_path=path,
        shard_count=1,
        checkpoint_dir="",
        source_progress_dir="",
    )
    model = Model()
    path.write_text(declaration(model.edits))
    started = time.monotonic()
    try:
        for index, step in enumerate(schedule.steps):
            _rewrite_small_tables(settings)
            if step.kind == "put":
                _put(settings, model, step.records)
            elif step.kind == "derive":
                shown = None if model.unsettled else fresh_reads(settings, model)
                _ingest(spark, settings, model)
                refresh_downstream(spark, settings)
                model.derive()
                model.unsettled = False
                if shown is not None:
                    try:
                        check_fresh(settings, shown)
                    except Violation as violation:
                        detail = f"step {index} {step}: {violation}"
                        raise Violation(violation.kind, detail) from None
            elif step.kind == "fail":
                _ingest(spark, settings, model)
                fired = _fail(settings, step.arg)
                model.unsettled = True
                if figures is not None:
                    figures.faults[f"{step.arg}-{'fired' if fired else 'not-reached'}"] += 1
            elif step.kind == "race":
                _ingest(spark, settings, model)
                raced = _race(settings, step.arg)
                model.derive()
                model.unsettled = False
                if figures is not None:
                    figures.faults[f"race-{'ran' if raced else 'not-reached'}"] += 1
            elif step.kind == "edit":
                model.edits.add(step.arg)
                path.write_text(declaration(model.edits))
                model.unsettled = True  # the new table fills at the next refresh
            elif step.kind == "replay":
                if not open_lake(settings).table_exists(settings.quarantine_table):
                    continue
                replay_quarantine(spark, settings)
                model.replay()
            elif step.kind == "drop":
                catalog = open_lake(settings)
                if catalog.table_exists(settings.table_identifier(step.arg)):
                    catalog.drop_table(settings.table_identifier(step.arg))
                    if step.arg in ROUTED:
                        model.drop(step.arg)
                model.unsettled = True  # rebuilt at the next refresh
            elif step.kind == "maintain" and open_lake(settings).table_exists(
                settings.table_identifier(step.arg)
            ):
                run_maintenance(
                    settings,
                    step.arg,
                    MaintenancePolicy(snapshot_max_age_hours=0, retain_last_snapshots=1),
                )
            if figures is not None:
                figures.steps[step.kind] += 1
            if model.derived_once or step.kind in ("derive", "replay"):
                try:
                    check(settings, model, converged=not model.unsettled)
                except Violation as violation:
                    raise Violation(
                        violation.kind, f"after step {index} {step}: {violation}"
                    ) from None
    except Violation as violation:
        return violation
    except Exception as error:  # a step that raised is a finding too
        return Violation(f"raised-{type(error).__name__}", f"{error}"[:2000])
    finally:
        if figures is not None:
            figures.schedules += 1
            figures.seconds += time.monotonic() - started
            figures.rewrites += _upsert_rewrites(settings)
        shutil.rmtree(root, ignore_errors=True)
    return None


def shrink(spark: Any, base: Settings, schedule: Schedule, kind: str) -> Schedule:
    """Drop steps one at a time (keeping the final derive) while the same kind recurs."""
    steps = list(schedule.steps)
    index = 0
    while index < len(steps) - 1:
        trial = Schedule(schedule.seed, steps[:index] + steps[index + 1 :])
        found = run_schedule(spark, base, trial)
        if found is not None and found.kind == kind:
            steps = trial.steps
        else:
            index += 1
    return Schedule(schedule.seed, steps)


# ---------------------------------------------------------------- command line


@contextmanager
def _stack() -> Iterator[tuple[Any, Settings]]:
    from kinesis_lake.kinesis.endpoint import LocalKinesisEndpoint
    from kinesis_lake.spark.runtime.session import build_spark_session
    from kinesis_lake_tests.aws_env import FAKE_AWS_ENV

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    for key, value in FAKE_AWS_ENV.items():
        os.environ.setdefault(key, value)
    root = Path(tempfile.mkdtemp(prefix="simulate-derived-"))
    with LocalKinesisEndpoint("kinesalite") as endpoint:
        spark = build_spark_session("local[2]", app_name="simulate-derived")
        try:
            yield (
                spark,
                Settings(
                    stream_name="unused",
                    endpoint_url=endpoint.url,
                    region="us-east-1",
                    shard_count=1,
                    starting_position="trim_horizon",
                    data_dir=root / "data",
                    namespace="lake",
                ),
            )
        finally:
            spark.stop()
            shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kinesis_lake_tests.simulation.derived")
    parser.add_argument("--schedules", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-faults", action="store_true", help="no failing commits")
    parser.add_argument("--no-shrink", action="store_true")
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)
    figures = Figures()
    with _stack() as (spark, base):
        base.data_dir.parent.mkdir(parents=True, exist_ok=True)
        for seed in range(args.seed, args.seed + args.schedules):
            schedule = generate(seed, faults=not args.no_faults)
            violation = run_schedule(spark, base, schedule, figures)
            status = "ok" if violation is None else f"FAILED {violation}"
            print(f"seed {seed} ({len(schedule.steps)} steps): {status}", flush=True)
            if violation is not None:
                figures.failures.append((schedule, violation))
        print(figures.summary(), flush=True)
        for schedule, violation in figures.failures:
            shown = schedule if args.no_shrink else shrink(spark, base, schedule, violation.kind)
            print(f"\nseed {schedule.seed}: {violation.kind}; steps:\n{shown.replay()}")
    return 1 if figures.failures else 0


if __name__ == "__main__":
    sys.exit(main())
