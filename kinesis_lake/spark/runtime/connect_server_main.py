"""The Spark application a ``ConnectServer`` submits: Spark Connect served from a driver
whose sessions share their Python processes.

Spark's own ``SparkConnectServer`` forces artifact isolation on, and Spark keys its Python
daemons on a session's artifact id: every Connect session, and every streaming query (a
clone of its session), started its own daemons, each importing PySpark and our modules
again. So every Dagster run paid those starts before its first commit (a new session's
first Python UDF: 2.6-2.9 s, against 0.8-0.9 s in a server without isolation, measured
2026-12-06 on 2 cores), and the server kept them all until it stopped (SPARK-54055).

Here the Connect service is Spark's plugin (``SparkConnectPlugin``) in a driver started
with ``spark.sql.artifact.isolation.enabled=false`` (``connect_server.server_command``):
every session then shares one daemon per worker module. What isolation would have kept
apart is artifacts a client uploads (``addArtifact``), which no kinesis-lake client does:
the data sources are installed in the server's Python.
"""

from __future__ import annotations

import os
import signal
import threading

from pyspark.sql import SparkSession

PARENT_CHECK_S = 5.0


def serve() -> None:
    """Start the driver (the plugin starts the Connect service in it) and serve until
    SIGTERM or SIGINT, or until the JVM that started it is gone (killed on its own, say:
    an idle driver would otherwise live on)."""
    jvm = os.getppid()
    spark = SparkSession.builder.getOrCreate()  # every setting came with spark-submit
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):  # after PySpark set its own SIGINT one
        signal.signal(signum, lambda *_: stop.set())
    try:
        while not stop.wait(PARENT_CHECK_S) and os.getppid() == jvm:
            pass
    finally:
        spark.stop()


if __name__ == "__main__":
    serve()
