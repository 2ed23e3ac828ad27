"""Records the class archive of :mod:`kinesis_lake.spark.class_archive` (``make setup``).

Run as ``python -m kinesis_lake.spark.record_class_archive``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from pyspark import SparkContext

from kinesis_lake.spark.class_archive import QUIET_CDS, archive_path
from kinesis_lake.spark.session import build_spark_session


def record(destination: Path) -> None:
    """Run a small job in a JVM that writes the classes it loaded to ``destination``."""
    with tempfile.TemporaryDirectory(prefix="kinesis-lake-cds-") as scratch:
        option = f"-XX:ArchiveClassesAtExit={destination} {QUIET_CDS}"
        spark = build_spark_session(conf={"spark.driver.extraJavaOptions": option}, log_dir=scratch)
        frame = spark.createDataFrame([(1, "a"), (2, "b")], "id long, name string")
        frame.groupBy("name").count().collect()
        frame.write.parquet(str(Path(scratch) / "table"))
        spark.read.parquet(str(Path(scratch) / "table")).filter("id > 1").collect()
        spark.stop()
        # The JVM writes the archive as it exits, which it does once its stdin closes.
        jvm = SparkContext._gateway.proc  # type: ignore[union-attr]
        jvm.stdin.close()
        jvm.wait(timeout=300)


def build() -> Path:
    """Record the archive in a JVM of its own and put it in place whole.

    The JVM writes the archive when it exits, so the recording runs in a child process;
    the rename makes a half-written archive impossible to pick up.
    """
    archive = archive_path()
    archive.parent.mkdir(parents=True, exist_ok=True)
    # The recording JVM must not map the archive it replaces (JVMs that have keep theirs).
    archive.unlink(missing_ok=True)
    for leftover in archive.parent.glob(f"{archive.name}.*.partial"):
        leftover.unlink()
    partial = archive.with_name(f"{archive.name}.{os.getpid()}.partial")
    subprocess.run(
        [sys.executable, "-m", "kinesis_lake.spark.record_class_archive", "--record", str(partial)],
        check=True,
        env={**os.environ, "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1")},
    )
    if not partial.is_file():
        raise RuntimeError(
            f"the JVM wrote no class archive at {partial}: Spark starts as before, only "
            "slower. Check that 'java -version' is 17 or newer."
        )
    partial.replace(archive)
    return archive


if __name__ == "__main__":
    if sys.argv[1:2] == ["--record"]:
        record(Path(sys.argv[2]))
    else:
        print(f"class archive: {build()}")
