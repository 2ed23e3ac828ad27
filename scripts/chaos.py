"""Chaos harness: SIGKILL ingestion again and again, then prove every record landed once.

    .venv/bin/python scripts/chaos.py --kills 100

It starts a local Kinesis endpoint, produces a known set of records, and then runs
``kinesis-lake ingest`` (a real Spark process) over and over, killing it with SIGKILL.
Each kill aims at one of three moments, chosen at random:

* ``random``: at a random moment (0-3 s) after the round's first micro-batch committed,
  so the kill lands in the middle of ingestion rather than during JVM start-up;
* ``files_written``: as soon as data files exist that no Iceberg snapshot references yet
  (tasks wrote, the driver has not committed);
* ``committed_not_checkpointed``: as soon as the Iceberg watermark holds a batch id that
  Spark's commit log does not (the table committed, Spark's checkpoint did not).

The targeted moments are found by watching the warehouse folder, the table metadata and
the checkpoint folder; if one is not seen within a round's time limit the process is
killed anyway and the kill is reported as ``missed``. Finally ingestion runs to the end,
the raw table is compared with the stream read by bare boto3, and the harness prints the
kills made and the lost and duplicated records. Exit status 1 if any was lost or
duplicated.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from kinesis_lake.config import Settings  # noqa: E402
from kinesis_lake.iceberg.catalog import open_catalog  # noqa: E402
from kinesis_lake.iceberg.commit import last_committed_batch  # noqa: E402
from kinesis_lake.kinesis.endpoint import LocalKinesisEndpoint  # noqa: E402
from kinesis_lake.pipeline.ingest_query import checkpoint_location  # noqa: E402
from kinesis_lake_tests.pipeline_helpers import (  # noqa: E402
    produce,
    raw_keys,
    settings_env,
    stream_truth,
)

MODES = ("random", "files_written", "committed_not_checkpointed")
POLL_S = 0.01


@dataclass
class ChaosReport:
    kills: Counter = field(default_factory=Counter)
    missed: Counter = field(default_factory=Counter)
    finished_before_kill: int = 0
    produced: int = 0
    lost: int = 0
    duplicated: int = 0
    rows: int = 0

    def print(self) -> None:
        print("chaos report")
        for mode in MODES:
            print(
                f"  kills {mode:<28} {self.kills[mode]:>4}  (moment not seen: {self.missed[mode]})"
            )
        print(f"  runs that finished before the kill  {self.finished_before_kill}")
        print(f"  records produced                    {self.produced}")
        print(f"  raw rows                            {self.rows}")
        print(f"  lost                                {self.lost}")
        print(f"  duplicated                          {self.duplicated}")
        print("RESULT: " + ("PASS" if self.ok else "FAIL"))

    @property
    def ok(self) -> bool:
        return self.lost == 0 and self.duplicated == 0 and self.rows == self.produced


class IngestionWatcher:
    """Reads the state a kill aims at, from outside the process under test."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.checkpoint = Path(checkpoint_location(settings))
        self.warehouse = settings.data_dir / "warehouse"

    def query_id(self) -> str | None:
        try:
            return json.loads((self.checkpoint / "metadata").read_text())["id"]
        except (FileNotFoundError, json.JSONDecodeError, KeyError):
            return None

    def spark_committed_batch(self) -> int:
        commits = self.checkpoint / "commits"
        ids = [int(p.name) for p in commits.glob("[0-9]*")] if commits.exists() else []
        return max(ids, default=-1)

    def table_state(self) -> tuple[int | None, int]:
        """(watermark of the query, data files referenced by the current snapshot)."""
        table = open_catalog(
            self.settings.catalog_name, data_dir=self.settings.data_dir
        ).load_table(self.settings.raw_table)
        snapshot = table.current_snapshot()
        summary = snapshot.summary if snapshot else None
        files = int(summary.get("total-data-files", 0)) if summary else 0
        query = self.query_id()
        return (last_committed_batch(table, query) if query else None), files

    def files_on_disk(self) -> int:
        return sum(1 for _ in self.warehouse.rglob("*.parquet"))

    def moment_reached(self, mode: str, unreferenced_before: int, committed_before: int) -> bool:
        try:
            watermark, referenced = self.table_state()
        except Exception:  # the catalog may be mid-commit; look again next poll
            return False
        if mode == "random":
            return self.spark_committed_batch() > committed_before
        if mode == "files_written":
            return self.files_on_disk() - referenced > unreferenced_before
        if mode == "committed_not_checkpointed":
            return watermark is not None and watermark > self.spark_committed_batch()
        return False


def run_round(
    settings: Settings, watcher: IngestionWatcher, mode: str, rng: random.Random, limit_s: float
) -> str:
    """One ingestion process, killed at the chosen moment. Returns what happened."""
    try:
        _, referenced = watcher.table_state()
    except Exception:
        referenced = 0
    unreferenced_before = watcher.files_on_disk() - referenced
    committed_before = watcher.spark_committed_batch()
    stderr_path = settings.data_dir.parent / "last-round.stderr"
    with stderr_path.open("wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "kinesis_lake.cli", "ingest"],
            env=settings_env(settings),
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,
        )
    started = time.monotonic()
    outcome = "missed"
    while time.monotonic() - started < limit_s:
        if process.poll() is not None:
            if process.returncode != 0:
                # Not killed, yet failed: never count that as a finished run.
                tail = stderr_path.read_text(errors="replace")[-4000:]
                print(tail, file=sys.stderr)
                raise SystemExit(f"an ingestion run failed on its own (exit {process.returncode})")
            return "finished"
        if watcher.moment_reached(mode, unreferenced_before, committed_before):
            if mode == "random":
                time.sleep(rng.uniform(0.0, 3.0))
            outcome = "killed"
            break
        time.sleep(POLL_S)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    return outcome


def run_chaos(
    kills: int, records: int, max_per_shard: int, seed: int, limit_s: float
) -> ChaosReport:
    rng = random.Random(seed)
    report = ChaosReport()
    with (
        tempfile.TemporaryDirectory(prefix="kinesis-lake-chaos-") as tmp,
        LocalKinesisEndpoint("auto") as endpoint,
    ):
        settings = Settings(
            stream_name="chaos",
            endpoint_url=endpoint.url,
            region=os.environ.get("AWS_REGION", "us-east-1"),
            shard_count=2,
            starting_position="trim_horizon",
            max_records_per_shard=max_per_shard,
            data_dir=Path(tmp) / "data",
            namespace="chaos",
        )
        watcher = IngestionWatcher(settings)
        report.produced += produce(settings, records, seed=seed).sent
        done = 0
        while done < kills:
            mode = rng.choice(MODES)
            outcome = run_round(settings, watcher, mode, rng, limit_s)
            if outcome == "finished":
                report.finished_before_kill += 1
                report.produced += produce(settings, records, seed=seed + done + 1).sent
                continue
            done += 1
            report.kills[mode] += 1
            if outcome == "missed":
                report.missed[mode] += 1
            print(f"kill {done}/{kills}: {mode} ({outcome})", flush=True)
        final = subprocess.run(
            [sys.executable, "-m", "kinesis_lake.cli", "ingest"],
            env=settings_env(settings),
            capture_output=True,
            text=True,
            check=False,
        )
        if final.returncode != 0:
            print(final.stderr[-4000:], file=sys.stderr)
            raise SystemExit("the final, uninterrupted ingestion run failed")
        keys = raw_keys(settings)
        counted = Counter((shard, seq) for shard, seq, _ in keys)
        truth = stream_truth(settings)
        report.rows = len(keys)
        report.lost = len(truth - set(counted))
        report.duplicated = sum(n - 1 for n in counted.values() if n > 1)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=100)
    parser.add_argument("--records", type=int, default=3000, help="records produced per chunk")
    parser.add_argument(
        "--max-per-shard", type=int, default=100, help="records per shard per batch"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--round-limit", type=float, default=150.0, help="seconds per round at most"
    )
    args = parser.parse_args(argv)
    for key, value in {
        "AWS_ACCESS_KEY_ID": "chaos",
        "AWS_SECRET_ACCESS_KEY": "chaos",
        "AWS_REGION": "us-east-1",
        "SPARK_LOCAL_IP": "127.0.0.1",
    }.items():
        os.environ.setdefault(key, value)
    report = run_chaos(args.kills, args.records, args.max_per_shard, args.seed, args.round_limit)
    report.print()
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
