"""Where streaming state can live on S3 here, and where it cannot (and why).

* The Kinesis source's progress records (``metadataPath``, a ``ShardProgressStore``)
  are fsspec: they work on s3://, written by one process (an executor) and read by
  another (the driver), including after the driver listed the folder (s3fs caches
  listings, which could hide a new file from a careless reader).
* Spark's own ``checkpointLocation`` goes through Hadoop's FileSystem, and the pip
  pyspark ships no S3 implementation (hadoop-aws and the AWS SDK bundle are Maven jars,
  unreachable here). That is why the AWS tests checkpoint to a local folder; on EMR,
  EMRFS serves s3:// and the shipped profile's s3:// checkpoint folder works as is.
  Where neither S3 nor a shared volume can hold it, a new checkpoint resumes from the
  positions the raw table's snapshots record (``test_aws_cluster.py``, third machine).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import boto3
import pytest
from s3fs import S3FileSystem

from kinesis_lake.pipeline.ingest_query import checkpoint_location
from kinesis_lake.spark.kinesis.progress import EPOCHS_RETAINED, ProgressRecord, ShardProgressStore
from kinesis_lake_tests.kinesis.helpers import outcome
from kinesis_lake_tests.pipeline_helpers import produce, raw_keys, run_cli, stream_truth
from kinesis_lake_tests.production.slow_s3 import SlowS3Proxy

RUN = "run-1"


def _keys(root: str) -> list[str]:
    bucket, prefix = root.removeprefix("s3://").split("/", 1)
    pages = (
        boto3.client("s3").get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    )
    return [
        item["Key"].removeprefix(prefix + "/")
        for page in pages
        for item in page.get("Contents", [])
    ]


def test_source_progress_written_by_executors_is_read_by_the_driver_on_s3(s3_root: str) -> None:
    driver = ShardProgressStore(s3_root)
    for epoch in range(1, EPOCHS_RETAINED + 4):
        driver.save(RUN, epoch, ProgressRecord(outcome("shard-0", str(epoch))))
    driver.forget_before(RUN, EPOCHS_RETAINED + 3)  # lists the run folder (s3fs caches it)

    # An executor is another process: it writes the next epoch's records.
    executor = textwrap.dedent(
        f"""
        from kinesis_lake.spark.kinesis.progress import ProgressRecord, ShardProgressStore
        from kinesis_lake_tests.kinesis.helpers import outcome
        store = ShardProgressStore({s3_root!r})
        for shard in ("shard-0", "shard-1"):
            store.save({RUN!r}, {EPOCHS_RETAINED + 4}, ProgressRecord(outcome(shard, "999")))
        """
    )
    subprocess.run([sys.executable, "-c", executor], check=True, timeout=120)
    driver.write_status(RUN, {"epoch": EPOCHS_RETAINED + 4})

    found = driver.load_epoch(RUN, EPOCHS_RETAINED + 4, ["shard-0", "shard-1"])
    assert {shard: r.outcome.last_sequence_number for shard, r in found.items()} == {
        "shard-0": "999",
        "shard-1": "999",
    }
    assert ShardProgressStore(s3_root).read_status(RUN) == {"epoch": EPOCHS_RETAINED + 4}
    keys = _keys(s3_root)
    epochs = sorted({int(key.split("/")[1]) for key in keys if key.count("/") == 2})
    assert epochs == list(range(3, EPOCHS_RETAINED + 5)), "older epochs were pruned"
    assert not [key for key in keys if key.endswith(".tmp")], "no temporary files left behind"


@pytest.mark.parametrize("scheme", ["s3", "s3a"])
def test_spark_has_no_s3_filesystem_for_its_own_checkpoints(spark, scheme: str) -> None:
    """If this fails, an S3 Hadoop filesystem is on Spark's classpath: Spark checkpoints
    can then go to S3 too; update docs/operations.md and checkpoint to S3 in the AWS test."""
    jvm = spark.sparkContext._jvm
    hadoop_conf = spark.sparkContext._jsc.hadoopConfiguration()
    with pytest.raises(Exception, match=r"UnsupportedFileSystemException|S3AFileSystem not found"):
        jvm.org.apache.hadoop.fs.FileSystem.getFileSystemClass(scheme, hadoop_conf)


def test_ingestion_with_progress_in_s3_and_the_checkpoint_on_local_disk(
    s3_root: str, moto_endpoint, settings_factory
) -> None:
    """The topology for a Spark without an S3 filesystem: executors' progress records in
    S3, Spark's checkpoint on the driver's disk, and a lost checkpoint resumes from the
    raw table's committed positions."""
    progress_root = s3_root.split("/checkpoints/", 1)[0] + "/progress"
    settings = settings_factory(moto_endpoint, source_progress_dir=progress_root)
    produce(settings, 150, seed=61)

    first = run_cli(settings, "ingest")

    assert first.returncode == 0, first.stderr[-4000:]
    progress = f"{progress_root}/{settings.namespace}/raw_events/kinesis-source"
    assert [key for key in _keys(progress) if key.endswith("status.json")], "progress in S3"
    checkpoint = Path(checkpoint_location(settings))
    assert (checkpoint / "commits").is_dir()
    assert not (checkpoint / "kinesis-source").exists(), "nothing of the source's on local disk"

    shutil.rmtree(checkpoint)  # the driver's disk is gone
    produce(settings, 50, seed=62)
    second = run_cli(settings, "ingest")

    assert second.returncode == 0, second.stderr[-4000:]
    keys = raw_keys(settings)
    assert len(keys) == len(set(keys)) == 200
    assert {(shard, sequence) for shard, sequence, _ in keys} == stream_truth(settings)


def test_the_driver_reads_an_epochs_progress_records_together_not_one_by_one(
    moto_endpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Planning a micro-batch reads the previous epoch's record of every shard. One GET
    after another, 500 shards on S3 (tens of ms each) cost the driver seconds per
    micro-batch, 5,000 shards over a minute; the proxy gives each request S3's latency
    and counts how many the store keeps in flight."""
    with SlowS3Proxy(moto_endpoint.url) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        S3FileSystem.clear_instance_cache()  # an earlier test's instance talks to moto
        bucket = f"state-{uuid.uuid4().hex[:12]}"
        boto3.client("s3").create_bucket(Bucket=bucket)
        root = f"s3://{bucket}/progress"
        writer = ShardProgressStore(root)
        shards = [f"shardId-{n:012d}" for n in range(24)]
        for shard in shards[:-4]:  # four shards read nothing this epoch: no record
            writer.save(RUN, 7, ProgressRecord(outcome(shard, "42")))
        proxy.reset()

        found = ShardProgressStore(root).load_epoch(RUN, 7, shards)
        S3FileSystem.clear_instance_cache()  # the proxy is gone: let no later test use it

    assert sorted(found) == shards[:-4]
    assert {r.outcome.last_sequence_number for r in found.values()} == {"42"}
    assert proxy.max_in_flight > 1, f"{proxy.requests} requests, one at a time"
