"""A reader of our tables that is not ours: Apache Iceberg's Java implementation.

Built once into ``.local/iceberg-java`` (git-ignored, like the other tools ``make``
installs): a virtualenv with pyspark 3.5 (Iceberg's Spark runtime is built for it), the
``iceberg-spark-runtime-3.5_2.12`` jar from the ``snowpark-connect-deps-iceberg`` wheel (no
Maven here), and the Jackson classes that jar expects relocated under
``org.apache.iceberg.shaded`` but lacks, made from Spark's own Jackson (``relocate.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

from kinesis_lake_tests.interop.relocate import relocate_jars

REPO = Path(__file__).resolve().parents[2]
HOME = REPO / ".local" / "iceberg-java"
PYSPARK = "pyspark==3.5.9"
BUNDLE = "snowpark-connect-deps-iceberg==1.0.3"
RUNTIME_JAR = "snowpark_connect_deps_iceberg/jars/iceberg-spark-runtime-3.5_2.12-1.10.2.jar"
JACKSON = ("jackson-core", "jackson-databind", "jackson-annotations")


def _run(*command: str) -> None:
    subprocess.run(command, check=True, capture_output=True, text=True, timeout=900)


def reader_jars() -> tuple[Path, str]:
    """The 3.5 virtualenv's Python and the jars to put on its classpath, built if missing."""
    python = HOME / "venv" / "bin" / "python"
    runtime = HOME / Path(RUNTIME_JAR).name
    jackson = HOME / "jackson-relocated.jar"
    if not python.exists():
        _run(sys.executable, "-m", "venv", str(HOME / "venv"))
        _run(str(python), "-m", "pip", "install", "-qq", PYSPARK)
    if not runtime.exists():
        wheels = HOME / "wheels"
        _run(sys.executable, "-m", "pip", "download", "-qq", "--no-deps", BUNDLE, "-d", str(wheels))
        (wheel,) = wheels.glob("*.whl")
        with zipfile.ZipFile(wheel) as bundle:
            runtime.write_bytes(bundle.read(RUNTIME_JAR))
    if not jackson.exists():
        spark_jars = next((HOME / "venv" / "lib").glob("python3*/site-packages/pyspark/jars"))
        sources = [next(spark_jars.glob(f"{name}-2*.jar")) for name in JACKSON]
        relocate_jars(sources, "com.fasterxml.jackson", "org.apache.iceberg.shaded", jackson)
    return python, f"{runtime},{jackson}"


def read_with_iceberg_java(metadata_files: list[str]) -> dict[str, dict[str, Any]]:
    """Row count (and characters of every row as JSON; a small table's rows as JSON, too)
    of each table, as Iceberg Java reads it."""
    python, jars = reader_jars()
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PYSPARK", "SPARK_HOME", "PYTHONPATH"))
    }
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    done = subprocess.run(
        [str(python), str(Path(__file__).with_name("java_read.py")), jars, *metadata_files],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("ICEBERG_JAVA ")]
    assert done.returncode == 0 and lines, done.stderr[-4000:]
    return json.loads(lines[-1].removeprefix("ICEBERG_JAVA "))
