"""Stop the Python daemons a Spark Connect server keeps for queries that have ended.

Spark starts one Python daemon per worker module and Connect session, keyed by the
session's artifact id (``SPARK_JOB_ARTIFACT_UUID``), and stops none of them before the
server stops (SPARK-54055). In a Connect server every streaming query runs in a clone of
its session, with an artifact id of its own, so every ``kinesis-lake ingest`` and every
Dagster run left four daemons behind (the data source planner, writer, sink runner and
``create_data_source``), each with pyarrow, pyiceberg and kinesis-lake imported: measured
on pip's pyspark 4.3.0, 7, 12 then 17 daemons after three runs. A lingering deployment
starts hundreds of runs a day. Spark's own fix (apache/spark#55131) stops a session's
daemons when it closes and evicts those idle for five minutes; pip's pyspark 4.3 lacks it.

This does the same from outside the JVM, in the process that started the server: a daemon
of a Connect session (any artifact id but Spark's ``default``) that has kept no worker and
used no CPU but its socket polling for ``idle_after_s`` gets SIGTERM. Spark itself stops
a factory's idle workers after a minute, so a daemon is only stopped once its factory
holds nothing: a dead idle worker would fail the next task that dequeued it (seen when
this stopped daemons that still had workers). Should Spark need a stopped daemon again (a
live query whose trigger is longer than ``idle_after_s``), ``PythonWorkerFactory`` is
written to find it unreachable and start a new one, paying its imports once, the trade
Spark's fix makes too; no test here waits that long. Executors on other hosts of a
cluster keep such daemons as well; only the server host's are stopped here.
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
        self._jvm = psutil.Process(jvm_pid)
        self._idle_after_s = idle_after_s
        self._poll_s = min(poll_s, idle_after_s / 2)
        self._seen: dict[int, _Seen] = {}
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
                if daemon.environ().get(_ARTIFACT_ID, _NOT_A_CONNECT_SESSION) == (
                    _NOT_A_CONNECT_SESSION
                ):
                    continue
                present.add(daemon.pid)
                own_cpu_s, workers_cpu_s = _cpu_s(daemon)
                seen = self._seen.get(daemon.pid)
                idle_since = now
                keeps_workers = bool(daemon.children())
                if seen and not keeps_workers and not seen.busy(own_cpu_s, workers_cpu_s, now):
                    idle_since = seen.idle_since
                self._seen[daemon.pid] = _Seen(own_cpu_s, workers_cpu_s, now, idle_since)
                if now - idle_since >= self._idle_after_s:
                    daemon.terminate()  # psutil checks it is still the same process
                    logger.info("Spark Connect: stopped idle Python daemon %s", daemon.cmdline())
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        self._seen = {pid: seen for pid, seen in self._seen.items() if pid in present}


def _cpu_s(daemon: psutil.Process) -> tuple[float, float]:
    """The daemon's own CPU, and its workers' (running or ended): what grows with use."""
    own = daemon.cpu_times()
    running = (worker.cpu_times() for worker in daemon.children())
    workers = own.children_user + own.children_system + sum(t.user + t.system for t in running)
    return own.user + own.system, workers
