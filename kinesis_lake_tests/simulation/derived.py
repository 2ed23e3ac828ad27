"""A seeded, Spark-in-the-loop simulation of the derived tables (issue 31, "The simulation").

Each schedule (a seeded RNG draws 4 to ~12 steps) runs against the real local stack: a
local Kinesis endpoint (kinesalite), a real Spark session, a SQLite Iceberg catalog under a
temporary directory and a declaration file it writes and edits. Steps: put records (valid,
malformed JSON, unrouted, a field of the wrong type, a value too big for ``int``, a repeat
of a dedup key on the same UTC day, upsert versions out of order, deletes); ``ingest
--derive`` (``run_ingestion`` then ``refresh_downstream``, what the CLI calls); a derive in a
new process whose commit of one table fails or lands then raises; declaration edits (a new
table, a new optional field, ``int`` widened to ``long``); ``replay``; dropping a routed
table (the input of the SQL tables) or a derived table so that the next refresh re-creates
and rebuilds it (what the ``SnapshotExpiredError`` message advises); maintenance
(compaction and snapshot expiry); and a race: a derive in a new process inside one of
whose commits (of a routed, quarantine or derived table, whichever process Spark commits it
in) a maintenance pass with the tightest policy (compact, keep one snapshot, none by age)
runs over a source table, the raw table included, before that commit lands, as a schedule
racing the refresh does on a busy deployment. With the defect 32750b0 fixed put back by
hand (expiry ignoring a table before its first refresh), ``put, derive, put,
edit(add_table), race(raw_events@signups)`` finds it (reconcile: a record repeated); the
schedules with races pass on the fixed code. Races draw only with faults on (they start a
process each), so ``make test``'s sample does not run them: ``make simulate-derived`` does.

After every step the lake is compared with a reference model kept in plain Python from
what was put (routing by the record's ``type`` and field validity written here, not taken
from ``kinesis_lake.events``): no record twice in any table; each routed table holds
exactly the records its route and fields take (``dedup``: the first per key and UTC day,
in Kinesis order), the upsert table equals the winners, the windowed and full SQL tables
equal their SQL re-run with DuckDB over their inputs as they are now, and the pipeline's
own ``reconciles_with_raw`` computation passes. After a step that failed on purpose only
"no record twice" is checked; the next successful step must converge.

``python -m kinesis_lake_tests.simulation.derived --schedules N [--seed S]`` runs N
schedules, prints figures and, for each failure, its seed and a shrunk step list.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import shutil
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb

from kinesis_lake.config import Settings
from kinesis_lake.kinesis.client import kinesis_client
from kinesis_lake.kinesis.streams import ensure_stream
from kinesis_lake.pipeline.derive import refresh_downstream
from kinesis_lake.pipeline.ingest import run_ingestion
from kinesis_lake.pipeline.lake import open_lake
from kinesis_lake.pipeline.maintain import MaintenancePolicy, run_maintenance
from kinesis_lake.pipeline.reconcile import reconcile_routed
from kinesis_lake.pipeline.replay import replay_quarantine

INT_MAX = 2**31 - 1
DAYS = ("2024-05-01", "2024-05-02")
HOURS = ("09", "10", "23")
USERS = ("ann", "bob", "cid")

BASE = """\
tables:
  - name: views
    route: {type: view}
    fields:
      - {name: id, type: string, required: true}
      - {name: n, type: int}
      - {name: at, type: timestamp, required: true}
    event_time_field: at
    dedup: id
  - name: updates
    route: {type: profile}
    fields:
      - {name: id, type: string, required: true}
      - {name: user_id, type: string}
      - {name: version, type: long, required: true}
      - {name: op, type: string}
      - {name: at, type: timestamp, required: true}
    event_time_field: at
derived:
  - name: profiles
    from: updates
    upsert: {key: user_id, version: version, delete: {field: op, equals: delete}}
  - name: views_per_hour
    sql: SELECT date_trunc('hour', at) AS hour, count(*) AS views, max(n) AS top
      FROM views GROUP BY 1
    refresh: windowed
    window: {column: at, size: hour, output: hour}
  - name: profile_count
    sql: SELECT count(*) AS profiles FROM profiles
    refresh: full
"""
SIGNUPS = """\
  - name: signups
    route: {type: signup}
    fields:
      - {name: id, type: string, required: true}
"""
EDITS = ("add_table", "add_field", "widen")
RAW = "raw_events"
ROUTED = ("views", "updates")
DERIVED = ("profiles", "views_per_hour", "profile_count")
SOURCES = {  # each table a derive commits to, with the table it reads
    "quarantine": RAW,
    **dict.fromkeys((*ROUTED, "signups"), RAW),  # signups: after the add_table edit
    "profiles": "updates",
    "views_per_hour": "views",
    "profile_count": "profiles",
}
READ = tuple(sorted(set(SOURCES.values())))  # sorted: a set's order varies per process
WINDOWED_SQL = (  # DuckDB's, "at" quoted
    "SELECT date_trunc('hour', \"at\") AS hour, count(*) AS views, max(n) AS top FROM views "
    "GROUP BY 1"
)


def declaration(edits: set[str]) -> str:
    text = BASE
    if "widen" in edits:
        text = text.replace("{name: n, type: int}", "{name: n, type: long}")
    if "add_field" in edits:
        text = text.replace(
            "      - {name: n, type:", "      - {name: note, type: string}\n      - {name: n, type:"
        )
    if "add_table" in edits:
        text = text.replace("derived:\n", SIGNUPS + "derived:\n")
    return text


# ---------------------------------------------------------------- schedules


@dataclass(frozen=True)
class Step:
    kind: str  # put | derive | fail | edit | replay | drop | maintain | race
    records: tuple[Any, ...] = ()  # put: dicts or bytes
    arg: str = ""  # fail: table/mode; edit: which; drop/maintain: table; race: source@table

    def __str__(self) -> str:
        if self.kind == "put":
            return f"put({', '.join(_show(r) for r in self.records)})"
        return f"{self.kind}({self.arg})" if self.arg else f"{self.kind}()"


def _show(record: Any) -> str:
    if isinstance(record, bytes):
        return repr(record)
    return json.dumps(record, separators=(",", ":"))


@dataclass
class Schedule:
    seed: int
    steps: list[Step]

    def replay(self) -> str:
        return "\n".join(f"  {i}. {s}" for i, s in enumerate(self.steps))


def _record(rng: random.Random, serial: int, views: list[dict]) -> Any:
    day, hour = rng.choice(DAYS), rng.choice(HOURS)
    at = f"{day}T{hour}:{rng.randrange(60):02d}:00Z"
    kind = rng.choices(
        ("view", "repeat", "malformed", "unrouted", "wrong", "big", "profile", "delete"),
        weights=(5, 2, 1, 2, 1, 1, 4, 1),
    )[0]
    if kind == "repeat" and views:
        first = rng.choice(views)
        # same key, same UTC day: a duplicate (another time that day)
        return {**first, "at": first["at"][:11] + f"{rng.choice(HOURS)}:59:00Z", "n": 1}
    if kind in ("view", "repeat"):
        record = {"id": f"v{serial}", "type": "view", "n": rng.randrange(100), "at": at}
        if rng.random() < 0.3:
            record["note"] = f"note{serial}"
        views.append(record)
        return record
    if kind == "malformed":
        return b'{"id": "m%d", "type": ' % serial
    if kind == "unrouted":
        return {"id": f"s{serial}", "type": "signup"}
    if kind == "wrong":
        return {"id": f"w{serial}", "type": "view", "n": "many", "at": at}
    if kind == "big":
        return {"id": f"b{serial}", "type": "view", "n": 3_000_000_000 + serial, "at": at}
    op = "delete" if kind == "delete" else "upsert"
    return {
        "id": f"p{serial}",
        "type": "profile",
        "user_id": rng.choice(USERS),
        "version": rng.randrange(1, 6),
        "op": op,
        "at": at,
    }


def generate(seed: int, *, steps: tuple[int, int] = (4, 12), faults: bool = True) -> Schedule:
    rng = random.Random(seed)
    serial = 0
    views: list[dict] = []
    edits = list(EDITS)
    rng.shuffle(edits)
    out: list[Step] = []
    for index in range(rng.randint(*steps)):
        choice = (
            "put"
            if index == 0
            else rng.choices(
                ("put", "derive", "fail", "edit", "replay", "drop", "maintain", "race"),
                # "race" last with no weight without faults: those schedules stay as they were
                weights=(5, 5, 1 if faults else 0, 2 if edits else 0, 2, 1, 1, 2 if faults else 0),
            )[0]
        )
        if choice == "put":
            records = []
            for _ in range(rng.randint(1, 5)):
                serial += 1
                records.append(_record(rng, serial, views))
            out.append(Step("put", tuple(records)))
        elif choice == "fail":
            table = rng.choice(("quarantine", "views", "updates", *DERIVED))
            mode = rng.choice(("raises-before", "lands-then-raises"))
            out.append(Step("fail", arg=f"{table}/{mode}"))
        elif choice == "edit":
            out.append(Step("edit", arg=edits.pop()))
        elif choice == "drop":
            out.append(Step("drop", arg=rng.choice(("views", "updates", *DERIVED))))
        elif choice == "maintain":
            out.append(Step("maintain", arg=rng.choice(ROUTED)))
        elif choice == "race":  # mostly upkeep of the very table the commit read
            table = rng.choice(tuple(SOURCES))
            source = SOURCES[table] if rng.random() < 0.7 else rng.choice(READ)
            out.append(Step("race", arg=f"{source}@{table}"))
        else:
            out.append(Step(choice))
    out.append(Step("derive"))  # every schedule ends converged
    return Schedule(seed, out)


# ---------------------------------------------------------------- the reference model


@dataclass
class Model:
    """What each table must hold, kept from what was put (Kinesis order = put order)."""

    edits: set[str] = field(default_factory=set)
    put: list[tuple[str, Any]] = field(default_factory=list)  # (sequence number, record)
    ingested: int = 0  # how many of ``put`` the raw table holds
    seen: dict[str, set[str]] = field(default_factory=dict)  # table -> sequences refreshed
    holds: dict[str, list[str]] = field(default_factory=dict)  # table -> sequences held
    quarantined: dict[str, bool] = field(default_factory=dict)  # sequence -> resolved
    derived_once: set[str] = field(default_factory=set)  # sequences a refresh processed
    unsettled: bool = False  # a failure, edit or drop since the last successful derive

    def tables(self) -> tuple[str, ...]:
        return (*ROUTED, "signups") if "add_table" in self.edits else ROUTED

    def takes(self, table: str, record: Any) -> bool:
        """The route and the fields (written here from the declaration, not imported)."""
        if not isinstance(record, dict):
            return False
        wanted = {"views": "view", "updates": "profile", "signups": "signup"}[table]
        if record.get("type") != wanted:
            return False
        if table == "views":
            n = record.get("n")
            limit = 2**63 - 1 if "widen" in self.edits else INT_MAX
            return isinstance(n, int) and -limit - 1 <= n <= limit
        return True

    def key(self, table: str, record: dict) -> tuple[str, str] | None:
        return (record["id"], record["at"][:10]) if table == "views" else None

    def _place(self, table: str, sequence: str) -> bool:
        record = dict(self.put)[sequence]
        held = self.holds.setdefault(table, [])
        key = self.key(table, record)
        if key is not None and any(self.key(table, dict(self.put)[s]) == key for s in held):
            return False  # a duplicate
        held.append(sequence)
        return True

    def _raw(self) -> list[tuple[str, Any]]:
        return self.put[: self.ingested]

    def catch_up(self) -> None:
        """A table with no history (new, or dropped) fills from the whole raw table."""
        for table in self.tables():
            if table in self.seen:
                continue
            self.seen[table] = set()
            self.holds[table] = []
            for sequence, record in self._raw():
                self.seen[table].add(sequence)
                if self.takes(table, record):
                    self._place(table, sequence)

    def derive(self) -> None:
        self.catch_up()
        for sequence, record in self._raw():
            if sequence in self.derived_once:
                continue
            self.derived_once.add(sequence)
            taken = False
            for table in self.tables():
                if sequence in self.seen[table]:
                    taken |= sequence in self.holds[table]
                    continue
                self.seen[table].add(sequence)
                if self.takes(table, record):
                    taken |= self._place(table, sequence)
            if not taken:
                self.quarantined[sequence] = False

    def replay(self) -> None:
        self.catch_up()
        for sequence, resolved in list(self.quarantined.items()):
            if resolved:
                continue
            record = dict(self.put)[sequence]
            for table in self.tables():
                if not self.takes(table, record):
                    continue
                if sequence in self.holds[table] or self._place(table, sequence):
                    self.quarantined[sequence] = True

    def drop(self, table: str) -> None:
        self.seen.pop(table, None)
        self.holds.pop(table, None)

    def winners(self) -> dict[str, int]:
        best: dict[str, tuple[int, int, dict]] = {}
        records = dict(self.put)
        for position, sequence in enumerate(self.holds.get("updates", [])):
            record = records[sequence]
            if record.get("user_id") is None:
                continue
            rank = (record["version"], position, record)
            if rank[:2] > best.get(record["user_id"], (-1, -1, {}))[:2]:
                best[record["user_id"]] = rank
        return {u: r[0] for u, r in best.items() if r[2].get("op") != "delete"}


# ---------------------------------------------------------------- running a schedule


class Violation(AssertionError):
    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind


@dataclass
class Figures:
    schedules: int = 0
    steps: Counter = field(default_factory=Counter)
    faults: Counter = field(default_factory=Counter)  # failing commits: table/mode, outcome
    failures: list[tuple[Schedule, Violation]] = field(default_factory=list)
    seconds: float = 0.0

    def summary(self) -> str:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(self.steps.items()))
        faults = ", ".join(f"{k} {v}" for k, v in sorted(self.faults.items()))
        return (
            f"{self.schedules} schedules, {sum(self.steps.values())} steps ({kinds}), "
            f"failing commits ({faults or 'none'}), "
            f"{len(self.failures)} failed, {self.seconds:.0f} s"
        )


def _rows(settings: Settings, table: str) -> list[dict] | None:
    catalog = open_lake(settings)
    identifier = (
        settings.quarantine_table if table == "quarantine" else settings.table_identifier(table)
    )
    if not catalog.table_exists(identifier):
        return None
    return catalog.load_table(identifier).scan().to_arrow().to_pylist()


def _put(settings: Settings, model: Model, records: tuple[Any, ...]) -> None:
    client = kinesis_client(settings.endpoint_url, settings.region)
    ensure_stream(client, settings.stream_name, settings.shard_count)
    for record in records:
        data = record if isinstance(record, bytes) else json.dumps(record).encode()
        answer = client.put_record(StreamName=settings.stream_name, Data=data, PartitionKey="p")
        model.put.append((answer["SequenceNumber"], record))


def _ingest(spark: Any, settings: Settings, model: Model) -> None:
    run_ingestion(spark, settings)
    model.ingested = len(model.put)


def check(settings: Settings, model: Model, *, converged: bool) -> None:
    """The invariants; ``converged`` False (after a failure on purpose): no duplicates only."""
    tables = model.tables()
    for table in (*tables, "quarantine"):
        rows = _rows(settings, table)
        if rows is None:
            continue
        twice = [k for k, c in Counter(r["sequence_number"] for r in rows).items() if c > 1]
        if twice:
            raise Violation("record-twice", f"{table} holds {twice} more than once")
    profiles = _rows(settings, "profiles") or []
    repeated = [k for k, c in Counter(r["user_id"] for r in profiles).items() if c > 1]
    if repeated:
        raise Violation("record-twice", f"profiles holds keys {repeated} more than once")
    if not converged:
        return
    records = dict(model.put)
    tables = tuple(t for t in tables if t in model.seen)  # created and filled by a refresh
    for table in tables:
        rows = _rows(settings, table)
        expected = Counter(model.holds.get(table, []))
        actual = Counter(r["sequence_number"] for r in rows or [])
        if actual != expected:
            show = {
                s: _show(records[s])
                for s in set(actual).symmetric_difference(expected)
                if s in records
            }
            raise Violation(
                f"routed-{table}",
                f"extra {sorted((actual - expected).elements())}, missing "
                f"{sorted((expected - actual).elements())}: {show}",
            )
    got = {r["user_id"]: r["version"] for r in profiles if r.get("user_id") is not None}
    if got != model.winners():
        raise Violation("upsert", f"profiles {got}, winners {model.winners()}")
    views = _rows(settings, "views") or []
    windowed = _rows(settings, "views_per_hour")
    if windowed is not None and views:
        connection = duckdb.connect()
        connection.register("views", _arrow(settings, "views"))
        again = {(_naive(h), c, t) for h, c, t in connection.execute(WINDOWED_SQL).fetchall()}
        have = {(_naive(r["hour"]), r["views"], r["top"]) for r in windowed}
        if have != again:
            raise Violation("sql-windowed", f"views_per_hour {sorted(have)}, SQL {sorted(again)}")
    count = _rows(settings, "profile_count")
    if count is not None and [r["profiles"] for r in count] != [len(profiles)]:
        raise Violation("sql-full", f"profile_count {count}, profiles has {len(profiles)} rows")
    catalog = open_lake(settings)
    report = reconcile_routed(
        catalog.load_table(settings.raw_table),
        {t: catalog.load_table(settings.table_identifier(t)) for t in tables},
        catalog.load_table(settings.quarantine_table),
        routes_everything=False,
    )
    if not report.passed:
        raise Violation("reconcile", str(report))


def _naive(value: datetime) -> datetime:
    return value.astimezone(UTC).replace(tzinfo=None) if value.tzinfo else value


def _arrow(settings: Settings, table: str) -> Any:
    return open_lake(settings).load_table(settings.table_identifier(table)).scan().to_arrow()


def _identifier(settings: Settings, table: str) -> str:
    return settings.quarantine_table if table == "quarantine" else settings.table_identifier(table)


def _fail(settings: Settings, arg: str) -> bool:
    """The derive in a new process; True if the armed commit came and failed it."""
    from kinesis_lake_tests.pipeline_helpers import derive_with_a_failing_commit

    table, mode = arg.split("/")
    return (
        derive_with_a_failing_commit(settings, _identifier(settings, table), mode=mode).returncode
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
    done = derive_raced_inside_a_commit(settings, _identifier(settings, table), call, source)
    raced = pending(faults) == 0
    faults.unlink(missing_ok=True)
    if done.returncode != 0:
        raise Violation("raced-derive-failed", done.stderr[-2000:])
    return raced


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
            if step.kind == "put":
                _put(settings, model, step.records)
            elif step.kind == "derive":
                _ingest(spark, settings, model)
                refresh_downstream(spark, settings)
                model.derive()
                model.unsettled = False
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
