"""The soak: a simulated month of a production stream, then proof that nothing was lost.

    .venv/bin/python scripts/soak.py --days 36          # the long setting (README)
    .venv/bin/python scripts/soak.py --days 4           # the short one in make test

Real Kinesis changes with time in ways no local endpoint shows: records leave retention,
closed shards stop being listed once their records have, iterators expire. The soak puts
the project's clock proxy (:mod:`kinesis_lake_tests.kinesis.clock_proxy`) in front of
kinesalite and lets 20 hours pass between rounds ("days"; 36 of them are a month), so a
month takes minutes. Each simulated day it:

* produces records (on some days to one half of the key space only, so the other
  shards stay idle past retention; on one day a batch of records is left unread until
  the clock has trimmed it: a deliberate, known loss);
* reshapes the stream on the days of ``--split-day`` and ``--merge-day``, so parents
  age out of ListShards in the days after;
* runs ``kinesis-lake ingest --derive`` (a real Spark process) again and again, killing
  it with SIGKILL at random moments of ingestion or derive, or making an Iceberg commit
  land and then fail (the ambiguous catalog of ``kinesis_lake_tests``), until a run
  finishes on its own;
* compacts the raw table and expires its snapshots from this process while ingestion
  runs, so maintenance races every commit.

At the end: every record that was still retained when it was first due to be read is in
the raw table exactly once; the deliberately expired records are exactly the ones
missing, and the run that skipped them named each of their shards; ``parsed +
quarantined == raw``; the aggregate adds up; and a new ingestion run still starts and
finishes. Exit status 1 on any failure. ``scripts/chaos.py`` is the kill-only harness
this one extends.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from chaos import MODES as CHAOS_MODES  # noqa: E402
from chaos import POLL_S, IngestionWatcher  # noqa: E402
from pyiceberg.exceptions import (  # noqa: E402
    CommitFailedException,
    CommitStateUnknownException,
    NoSuchTableError,
)

from kinesis_lake.config import Settings  # noqa: E402
from kinesis_lake.kinesis.client import kinesis_client  # noqa: E402
from kinesis_lake.kinesis.endpoint import LocalKinesisEndpoint  # noqa: E402
from kinesis_lake.kinesis.producer import sample_events  # noqa: E402
from kinesis_lake.kinesis.streams import ensure_stream  # noqa: E402
from kinesis_lake.pipeline.lake import load_table, open_lake  # noqa: E402
from kinesis_lake.pipeline.maintain import MaintenancePolicy, run_maintenance  # noqa: E402
from kinesis_lake.pipeline.reconcile import reconcile_aggregate, reconcile_routed  # noqa: E402
from kinesis_lake_tests.ambiguous_catalog import (  # noqa: E402
    LANDS_THEN_RAISES,
    arm,
    catalog_environment,
)
from kinesis_lake_tests.kinesis.clock_proxy import ClockProxy  # noqa: E402
from kinesis_lake_tests.pipeline_helpers import raw_keys, settings_env  # noqa: E402
from kinesis_lake_tests.spark.source_helpers import wait_active  # noqa: E402

RETENTION_HOURS = 24
ROUND_S = 20 * 3600
"""Simulated time between ingestion rounds. Under retention, as production must be: a
consumer that reads a shard less often than once per retention period cannot tell an
idle shard from records that expired unread, and rightly reports possible loss."""
KILL_PHASES = ("ingest", "derive", "ambiguous_commit", "none")
LOSS_SETTING = "KINESIS_LAKE_FAIL_ON_DATA_LOSS"
LOG_DIR = REPO_ROOT / "test-output" / "soak"
LOSS_ERROR = re.compile(r"Data loss on stream '[^']*', shard (\S+?):")
SKIPPED_GAP = re.compile(r"skipped a data-loss gap on (\S+?):")


AMBIGUOUS_ERRORS = ("unknown", "conflict", "generic")


def arm_ambiguous_commit(settings: Settings, rng: random.Random) -> None:
    """Make the next commit of one of the lake's tables land, then report failure."""
    table = rng.choice(
        [settings.raw_table, settings.table_identifier("events"), settings.quarantine_table, None]
    )
    arm(fault_file(settings), LANDS_THEN_RAISES, error=rng.choice(AMBIGUOUS_ERRORS), table=table)


def fault_file(settings: Settings) -> Path:
    return settings.data_dir.parent / "catalog-faults.json"


@dataclass
class SoakReport:
    days: int = 0
    produced: int = 0
    expired_on_purpose: int = 0
    kills: Counter = field(default_factory=Counter)
    hurt_runs: Counter = field(default_factory=Counter)
    runs: int = 0
    maintenance_passes: int = 0
    maintenance_conflicts: int = 0
    reshards: list[str] = field(default_factory=list)
    raw_rows: int = 0
    lost: int = 0
    duplicated: int = 0
    unexpected: int = 0
    reported_gaps: int = 0
    possible_gaps: int = 0
    withheld: int = 0
    reconciliation: str = ""
    aggregate: str = ""
    restartable: bool = False
    failures: list[str] = field(default_factory=list)

    def print(self) -> None:
        print("soak report")
        print(f"  simulated days                      {self.days}")
        print(f"  reshards                            {', '.join(self.reshards) or 'none'}")
        print(f"  records produced                    {self.produced}")
        print(f"  records expired unread on purpose   {self.expired_on_purpose}")
        print(f"  data-loss gaps reported             {self.reported_gaps}")
        print(f"  possible-loss gaps reported         {self.possible_gaps}")
        print(f"  expired records the proxy withheld  {self.withheld}")
        for phase in KILL_PHASES[:-1]:
            print(f"  faults {phase:<28} {self.kills[phase]:>4}")
        outcomes = ", ".join(f"{n} {what}" for what, n in sorted(self.hurt_runs.items()))
        print(f"  faulty runs ended                   {outcomes or 'none'}")
        print(f"  ingestion runs                      {self.runs}")
        print(
            f"  maintenance passes (lost races)      {self.maintenance_passes} "
            f"({self.maintenance_conflicts})"
        )
        print(f"  raw rows                            {self.raw_rows}")
        print(f"  lost                                {self.lost}")
        print(f"  duplicated                          {self.duplicated}")
        print(f"  unexpected rows                     {self.unexpected}")
        print(f"  derived                             {self.reconciliation}")
        print(f"  aggregate                           {self.aggregate}")
        print(f"  ingestion still starts              {'yes' if self.restartable else 'NO'}")
        for failure in self.failures:
            print(f"  FAILURE: {failure}")
        print("RESULT: " + ("PASS" if self.ok else "FAIL"))

    @property
    def ok(self) -> bool:
        return (
            not self.failures
            and self.lost == 0
            and self.duplicated == 0
            and self.unexpected == 0
            and self.restartable
        )


class TrackedStream:
    """Writes records straight to kinesalite and remembers where each one landed."""

    def __init__(self, settings: Settings, upstream_url: str) -> None:
        self.settings = settings
        self.client = kinesis_client(upstream_url, settings.region)
        ensure_stream(self.client, settings.stream_name, settings.shard_count)
        self.records: dict[tuple[str, str], int] = {}  # (shard, sequence) -> day produced
        self.doomed: set[tuple[str, str]] = set()

    def open_shards(self) -> list[dict]:
        shards = self.client.list_shards(StreamName=self.settings.stream_name)["Shards"]
        return [s for s in shards if "EndingSequenceNumber" not in s["SequenceNumberRange"]]

    def put(self, day: int, count: int, *, seed: int, shard: dict | None = None) -> list:
        """``count`` sample events, to one shard's hash range only if ``shard`` is given."""
        entries = sample_events(count, malformed_every=17, seed=seed)
        hash_key = shard["HashKeyRange"]["StartingHashKey"] if shard else None
        landed = []
        for start in range(0, len(entries), 500):
            pending = [
                {
                    "PartitionKey": key,
                    "Data": data,
                    **({"ExplicitHashKey": hash_key} if hash_key else {}),
                }
                for key, data in entries[start : start + 500]
            ]
            while pending:
                reply = self.client.put_records(
                    StreamName=self.settings.stream_name, Records=pending
                )
                retry = []
                for entry, result in zip(pending, reply["Records"], strict=True):
                    if "ErrorCode" in result:
                        retry.append(entry)
                    else:
                        landed.append((result["ShardId"], result["SequenceNumber"]))
                pending = retry
        for key in landed:
            self.records[key] = day
        return landed

    def split(self) -> str:
        shard = self.open_shards()[0]
        low = int(shard["HashKeyRange"]["StartingHashKey"])
        high = int(shard["HashKeyRange"]["EndingHashKey"])
        self.client.split_shard(
            StreamName=self.settings.stream_name,
            ShardToSplit=shard["ShardId"],
            NewStartingHashKey=str((low + high + 1) // 2),
        )
        wait_active(self.client, self.settings.stream_name)
        return f"split {shard['ShardId']}"

    def merge(self) -> str:
        shards = sorted(self.open_shards(), key=lambda s: int(s["HashKeyRange"]["StartingHashKey"]))
        first, second = shards[0], shards[1]
        self.client.merge_shards(
            StreamName=self.settings.stream_name,
            ShardToMerge=first["ShardId"],
            AdjacentShardToMerge=second["ShardId"],
        )
        wait_active(self.client, self.settings.stream_name)
        return f"merge {first['ShardId']}+{second['ShardId']}"


class MaintenanceRacer:
    """Compacts and expires the raw and parsed tables again and again while runs commit."""

    POLICY = MaintenancePolicy(
        snapshot_max_age_hours=0.0,
        retain_last_snapshots=1,
        orphan_min_age_hours=1.0,
        min_input_files=2,
    )

    def __init__(self, settings: Settings, report: SoakReport) -> None:
        self.settings = settings
        self.report = report
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.errors: list[str] = []

    def __enter__(self) -> MaintenanceRacer:
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(0.5):
            for table in ("raw_events", "events"):
                try:
                    run_maintenance(self.settings, table, self.POLICY)
                    self.report.maintenance_passes += 1
                except NoSuchTableError:
                    continue
                except (CommitFailedException, CommitStateUnknownException, ConnectionError):
                    self.report.maintenance_conflicts += 1
                except Exception as error:
                    self.errors.append(f"maintenance of {table}: {error!r}")


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str


def run_ingest(
    settings: Settings,
    watcher: IngestionWatcher,
    rng: random.Random,
    *,
    fault: str,
    env: dict[str, str] | None = None,
    limit_s: float = 240.0,
) -> tuple[str, Run]:
    """One ``kinesis-lake ingest --derive`` process, hurt by ``fault``; what happened."""
    if fault == "ambiguous_commit":
        arm_ambiguous_commit(settings, rng)
    process = subprocess.Popen(
        [sys.executable, "-m", "kinesis_lake.cli", "ingest", "--derive"],
        env={**settings_env(settings), **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    lines: list[str] = []
    errors: list[str] = []
    readers = [
        threading.Thread(target=lambda: lines.extend(process.stdout or ()), daemon=True),
        threading.Thread(target=lambda: errors.extend(process.stderr or ()), daemon=True),
    ]
    for reader in readers:
        reader.start()
    mode = rng.choice(CHAOS_MODES)
    before = (_quietly(lambda: watcher.table_state()[1], 0), watcher.spark_committed_batch())
    unreferenced_before = watcher.files_on_disk() - before[0]
    started = time.monotonic()
    outcome = "finished"
    while process.poll() is None:
        if time.monotonic() - started > limit_s:
            outcome = "timed out"
            break
        if fault == "ingest" and watcher.moment_reached(mode, unreferenced_before, before[1]):
            if mode == "random":
                time.sleep(rng.uniform(0.0, 2.0))
            outcome = "killed"
            break
        if fault == "derive" and any(line.startswith("ingested") for line in lines):
            time.sleep(rng.uniform(0.0, 4.0))
            outcome = "killed"
            break
        time.sleep(POLL_S)
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    for reader in readers:
        reader.join()
    if outcome == "finished" and process.returncode != 0:
        outcome = "failed"
    if fault == "ambiguous_commit":
        fault_file(settings).write_text("[]")  # an unused fault must not hit a clean run
    return outcome, Run(process.returncode, "".join(lines), "".join(errors))


def _quietly(read, default):
    try:
        return read()
    except Exception:
        return default


def finish_day(
    settings: Settings,
    watcher: IngestionWatcher,
    rng: random.Random,
    report: SoakReport,
    *,
    expect_loss_on: set[str],
    unread_past_retention: bool,
) -> None:
    """Runs ``ingest --derive`` until one finishes on its own, after one faulty run.

    On a day whose unread records were trimmed on purpose, the first clean run must fail
    on data loss, and the operator's way out, failOnDataLoss=false, must then skip the
    gaps, name every shard that lost records, and carry on. The failing run names one
    shard only: the one whose task failed first. The records were left to expire in an
    outage longer than retention, in which nothing read any shard, so every other shard
    may be reported too, as possible loss (README, Retention and time); outside such an
    outage, a shard that lost nothing must never be reported.
    """
    fault = rng.choice(KILL_PHASES)
    if fault != "none":
        outcome, _ = run_ingest(settings, watcher, rng, fault=fault)
        report.kills[fault] += 1
        report.hurt_runs[outcome] += 1
        report.runs += 1
    outcome, run = run_ingest(settings, watcher, rng, fault="none")
    report.runs += 1
    if expect_loss_on:
        failed_on = set(LOSS_ERROR.findall(run.stderr))
        if outcome != "failed" or not failed_on:
            report.failures.append(
                f"records expired unread on {sorted(expect_loss_on)} were not reported as "
                f"data loss (run {outcome}): {cause(run, report)}"
            )
        elif not unread_past_retention and failed_on - expect_loss_on:
            report.failures.append(
                f"data loss reported on {sorted(failed_on - expect_loss_on)}, which lost "
                f"nothing and were read within retention: {cause(run, report)}"
            )
        outcome, run = run_ingest(settings, watcher, rng, fault="none", env={LOSS_SETTING: "false"})
        report.runs += 1
        skipped = set(SKIPPED_GAP.findall(run.stdout))
        if outcome == "finished" and expect_loss_on - skipped:
            report.failures.append(
                f"records expired unread on {sorted(expect_loss_on - skipped)} were skipped "
                f"without naming the shard: {cause(run, report)}"
            )
        if not unread_past_retention and skipped - expect_loss_on:
            report.failures.append(
                f"gaps skipped on {sorted(skipped - expect_loss_on)}, which lost nothing and "
                f"were read within retention: {cause(run, report)}"
            )
        report.reported_gaps += len(expect_loss_on & skipped)
        report.possible_gaps += len(skipped - expect_loss_on)
    if outcome != "finished":
        report.failures.append(f"a clean ingestion run {outcome}: {cause(run, report)}")
        raise SoakStopped(report.failures[-1])


def cause(run: Run, report: SoakReport) -> str:
    """The run's error line, with its whole output kept under test-output/soak/."""
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    log = LOG_DIR / f"run-{report.runs:03d}.log"
    log.write_text(run.stdout + "\n----- stderr -----\n" + run.stderr)
    lines = [line for line in run.stderr.splitlines() if "Error" in line or "error:" in line]
    return f"{lines[0][:400] if lines else run.stderr[-400:]} (full output: {log})"


class SoakStopped(RuntimeError):
    """Ingestion could not finish a day: the rest of the month would prove nothing."""


def run_soak(
    days: int, per_day: int, seed: int, split_day: int, merge_day: int, loss_day: int
) -> SoakReport:
    rng = random.Random(seed)
    report = SoakReport()
    with (
        tempfile.TemporaryDirectory(prefix="kinesis-lake-soak-") as tmp,
        LocalKinesisEndpoint("kinesalite") as endpoint,
        ClockProxy(endpoint.url, retention_hours=RETENTION_HOURS) as clock,
    ):
        settings = Settings(
            stream_name="soak",
            endpoint_url=clock.url,
            region=os.environ.get("AWS_REGION", "us-east-1"),
            shard_count=2,
            starting_position="trim_horizon",
            max_records_per_shard=max(50, per_day // 4),
            data_dir=Path(tmp) / "data",
            namespace="soak",
        )
        # Every process of the soak commits through the ambiguous catalog (same SQLite
        # database and warehouse); faults fire only when armed.
        os.environ.update(catalog_environment(settings.data_dir, fault_file(settings)))
        stream = TrackedStream(settings, endpoint.url)
        watcher = IngestionWatcher(settings)
        try:
            for day in range(1, days + 1):
                report.days = day
                if day == split_day:
                    report.reshards.append(f"day {day}: {stream.split()}")
                if day == merge_day:
                    report.reshards.append(f"day {day}: {stream.merge()}")
                doomed_shards: set[str] = set()
                outage_s = ROUND_S  # since the last run read every shard to its tip
                if day == loss_day:
                    # Left unread until the clock trims them: a known, deliberate loss.
                    shard = rng.choice(stream.open_shards())
                    doomed = stream.put(day, per_day // 5, seed=seed * 1000 + day, shard=shard)
                    stream.doomed.update(doomed)
                    doomed_shards = {shard["ShardId"]}
                    clock.advance(RETENTION_HOURS * 3600 + 60)
                    outage_s += RETENTION_HOURS * 3600 + 60
                # Some days only half the key space is written: the rest idles past retention.
                quiet = rng.random() < 0.4
                target = rng.choice(stream.open_shards()) if quiet else None
                stream.put(day, per_day, seed=seed * 100 + day, shard=target)
                with MaintenanceRacer(settings, report) as racer:
                    finish_day(
                        settings,
                        watcher,
                        rng,
                        report,
                        expect_loss_on=doomed_shards,
                        unread_past_retention=day > 1 and outage_s > RETENTION_HOURS * 3600,
                    )
                report.failures += racer.errors
                print(
                    f"day {day}: {len(stream.records)} records so far, "
                    f"{report.runs} runs, faults {dict(report.kills)}",
                    flush=True,
                )
                clock.advance(ROUND_S)
            # A parent aged out, shards idle past retention: a new run must still start.
            stream.put(days + 1, 10, seed=seed)
            outcome, run = run_ingest(settings, watcher, rng, fault="none")
            report.restartable = outcome == "finished"
            if not report.restartable:
                report.failures.append(f"the final ingestion run {outcome}: {cause(run, report)}")
        except SoakStopped:
            pass
        verify(settings, stream, clock, report)
    return report


def verify(
    settings: Settings, stream: TrackedStream, clock: ClockProxy, report: SoakReport
) -> None:
    report.produced = len(stream.records)
    report.expired_on_purpose = len(stream.doomed)
    # Information only: it also counts resume records of quiet shards, re-read and gone.
    report.withheld = sum(clock.trimmed.values())
    counted = Counter((shard, sequence) for shard, sequence, _ in raw_keys(settings))
    expected = set(stream.records) - stream.doomed
    report.raw_rows = sum(counted.values())
    report.lost = len(expected - set(counted))
    report.duplicated = sum(n - 1 for n in counted.values() if n > 1)
    report.unexpected = len(set(counted) - expected)
    catalog = open_lake(settings)
    raw, parsed, quarantine, aggregate = (
        load_table(catalog, name)
        for name in (
            settings.raw_table,
            settings.table_identifier("events"),
            settings.quarantine_table,
            settings.aggregate_table,
        )
    )
    if raw is None or parsed is None or quarantine is None or aggregate is None:
        report.failures.append("the derived tables were never created: no refresh finished")
        return
    derived = reconcile_routed(raw, {"events": parsed}, quarantine, routes_everything=True)
    report.reconciliation = (
        f"{derived.raw_processed} raw = {derived.routed['events']} parsed + "
        f"{derived.quarantined} quarantined ({'ok' if derived.passed else 'MISMATCH'})"
    )
    if not derived.passed or derived.raw_processed != report.raw_rows:
        report.failures.append(f"derived tables do not reconcile: {report.reconciliation}")
    windows = reconcile_aggregate(parsed, aggregate)
    report.aggregate = "sums match parsed events" if windows.passed else "MISMATCH"
    if not windows.passed:
        report.failures.append(f"aggregate does not add up: {windows}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=int, default=36)
    parser.add_argument("--records-per-day", type=int, default=400)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--split-day", type=int, default=2)
    parser.add_argument("--merge-day", type=int, default=5)
    parser.add_argument(
        "--loss-day",
        type=int,
        default=3,
        help="day whose records are left to expire unread (0: none)",
    )
    args = parser.parse_args(argv)
    for key, value in {
        "AWS_ACCESS_KEY_ID": "soak",
        "AWS_SECRET_ACCESS_KEY": "soak",
        "AWS_REGION": "us-east-1",
        "SPARK_LOCAL_IP": "127.0.0.1",
    }.items():
        os.environ.setdefault(key, value)
    report = run_soak(
        args.days,
        args.records_per_day,
        args.seed,
        args.split_day,
        args.merge_day,
        args.loss_day,
    )
    report.print()
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
