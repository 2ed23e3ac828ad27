"""Stop the Python daemons a Spark Connect server keeps for queries that have ended.

Spark starts one Python daemon per worker module and Connect session, keyed by the
session's artifact id (``SPARK_JOB_ARTIFACT_UUID``), and stops none of them before the
server stops (SPARK-54055). In a Connect server every streaming query runs in a clone of
its session, with an artifact id of its own, so every ``kinesis-lake ingest`` and every
Dagster run left five daemons behind (its session's data source lookup, and its query's
planner, writer, sink runner and ``create_data_source``), each with pyarrow, pyiceberg and
kinesis-lake imported: measured on pip's pyspark 4.3.0, 7, 12 then 17 daemons after three
runs. A lingering deployment starts hundreds of runs a day. Spark's own fix
(apache/spark#55131) stops a session's daemons when it closes and evicts those idle for
five minutes; pip's pyspark 4.3 lacks it.

This does the same from outside the JVM, in the process that started the server: a daemon
of a Connect session (any artifact id but Spark's ``default``) that has kept no worker and
used no CPU but its socket polling for ``idle_after_s`` is suspended, checked once more
for workers (one could have been forked meanwhile), and then stopped. Spark itself stops
a factory's idle workers after a minute, so a daemon is only stopped once its factory
holds nothing: a dead idle worker would fail the next task that dequeued it (seen when
this stopped daemons that still had workers). Should Spark need a stopped daemon again (a
live query whose trigger is longer than ``idle_after_s``), ``PythonWorkerFactory`` is
written to find it unreachable and start a new one, paying its imports once, the trade
Spark's fix makes too; no test here waits that long. A task asking that daemon for a
worker in the very milliseconds it is stopped fails (Spark retries it where task retries
are on, not in ``local`` mode, where the run fails and the next replays it). Executors
on other hosts of a cluster keep such daemons as well; only the server host's are stopped.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

import psutil

logger = logging.getLogger(__name__)

REAP_IDLE_DAEMONS_AFTER_S = 300.0
"""How long a Connect session's daemon may sit idle: Spark's own fix waits five minutes."""

_ARTIFACT_ID = "SPARK_JOB_ARTIFACT_UUID"
_NOT_A_CONNECT_SESSION = "default"


_IDLE_CPU_SHARE = 0.02
"""An idle daemon wakes every second to poll its socket, well under 2% of a core; one that
is starting (importing its modules) or forking workers uses far more."""


@dataclass
class _Seen:
    own_cpu_s: float
    workers_cpu_s: float
    at: float
    idle_since: float

    def busy(self, own_cpu_s: float, workers_cpu_s: float, now: float) -> bool:
        own_share = (own_cpu_s - self.own_cpu_s) / max(now - self.at, 1e-3)
        return workers_cpu_s != self.workers_cpu_s or own_share > _IDLE_CPU_SHARE


class IdleDaemonReaper:
    """A thread that stops a JVM's idle Connect-session daemons; ``start`` and ``stop``."""

    def __init__(self, jvm_pid: int, *, idle_after_s: float, poll_s: float = 10.0) -> None:
        if idle_after_s <= 0:
            raise ValueError(f"idle_after_s must be positive, not {idle_after_s}")
        self._jvm = psutil.Process(jvm_pid)
        self._idle_after_s = idle_after_s
        self._poll_s = min(poll_s, idle_after_s / 2)
        self._seen: dict[tuple[int, float], _Seen] = {}
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="idle-daemon-reaper", daemon=True)

    def start(self) -> IdleDaemonReaper:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stopping.wait(self._poll_s):
            try:
                self.sweep(time.monotonic())
            except psutil.NoSuchProcess:
                return  # the server has stopped
            except Exception:  # never let a failed sweep end the reaping for good
                logger.warning("Spark Connect: sweeping idle Python daemons failed", exc_info=True)

    def sweep(self, now: float) -> None:
        """Stop the daemons idle since ``idle_after_s`` before ``now``."""
        present = set()
        for daemon in self._jvm.children():
            try:
                if not _is_session_daemon(daemon):
                    continue
                key = (daemon.pid, daemon.create_time())  # a pid can be reused
                present.add(key)
                own_cpu_s, workers_cpu_s = _cpu_s(daemon)
                seen = self._seen.get(key)
                idle_since = now
                keeps_workers = bool(daemon.children())
                if seen and not keeps_workers and not seen.busy(own_cpu_s, workers_cpu_s, now):
                    idle_since = seen.idle_since
                self._seen[key] = _Seen(own_cpu_s, workers_cpu_s, now, idle_since)
                if now - idle_since >= self._idle_after_s:
                    _stop_unless_working(daemon)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        self._seen = {key: seen for key, seen in self._seen.items() if key in present}


def _is_session_daemon(process: psutil.Process) -> bool:
    """A Python daemon (``-m pyspark.daemon`` or ``spark.python.daemon.module``'s; not a
    simple worker) started for a Connect session or query."""
    artifact_id = process.environ().get(_ARTIFACT_ID, _NOT_A_CONNECT_SESSION)
    is_daemon = any(arg.endswith("daemon") for arg in process.cmdline())
    return is_daemon and artifact_id != _NOT_A_CONNECT_SESSION


def _stop_unless_working(daemon: psutil.Process) -> None:
    """SIGTERM, unless a worker was forked since the last look: the daemon is suspended
    first, so none can be forked between that check and the signal (PySpark's daemon
    passes SIGTERM on to its workers)."""
    command = daemon.cmdline()
    daemon.suspend()
    try:
        deadline = time.monotonic() + 1.0
        while daemon.status() != psutil.STATUS_STOPPED and time.monotonic() < deadline:
            time.sleep(0.01)
        if daemon.children():
            return
        daemon.terminate()  # psutil checks it is still the same process
        logger.info("Spark Connect: stopped idle Python daemon %s", command)
    finally:
        daemon.resume()  # SIGTERM takes effect once it runs again


def _cpu_s(daemon: psutil.Process) -> tuple[float, float]:
    """The daemon's own CPU and its running workers': what grows with use. (The daemon
    ignores SIGCHLD, so an ended worker's CPU is counted nowhere; its going changes the sum.)"""
    own = daemon.cpu_times()
    workers = sum(t.user + t.system for t in (w.cpu_times() for w in daemon.children()))
    return own.user + own.system, workers
