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
    run_into,
    source_options,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
CHILD_TIMEOUT_S = 900
SHARDS = 4
MANY_SHARDS = 24


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

    # Issue 34, on the same cluster: the pipeline's ingestion, in its default settings,
    # writes files that follow the data, not the shard count. A cluster's cores are not
    # known when the query starts, so before, each of the 24 shards wrote its own file in
    # every micro-batch (24 per commit); now a small batch is one task, one file.
    ingested = result["ingestion"]
    assert ingested["rows"] == ingested["distinct_rows"] == ingested["stream_records"] == 600
    assert ingested["rows_match_stream"]
    assert ingested["shards_read"] == MANY_SHARDS
    assert ingested["batches"] >= 2
    assert ingested["files_per_commit"] == [1] * ingested["batches"], ingested


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

    # One task per shard (bytesPerTask=0), so that the four reads spread over both
    # executors: packed by bytes, four small shards would be one task on one of them.
    options = source_options(url, stream, str(metadata), maxRecordsPerShard="3", bytesPerTask="0")
    run_into(spark, options, work / "checkpoint", sink)
    ingestion = _default_ingestion(spark, url, work / "lake")
    spark.stop()
    result = {"rows": rows, "reads": list(reads.values()), "ingestion": ingestion}
    (work / "result.json").write_text(json.dumps(result))


def _default_ingestion(spark, url: str, data_dir: Path) -> dict:
    """The pipeline's ingestion of 600 records over ``MANY_SHARDS`` shards, in several
    micro-batches, with every setting left at its default but the batch size."""
    from kinesis_lake.pipeline.ingest import run_ingestion
    from kinesis_lake.pipeline.lake import open_lake
    from kinesis_lake_tests.lake_settings import make_settings
    from kinesis_lake_tests.pipeline_helpers import produce, raw_keys, stream_truth

    settings = make_settings(data_dir, url, shard_count=MANY_SHARDS, max_records_per_shard=12)
    produce(settings, 600, seed=7)
    run = run_ingestion(spark, settings)
    keys = raw_keys(settings)
    table = open_lake(settings).load_table(settings.raw_table)
    truth = stream_truth(settings)
    return {
        "rows": len(keys),
        "distinct_rows": len(set(keys)),
        "stream_records": len(truth),
        "rows_match_stream": {(shard, seq) for shard, seq, _ in keys} == truth,
        "shards_read": len({shard for shard, _, _ in keys}),
        "batches": run.batches,
        "files_per_commit": [
            int(s.summary.additional_properties["added-data-files"]) for s in table.snapshots()
        ],
    }


if __name__ == "__main__":
    _child(sys.argv[1], sys.argv[2], Path(sys.argv[3]))
