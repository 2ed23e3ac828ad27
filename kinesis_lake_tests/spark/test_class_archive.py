"""The driver JVM maps Spark's classes from the archive ``make setup`` records."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kinesis_lake.spark import class_archive

START_A_SESSION = """
import sys
from kinesis_lake.spark.session import build_spark_session
spark = build_spark_session(
    conf={"spark.driver.extraJavaOptions": f"-Xlog:class+load=info:file={sys.argv[1]}"},
    log_dir=sys.argv[2],
)
spark.range(3).count()
spark.stop()
"""


def test_a_driver_jvm_loads_sparks_classes_from_the_archive_setup_records(tmp_path: Path):
    archive = class_archive.archive_path()
    assert archive.is_file(), "make setup (scripts/bootstrap.sh) records it"
    assert not list(archive.parent.glob("*.partial")), "a recording was left half-written"

    loaded = tmp_path / "classes.log"
    subprocess.run(
        [sys.executable, "-c", START_A_SESSION, str(loaded), str(tmp_path / "logs")],
        check=True,
        timeout=300,
    )

    spark_context = [
        line for line in loaded.read_text().splitlines() if "org.apache.spark.SparkContext " in line
    ]
    assert spark_context, "the JVM never loaded SparkContext"
    assert "source: shared objects file (top)" in spark_context[0], spark_context[0]


def test_without_an_archive_the_driver_gets_no_archive_option(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    assert class_archive.java_options() == ""
