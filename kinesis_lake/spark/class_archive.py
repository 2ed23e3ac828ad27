"""A class-data-sharing archive of Spark's classes, so a local driver JVM starts sooner.

Every ``kinesis-lake ingest`` without a Connect server, every bounded Dagster run and
every test that starts Spark pays the driver JVM's start: it loads and verifies some
twenty thousand classes from Spark's jars. The JDK can map classes it loaded once from
an archive instead (AppCDS, ``-XX:SharedArchiveFile``); on the 2-core machine of the
benchmarks this took a session's start plus first query from 11.5 s to 8.9 s and cut
the CPU it costs by a quarter. Nothing else changes: a JVM that cannot use the archive
(another JDK, another class path) loads classes from the jars as before.

``make setup`` records the archive (:mod:`kinesis_lake.spark.record_class_archive`); it
belongs to the virtualenv whose Spark jars it holds.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pyspark

QUIET_CDS = "-Xlog:cds=off -Xlog:cds+dynamic=off"
"""The JVM prints an archive it cannot use, or classes it cannot record, on stdout: the
command's own output. Either way Spark runs as before, so neither is worth a line."""


def archive_path() -> Path:
    """Where this virtualenv's archive lives: beside the Spark jars it was recorded from."""
    return Path(sys.prefix) / "share" / "kinesis-lake" / f"spark-{pyspark.__version__}.jsa"


def java_options() -> str:
    """Driver JVM options that map the archive, or nothing when none was built."""
    archive = archive_path()
    if not archive.is_file():
        return ""
    return f"-XX:SharedArchiveFile={archive} {QUIET_CDS}"
