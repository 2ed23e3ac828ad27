"""On a real cluster, executors read the shards; the driver only lists and plans.

``local-cluster[2,1,1024]`` starts two executor JVMs, each with its own Python workers.
It runs in a child process (this module's ``__main__``) so that the session-wide
``local[2]`` Spark of the other tests is left alone. Each shard progress record names
the process that read the shard; while that process is alive, the child walks up its
process tree to the executor JVM (``CoarseGrainedExecutorBackend --executor-id N``). A
read done on the driver (in ``latestOffset``, say) would find no executor above it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil

from kinesis_lake_tests.spark.source_helpers import (
    keyed_events,
    new_stream,
    put,
    source_options,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
CHILD_TIMEOUT_S = 900
SHARDS = 4


def test_every_shard_is_read_on_an_executor_and_both_executors_read(kinesalite_endpoint, tmp_path):
    url = kinesalite_endpoint.url
    stream = new_stream(url, shards=SHARDS)
    events = keyed_events("e", keys=8, per_key=3)
    put(url, stream, events)

    child = subprocess.run(
        [sys.executable, "-m", __name__, url, stream, str(tmp_path)],
        cwd=REPO_ROOT,
        env={**os.environ, "SPARK_WORKER_DIR": str(tmp_path / "worker")},
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT_S,
        check=False,
    )
    assert child.returncode == 0, child.stderr[-3000:]
    result = json.loads((tmp_path / "result.json").read_text())

    assert result["rows"] == len(events)
    reads = result["reads"]
    assert {r["shard"] for r in reads} == {f"shardId-{i:012d}" for i in range(SHARDS)}
    assert all(r["executor"] is not None for r in reads), reads
    assert len({r["executor"] for r in reads}) == 2, reads


def _executor_of(pid: int) -> str | None:
    """The id of the executor JVM above ``pid`` in the process tree, None if none is."""
    for process in psutil.Process(pid).parents():
        command = process.cmdline()
        if any("CoarseGrainedExecutorBackend" in part for part in command):
            return command[command.index("--executor-id") + 1]
    return None


def _child(url: str, stream: str, work: Path) -> None:
    from kinesis_lake.spark.runtime.session import build_spark_session

    spark = build_spark_session("local-cluster[2,1,1024]", app_name="kinesis-cluster-test")
    metadata = work / "meta"
    reads: dict[str, dict] = {}
    rows = 0

    def sink(batch, batch_id: int) -> None:
        nonlocal rows
        rows += batch.count()  # the read; the reading workers stay alive in Spark's pool
        for path in metadata.glob("*/*/*.json"):
            if str(path) not in reads:
                record = json.loads(path.read_text())
                executor = _executor_of(record["reader"]["pid"])
                reads[str(path)] = {"shard": record["shard_id"], "executor": executor}

    options = source_options(url, stream, str(metadata), maxRecordsPerShard="3")
    query = (
        spark.readStream.format("kinesis")
        .options(**options)
        .load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(work / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    spark.stop()
    result = {"rows": rows, "reads": list(reads.values())}
    (work / "result.json").write_text(json.dumps(result))


if __name__ == "__main__":
    _child(sys.argv[1], sys.argv[2], Path(sys.argv[3]))
