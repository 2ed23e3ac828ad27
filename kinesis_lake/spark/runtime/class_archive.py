"""A class-data-sharing archive of Spark's classes, so a local driver JVM starts sooner.

Every ``kinesis-lake ingest`` without a Connect server, every bounded Dagster run and
every test that starts Spark pays the driver JVM's start: it loads and verifies some
twenty thousand classes from Spark's jars. The JDK can map classes it loaded once from
an archive instead (AppCDS, ``-XX:SharedArchiveFile``); benchmark 11 measures what that
saves, and what it costs in memory (the JVM maps the archive privately; measured: 397 MB
of PSS against 387 MB without it).

A JVM that cannot use the archive (another JDK build, another class path) says so in
Spark's log and loads its classes from the jars as before. Options of the user's own
about class sharing win: the archive is then left out rather than fighting them, since
two such options together can stop the JVM from starting.

``make setup`` records the archive (:mod:`kinesis_lake.spark.runtime.record_class_archive`). It
is recorded from, and only valid for, this virtualenv's pyspark and the JDK of that day.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pyspark

CDS_WARNINGS_TO_STDERR = "-Xlog:cds*=off -Xlog:cds*=warning:stderr"
"""The JVM prints class-sharing warnings on stdout, the command's own output, by default.
On stderr they land in Spark's log (``log_dir``), where an operator looks."""

USER_CLASS_SHARING_OPTIONS = (
    "-Xshare:",
    "-XX:SharedArchiveFile",
    "-XX:ArchiveClassesAtExit",
    "-XX:+AutoCreateSharedArchive",
)

RECORD_AGAIN = "python -m kinesis_lake.spark.runtime.record_class_archive"
"""Records the archive anew (after a JDK or pyspark upgrade); ``make setup`` runs it."""


def archive_path() -> Path:
    """Where this virtualenv's archive lives, named by the pyspark it was recorded from."""
    return Path(sys.prefix) / "share" / "kinesis-lake" / f"spark-{pyspark.__version__}.jsa"


def java_options(existing: str = "") -> str:
    """Driver JVM options that map the archive, added to ``existing`` ones.

    Nothing is added without an archive, beside options of the user's own about class
    sharing, or for a path with whitespace (Spark splits the options on it).
    """
    archive = archive_path()
    if (
        not archive.is_file()
        or any(option in existing for option in USER_CLASS_SHARING_OPTIONS)
        or any(character.isspace() for character in str(archive))
    ):
        return existing
    return f"{existing} -XX:SharedArchiveFile={archive} {CDS_WARNINGS_TO_STDERR}".strip()
