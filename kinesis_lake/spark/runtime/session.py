"""One way to build the Spark session every kinesis-lake job runs in.

It pins what correctness and the loopback-only rule depend on, so that no job forgets:
the driver binds ``SPARK_LOCAL_IP``, which defaults to 127.0.0.1 (Spark otherwise picks
the machine's external address), the Python workers run this interpreter (which has
kinesis-lake installed), timestamps are UTC, the web UI is off unless asked for, and
speculative execution is refused: two attempts of one Kinesis read task running at once
could record different stop points.

On a multi-host cluster the driver must be reachable from the executors: the deployment
sets ``SPARK_LOCAL_IP`` (Spark's own variable) to the driver host's cluster-facing address.
Executors are never told an address: each binds its own host's (a worker inherits
``SPARK_LOCAL_IP`` from its own environment), so local runs stay on loopback and remote
executors are not pinned to an address they do not have.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

from pyspark.sql import SparkSession

from kinesis_lake.errors import ConfigurationError
from kinesis_lake.spark.iceberg.sink import IcebergDataSource
from kinesis_lake.spark.kinesis.source import KinesisDataSource
from kinesis_lake.spark.runtime import class_archive
from kinesis_lake.spark.spark_version import register_data_source, require_spark

LOOPBACK = "127.0.0.1"

BASE_CONF: dict[str, str] = {
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.speculation": "false",
    "spark.sql.streaming.stopGracefullyOnShutdown": "true",
    # PySpark's daemon with our imports preloaded and frozen (see worker_daemon).
    "spark.python.daemon.module": "kinesis_lake.spark.runtime.worker_daemon",
}


class SparkConfigError(ConfigurationError):
    """A Spark setting that would break the pipeline's guarantees."""


def build_spark_session(
    master: str = "local[2]",
    *,
    app_name: str = "kinesis-lake",
    conf: Mapping[str, str] | None = None,
    log_dir: str | Path | None = None,
) -> SparkSession:
    """Create (or reuse, if one with the same master is active) the job's session.

    With ``log_dir``, a JVM this call starts writes its log to ``spark_log_file(log_dir)``
    instead of the terminal: commands print the pipeline's story, and the log is there
    (and named by the CLI) when a run fails.

    A ``master`` of ``sc://host:port`` attaches to a Spark Connect server
    (:mod:`kinesis_lake.spark.runtime.connect_server`) instead: no JVM starts here, and the
    pinned settings are the server's (it was started with them).
    """
    if is_connect(master):
        return _connect(master, conf or {})
    merged = {**driver_address_conf(), **BASE_CONF, **(conf or {})}
    if log_dir is not None:
        merged = _logging_to_file(merged, Path(log_dir))
    java_options = class_archive.java_options(merged.get("spark.driver.extraJavaOptions", ""))
    if java_options:
        merged["spark.driver.extraJavaOptions"] = java_options
    _refuse_speculation(merged)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    active = SparkSession.getActiveSession()
    if active is not None and active.sparkContext.master == master:
        return _register(active)
    if active is not None:
        active.stop()
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in merged.items():
        builder = builder.config(key, value)
    builder = builder.config("spark.executorEnv.PYSPARK_PYTHON", os.environ["PYSPARK_PYTHON"])
    if log_dir is None:
        return _register(builder.getOrCreate())
    with _jvm_stderr_to(spark_log_file(log_dir)):
        return _register(builder.getOrCreate())


def _refuse_speculation(conf: Mapping[str, str]) -> None:
    if conf.get("spark.speculation", "false").lower() == "true":
        raise SparkConfigError(
            "spark.speculation=true is not supported: two attempts of one Kinesis read "
            "task must never run at once. Remove the setting."
        )


def is_connect(master: str) -> bool:
    """``master`` is a Spark Connect URL, not a cluster manager's."""
    return master.startswith("sc://")


def _connect(url: str, conf: Mapping[str, str]) -> SparkSession:
    _refuse_speculation(conf)
    builder = SparkSession.builder.remote(url)
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    # The data sources are the server's own (Spark's pyspark_* auto-registration there).
    require_spark(session.version)
    return session


def spark_log_file(log_dir: str | Path) -> Path:
    """Where a session built with ``log_dir`` writes Spark's log."""
    return Path(log_dir) / "spark.log"


_LOG4J2 = """\
# Written by kinesis-lake: Spark logs to a file, not the terminal.
rootLogger.level = warn
rootLogger.appenderRef.file.ref = file
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log_file}
appender.file.append = true
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = %d{{yyyy-MM-dd HH:mm:ss}} %p %c{{1}}: %m%n%ex
"""


def _logging_to_file(conf: dict[str, str], log_dir: Path) -> dict[str, str]:
    """``conf`` with the driver JVM's log4j2 pointed at a file under ``log_dir``.

    Spark reads this only when it starts the JVM (the gateway passes every setting to
    spark-submit), so a session reused from earlier keeps its logging.
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    properties = log_dir / "log4j2.properties"
    properties.write_text(_LOG4J2.format(log_file=spark_log_file(log_dir).resolve()))
    option = f"-Dlog4j2.configurationFile={properties.resolve().as_uri()}"
    existing = conf.get("spark.driver.extraJavaOptions", "")
    return {**conf, "spark.driver.extraJavaOptions": f"{existing} {option}".strip()}


@contextlib.contextmanager
def _jvm_stderr_to(log_file: Path) -> Iterator[None]:
    """Let a JVM started inside this block inherit ``log_file`` as its stderr.

    What the JVM prints before log4j is up (the JDK's "Using incubator modules" warning that
    Spark's launcher options cause), and the stderr of the Python workers it starts, then
    land beside the log instead of in the terminal. Only the file descriptor is swapped, and
    only while the session is created: this process's own stderr is back right after.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(log_file, "ab") as log:
            os.dup2(log.fileno(), 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def driver_address_conf() -> dict[str, str]:
    """Where the driver listens and the address it gives executors: ``SPARK_LOCAL_IP``.

    Unset, it is set to loopback (before the JVM starts, so Spark's own processes see it
    too): nothing on a laptop or in the tests listens beyond this machine.
    """
    address = os.environ.setdefault("SPARK_LOCAL_IP", LOOPBACK)
    return {"spark.driver.host": address, "spark.driver.bindAddress": address}


def _register(spark: SparkSession) -> SparkSession:
    """Register explicitly too: auto-registration needs the package on sys.path at import.
    The JVM's Spark is checked here: the pyspark package may be newer than the cluster."""
    require_spark(spark.version)
    register_data_source(spark, KinesisDataSource)
    register_data_source(spark, IcebergDataSource)
    return spark
