"""``kinesis-lake stream`` as an operator runs it: a separate process with a processing-time
trigger, fed in waves, reporting every micro-batch to the Dagster instance at
$DAGSTER_HOME, stopped with SIGTERM while a batch is in flight, then restarted and
stopped with a terminal's Ctrl-C.

What must hold: every batch that moved rows becomes exactly one raw_events
materialization with numeric metadata (the UI plots them); each stop exits 0 after the
batch in flight has committed and been reported; and after the restart the table holds
exactly the records in the stream.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import dagster as dg
import pytest

from kinesis_lake.config import Settings
from kinesis_lake.defs.raw_assets import RAW_EVENTS
from kinesis_lake.kinesis.client import kinesis_client
from kinesis_lake.kinesis.streams import ensure_stream
from kinesis_lake.pipeline.ingest_query import checkpoint_location
from kinesis_lake_tests.pipeline_helpers import (
    produce,
    raw_keys,
    settings_env,
    stream_truth,
    table_rows,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
WAVES = (40, 25)
FINAL_WAVE = 30
WAIT_SECONDS = 240
"""Per wait; generous because other Spark jobs may share the machine's two cores."""

NUMERIC_KEYS = ("rows_added", "batch_id", "max_millis_behind_latest", "dagster/row_count")
STARTED_LINE = "SIGTERM or Ctrl-C stops after the batch in flight"
STOPPED_LINE = "stopped cleanly after"


class StreamProcess:
    """``kinesis-lake stream --trigger "1 second"`` in a new process group (as a terminal
    would run it: Spark's JVM and Python workers join that group); output goes to files."""

    def __init__(self, settings: Settings, dagster_home: Path, logs: Path) -> None:
        logs.mkdir(parents=True)
        self.stdout_path = logs / "stream.stdout"
        self.stderr_path = logs / "stream.stderr"
        env = {**settings_env(settings), "DAGSTER_HOME": str(dagster_home)}
        with self.stdout_path.open("w") as out, self.stderr_path.open("w") as err:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "kinesis_lake.cli", "stream", "--trigger", "1 second"],
                env=env,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )

    def stdout(self) -> str:
        return self.stdout_path.read_text()

    def output(self) -> str:
        return f"--- stdout\n{self.stdout()}\n--- stderr\n{self.stderr_path.read_text()[-4000:]}"

    def require_running(self) -> None:
        if self.process.poll() is not None:
            pytest.fail(f"stream exited early ({self.process.returncode}):\n{self.output()}")

    def wait_until_started(self) -> None:
        """Until the signal handlers are in place (a signal before them is not graceful)."""
        deadline = time.monotonic() + WAIT_SECONDS
        while STARTED_LINE not in self.stdout():
            self.require_running()
            if time.monotonic() > deadline:
                pytest.fail(f"stream did not start:\n{self.output()}")
            time.sleep(0.5)

    def assert_stopped_cleanly(self, signal_name: str) -> None:
        assert self.process.wait(timeout=WAIT_SECONDS) == 0, self.output()
        assert STOPPED_LINE in self.stdout(), self.output()
        assert f"{signal_name}: stopping after the batch in flight" in self.stderr_path.read_text()

    def kill_group(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=60)


@pytest.fixture
def dagster_home(tmp_path: Path) -> Path:
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(REPO_ROOT / "dagster.yaml", home / "dagster.yaml")
    return home


@pytest.fixture
def lake_settings(kinesalite_endpoint, settings_factory) -> Settings:
    settings = settings_factory(kinesalite_endpoint)
    ensure_stream(
        kinesis_client(settings.endpoint_url, settings.region),
        settings.stream_name,
        settings.shard_count,
    )
    return settings


@pytest.fixture
def start_stream(
    lake_settings: Settings, dagster_home: Path, tmp_path: Path
) -> Iterator[Callable[[str], StreamProcess]]:
    started: list[StreamProcess] = []

    def start(name: str) -> StreamProcess:
        started.append(StreamProcess(lake_settings, dagster_home, tmp_path / name))
        return started[-1]

    yield start
    for stream in started:  # left running only if the test failed
        stream.kill_group()


def raw_materializations(instance: dg.DagsterInstance) -> list[dg.AssetMaterialization]:
    """Oldest first."""
    records = instance.fetch_materializations(RAW_EVENTS, limit=1000).records
    return [r.asset_materialization for r in reversed(records) if r.asset_materialization]


def reported_rows(materialization: dg.AssetMaterialization) -> int:
    return materialization.metadata["dagster/row_count"].value


def wait_until_reported(instance: dg.DagsterInstance, stream: StreamProcess, rows: int) -> None:
    """Until the latest materialization says the raw table holds ``rows`` rows."""
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        stream.require_running()
        found = raw_materializations(instance)
        if found and reported_rows(found[-1]) >= rows:
            return
        time.sleep(1)
    pytest.fail(f"no raw_events materialization reported {rows} rows:\n{stream.output()}")


def reported_batches(materializations: list[dg.AssetMaterialization]) -> list[int]:
    """Batch ids in report order; each must appear once."""
    reported = [m.metadata["batch_id"].value for m in materializations]
    assert reported == sorted(set(reported)), "each batch is reported once, in order"
    return reported


def batches_in_table(settings: Settings) -> list[int]:
    """The batch ids the sink stamped on the raw table's rows."""
    return sorted(
        {row["batch_id"] for row in table_rows(settings, settings.raw_table, ("batch_id",))}
    )


def _batch_ids(directory: Path) -> set[int]:
    return {int(p.name) for p in directory.glob("[0-9]*")}


def signal_during_next_batch(checkpoint: Path, stream: StreamProcess) -> int | None:
    """SIGTERM to the stream's main process (what a supervisor sends) as soon as Spark has
    logged the next batch's offsets but not its commit: the batch is running. Returns
    that batch id, or None if the batch finished before it was seen."""
    committed = max(_batch_ids(checkpoint / "commits"), default=-1)
    deadline = time.monotonic() + WAIT_SECONDS
    in_flight = None
    while time.monotonic() < deadline and in_flight is None:
        stream.require_running()
        commits = _batch_ids(checkpoint / "commits")
        pending = {b for b in _batch_ids(checkpoint / "offsets") - commits if b > committed}
        if pending:
            in_flight = max(pending)
        elif max(commits, default=-1) > committed:
            break
        else:
            time.sleep(0.05)
    stream.process.send_signal(signal.SIGTERM)
    return in_flight


@pytest.mark.timeout(900)
def test_stream_reports_each_batch_and_stops_cleanly_on_signals(
    lake_settings: Settings, dagster_home: Path, start_stream: Callable[[str], StreamProcess]
):
    settings = lake_settings
    checkpoint = Path(checkpoint_location(settings))
    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        stream = start_stream("first")
        produced = 0
        for wave, count in enumerate(WAVES):
            produce(settings, count, seed=300 + wave)
            produced += count
            wait_until_reported(instance, stream, produced)

        produce(settings, FINAL_WAVE, seed=399)
        produced += FINAL_WAVE
        in_flight = signal_during_next_batch(checkpoint, stream)
        stream.assert_stopped_cleanly("SIGTERM")

        if in_flight is not None:
            assert in_flight in _batch_ids(checkpoint / "commits"), "the batch in flight committed"
        # Every batch that put rows in the table, the one in flight included, was reported.
        # (A batch may move no rows: the source can plan a read that finds nothing yet.)
        materializations = raw_materializations(instance)
        assert reported_batches(materializations) == batches_in_table(settings)
        added = [m.metadata["rows_added"].value for m in materializations]
        keys_after_stop = raw_keys(settings)
        assert sum(added) == len(keys_after_stop) == reported_rows(materializations[-1])
        assert len(keys_after_stop) >= sum(WAVES)

        # The restart reads what the stop left in the stream; Ctrl-C in a terminal (SIGINT
        # to the whole process group, Spark's JVM and workers included) stops it cleanly.
        restarted = start_stream("restarted")
        restarted.wait_until_started()
        wait_until_reported(instance, restarted, produced)
        os.killpg(restarted.process.pid, signal.SIGINT)
        restarted.assert_stopped_cleanly("SIGINT")

        materializations = raw_materializations(instance)
        assert len(materializations) >= 2
        for materialization in materializations:
            for key in NUMERIC_KEYS:
                assert isinstance(materialization.metadata[key], dg.IntMetadataValue), key
        assert reported_batches(materializations) == batches_in_table(settings)
        added = [m.metadata["rows_added"].value for m in materializations]
        assert all(rows > 0 for rows in added), "only batches that moved rows are reported"
        assert sum(added) == produced, "every batch reported once"
        totals = [reported_rows(m) for m in materializations]
        assert totals == sorted(totals) and totals[-1] == produced

    keys = raw_keys(settings)
    assert len(keys) == len(set(keys)) == produced
    assert {(shard, sequence) for shard, sequence, _ in keys} == stream_truth(settings)
