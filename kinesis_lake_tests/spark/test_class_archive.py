"""The driver JVM maps Spark's classes from the archive ``make setup`` records."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kinesis_lake.spark.runtime import class_archive

START_A_SESSION = """
import sys
from kinesis_lake.spark.runtime.session import build_spark_session
spark = build_spark_session(
    conf={"spark.driver.extraJavaOptions": f"-Xlog:class+load=info:file={sys.argv[1]}"},
    log_dir=sys.argv[2],
)
spark.range(3).count()
spark.stop()
"""


def test_a_driver_jvm_loads_sparks_classes_from_the_archive_setup_records(tmp_path: Path):
    archive = class_archive.archive_path()
    assert archive.is_file(), f"make setup records it; so does {class_archive.RECORD_AGAIN}"
    assert not list(archive.parent.glob("*.partial")), "a recording was left half-written"

    loaded = tmp_path / "classes.log"
    started = subprocess.run(
        [sys.executable, "-c", START_A_SESSION, str(loaded), str(tmp_path / "logs")],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )

    spark_context = [
        line for line in loaded.read_text().splitlines() if "org.apache.spark.SparkContext " in line
    ]
    assert spark_context, "the JVM never loaded SparkContext"
    assert "source: shared objects file (top)" in spark_context[0], (
        f"{spark_context[0]}: the archive is stale? run {class_archive.RECORD_AGAIN}"
    )
    assert "[cds" not in started.stdout


def test_an_archive_the_jvm_cannot_use_is_said_in_sparks_log_not_on_stdout():
    # A JVM on another class path than the recording's, as after a pyspark upgrade.
    options = class_archive.java_options()

    java = subprocess.run(
        ["java", *options.split(), "-version"], capture_output=True, text=True, timeout=60
    )

    assert java.returncode == 0, java.stderr
    assert "[cds" not in java.stdout
    assert "Unable to use shared archive" in java.stderr


@pytest.mark.parametrize(
    "theirs", ["-Xshare:off", "-XX:SharedArchiveFile=/opt/theirs.jsa", "-XX:ArchiveClassesAtExit=x"]
)
def test_class_sharing_options_of_the_users_own_win(theirs: str):
    assert class_archive.archive_path().is_file()
    assert class_archive.java_options(f"-Dx=1 {theirs}") == f"-Dx=1 {theirs}"
    assert class_archive.java_options("-Dx=1").startswith("-Dx=1 -XX:SharedArchiveFile=")


def test_without_an_archive_the_driver_gets_no_archive_option(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    assert class_archive.java_options("-Dx=1") == "-Dx=1"
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "a folder"))
    (class_archive.archive_path().parent).mkdir(parents=True)
    class_archive.archive_path().write_bytes(b"")
    assert class_archive.java_options("") == "", "Spark would split the path at the space"
