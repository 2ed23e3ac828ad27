"""A micro-batch replayed after a crash between read and commit holds the same records.

The first run is a child process (this module's ``__main__``): a new JVM with its own
Spark session, sinking into ``foreachBatch``. The sink first reads the batch (executors
read Kinesis and write the shard progress records), logs what it read, and only then
"commits" by appending the rows to a log. Inside batch 1, after the read and before the
commit, it SIGKILLs its whole process group (Python driver, JVM, Python workers): no
timing, no race. Spark's offset log then holds batch 1 without a commit, so the restart,
in this test's own Spark session, replays it first. More records are written in between,
so a replay that read afresh instead of the pinned ranges would differ.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

from kinesis_lake_tests.spark.source_helpers import (
    keyed_events,
    new_stream,
    put,
    run_into,
    run_source,
    source_options,
    stream_positions,
)

CRASH_BATCH = 1
REPO_ROOT = Path(__file__).resolve().parents[2]
CHILD_TIMEOUT_S = 900


def test_a_batch_replayed_after_a_crash_holds_the_same_records_and_all_land_once(
    spark, kinesalite_endpoint, tmp_path
):
    url = kinesalite_endpoint.url
    stream = new_stream(url, shards=2)
    # 24 records over 2 shards at 5 per shard per batch: some shard needs batch 1.
    put(url, stream, keyed_events("before", keys=6, per_key=4))

    crashed = _run_child(url, stream, tmp_path)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    epoch = CRASH_BATCH + 1  # epoch 0 is the initial offset; batch N reads epoch N + 1
    assert len(list((tmp_path / "meta").glob(f"*/{epoch:012d}/*.json"))) == 2, (
        "both shards of the crashed batch were read and recorded"
    )
    (committed_before,) = _log(tmp_path, "committed")
    assert committed_before["batch"] == 0
    (read_at_crash,) = [e for e in _log(tmp_path, "reads") if e["batch"] == CRASH_BATCH]

    put(url, stream, keyed_events("after", keys=6, per_key=2))
    rows = run_source(spark, _options(url, stream, tmp_path), tmp_path / "checkpoint")

    replayed = sorted(_keys(r for r in rows if r["batch_id"] == CRASH_BATCH))
    assert replayed == read_at_crash["keys"], "the replay read the very same records"
    assert min(r["batch_id"] for r in rows) == CRASH_BATCH, "batch 0 was not read again"
    committed = Counter((shard, seq) for shard, seq, _ in committed_before["keys"] + _keys(rows))
    assert max(committed.values()) == 1, "no record committed twice"
    assert set(committed) == stream_positions(url, stream), "no record lost"


def _options(url: str, stream: str, work: Path) -> dict:
    return source_options(url, stream, work / "meta", maxRecordsPerShard="5")


def _keys(rows) -> list[list]:
    return [[r["shard_id"], r["sequence_number"], r["sub_sequence_number"]] for r in rows]


def _run_child(url: str, stream: str, work: Path) -> subprocess.CompletedProcess:
    """A new process group, so the crash kills exactly the child's processes."""
    return subprocess.run(
        [sys.executable, "-m", __name__, url, stream, str(work)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
        start_new_session=True,
        check=False,
    )


def _log(work: Path, name: str) -> list[dict]:
    path = work / f"{name}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _append(work: Path, name: str, entry: dict) -> None:
    with (work / f"{name}.jsonl").open("a") as handle:
        handle.write(json.dumps(entry) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def _child(url: str, stream: str, work: Path) -> None:
    """Run until batch 1 has been read, then die without committing it."""
    from kinesis_lake.spark.runtime.session import build_spark_session

    spark = build_spark_session("local[2]", app_name="kinesis-replay-test")

    def sink(batch, batch_id: int) -> None:
        rows = batch.select("shard_id", "sequence_number", "sub_sequence_number").collect()
        keys = sorted(_keys(r.asDict() for r in rows))
        _append(work, "reads", {"batch": batch_id, "keys": keys})
        if batch_id == CRASH_BATCH:
            os.killpg(os.getpgid(0), signal.SIGKILL)
        _append(work, "committed", {"batch": batch_id, "keys": keys})

    run_into(spark, _options(url, stream, work), work / "checkpoint", sink)


if __name__ == "__main__":
    _child(sys.argv[1], sys.argv[2], Path(sys.argv[3]))
