"""Records the class archive of :mod:`kinesis_lake.spark.runtime.class_archive` (``make setup``).

Run as ``python -m kinesis_lake.spark.runtime.record_class_archive``. The JVM writes the archive
as it exits, so the recording runs in a child process that waits for its JVM; the file
is written under a name of its own and renamed into place only when the JVM exited
cleanly, so a JVM never maps a half-written archive, and a failed recording leaves the
archive there before it.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from pyspark import SparkContext

from kinesis_lake.errors import KinesisLakeError
from kinesis_lake.spark.runtime.class_archive import (
    CDS_WARNINGS_TO_STDERR,
    RECORD_AGAIN,
    archive_path,
)
from kinesis_lake.spark.runtime.session import build_spark_session

JVM_EXIT_TIMEOUT_S = 300


class ClassArchiveError(KinesisLakeError):
    """The archive could not be recorded: Spark works, its JVM starts slower."""


def record(destination: Path) -> None:
    """Run a small job in a JVM that writes the classes it loaded to ``destination``."""
    with tempfile.TemporaryDirectory(prefix="kinesis-lake-cds-") as scratch:
        option = f"-XX:ArchiveClassesAtExit={destination} {CDS_WARNINGS_TO_STDERR}"
        spark = build_spark_session(conf={"spark.driver.extraJavaOptions": option}, log_dir=scratch)
        frame = spark.createDataFrame([(1, "a"), (2, "b")], "id long, name string")
        frame.groupBy("name").count().collect()
        frame.write.parquet(str(Path(scratch) / "table"))
        spark.read.parquet(str(Path(scratch) / "table")).filter("id > 1").collect()
        spark.stop()
        # The JVM exits once its stdin closes; one that hangs is killed, its file unused.
        jvm = SparkContext._gateway.proc  # type: ignore[union-attr]
        jvm.stdin.close()
        try:
            code = jvm.wait(timeout=JVM_EXIT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            jvm.kill()
            jvm.wait()
            code = -1
        if code != 0:
            destination.unlink(missing_ok=True)
            raise ClassArchiveError(f"the recording JVM exited with {code}")


def build() -> Path:
    """Record this virtualenv's archive and put it in place; drop archives of other pysparks."""
    archive = archive_path()
    archive.parent.mkdir(parents=True, exist_ok=True)
    with open(archive.parent / ".recording.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two setups at once record one after the other
        partial = archive.with_name(f"{archive.name}.{os.getpid()}.partial")
        recording = subprocess.run(
            [
                sys.executable,
                "-m",
                "kinesis_lake.spark.runtime.record_class_archive",
                "--record",
                str(partial),
            ],
            check=False,
        )
        if recording.returncode != 0 or not partial.is_file():
            partial.unlink(missing_ok=True)
            raise ClassArchiveError(
                f"no class archive was recorded (exit {recording.returncode}): Spark works, "
                f"its JVM starts slower. Check 'java -version' (17+), then run {RECORD_AGAIN}."
            )
        partial.replace(archive)
        for other in archive.parent.glob("spark-*.jsa"):
            if other != archive:
                other.unlink()
    return archive


def main() -> int:
    if sys.argv[1:2] == ["--record"]:
        record(Path(sys.argv[2]))
        return 0
    try:
        print(f"class archive: {build()}")
    except ClassArchiveError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
