"""Threads that run Spark work beside a streaming query, on the caller's session."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from pyspark.sql import SparkSession


def session_thread(spark: SparkSession, target: Callable[[], None], name: str) -> threading.Thread:
    """A daemon thread running ``target`` with ``spark`` as its active session.

    Classic PySpark gives each Python thread a JVM thread of its own, and the JVM's active
    session is per thread: without this, a write to one of our Python data sources from
    the new thread looks the source up in the default session, which may not have it
    (``DATA_SOURCE_NOT_FOUND``). Over Spark Connect the server resolves the session.
    """

    def run() -> None:
        _activate(spark)
        target()

    return threading.Thread(target=run, name=name, daemon=True)


def session_pool(spark: SparkSession, workers: int, name: str) -> ThreadPoolExecutor:
    """Threads that submit Spark jobs side by side on ``spark`` (for the reason above,
    each with it as its active session)."""
    return ThreadPoolExecutor(workers, name, initializer=_activate, initargs=(spark,))


def _activate(spark: SparkSession) -> None:
    jvm_session = getattr(spark, "_jsparkSession", None)
    jvm = getattr(spark, "_jvm", None)
    if jvm_session is not None and jvm is not None:
        jvm.SparkSession.setActiveSession(jvm_session)
