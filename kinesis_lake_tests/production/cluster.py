"""A throwaway Spark standalone cluster (one master, N workers) on 127.0.0.1.

Started from the pip-installed pyspark itself, so it is exactly the Spark the jobs link
against. pyspark 4.3's wheel ships ``sbin/spark-daemon.sh`` but not the
``start-master.sh`` / ``start-worker.sh`` wrappers around it, so the daemons are started
the way those wrappers do it: ``spark-daemon.sh start <Master|Worker class> <n> ...``.

Everything is bound to loopback and kept under one root directory (pid files, logs,
worker work dirs, an empty conf dir so a machine-wide ``spark-env.sh`` cannot leak in),
with free ports for RPC and web UIs, so several clusters (or other engineers' Spark
sessions) can coexist on one machine. Readiness is read from the master's JSON status
page rather than from sleeps.

Use it as a context manager::

    with SparkStandaloneCluster(tmp_path / "spark").start() as cluster:
        run_job(spark_master=cluster.master_url)
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import pyspark

from kinesis_lake.kinesis.endpoint import free_port

LOOPBACK = "127.0.0.1"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
SPARK_HOME = Path(pyspark.__file__).resolve().parent
_STOP_GRACE_S = 15.0


class ClusterStartError(RuntimeError):
    """The cluster did not come up; the message carries the daemons' logs."""


@dataclass
class SparkStandaloneCluster:
    """A master and ``workers`` workers of ``worker_cores`` cores / ``worker_memory`` each."""

    root: Path
    workers: int = 2
    worker_cores: int = 1
    worker_memory: str = "1g"
    env: dict[str, str] = field(default_factory=dict)
    """Extra variables for the daemons; executors inherit their worker's environment."""
    spark_home: Path = SPARK_HOME
    """The Spark distribution: the locked pyspark's by default, or another pip pyspark's."""
    master_port: int = field(default_factory=free_port)
    master_webui_port: int = field(default_factory=free_port)
    _ident: str = field(default_factory=lambda: f"kinesis-lake-{uuid.uuid4().hex[:8]}")
    _started: list[tuple[str, int]] = field(default_factory=list)

    @property
    def master_url(self) -> str:
        return f"spark://{LOOPBACK}:{self.master_port}"

    @property
    def log_dir(self) -> Path:
        return self.root / "logs"

    def _environment(self) -> dict[str, str]:
        env = {**os.environ, **self.env}
        # spark-daemon.sh treats a set SPARK_MASTER as "rsync SPARK_HOME from this host
        # over ssh before starting": never let the pipeline's own setting reach it.
        env.pop("SPARK_MASTER", None)
        conf_dir = self.root / "conf"
        conf_dir.mkdir(parents=True, exist_ok=True)
        env.update(
            SPARK_HOME=str(self.spark_home),
            SPARK_CONF_DIR=str(conf_dir),
            SPARK_MASTER_HOST=LOOPBACK,
            SPARK_LOCAL_IP=LOOPBACK,
            SPARK_LOCAL_HOSTNAME=LOOPBACK,
            SPARK_PID_DIR=str(self.root / "pids"),
            SPARK_LOG_DIR=str(self.log_dir),
            SPARK_WORKER_DIR=str(self.root / "work"),
            SPARK_IDENT_STRING=self._ident,
            # Executors start Python workers with this interpreter: the one that has
            # kinesis-lake installed (a real cluster installs the package on every node).
            PYSPARK_PYTHON=env.get("PYSPARK_PYTHON", sys.executable),
            SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false",
        )
        return env

    def _daemon(self, action: str, daemon_class: str, instance: int, *args: str) -> None:
        completed = subprocess.run(
            [
                "bash",
                str(self.spark_home / "sbin" / "spark-daemon.sh"),
                action,
                daemon_class,
                str(instance),
                *args,
            ],
            env=self._environment(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if action == "start" and (
            completed.returncode != 0 or "failed to launch" in completed.stdout
        ):
            raise ClusterStartError(
                f"spark-daemon.sh start {daemon_class} failed:\n{completed.stdout}\n"
                f"{completed.stderr}\n{self.logs()}"
            )

    def start(self, timeout_s: float = 180.0) -> SparkStandaloneCluster:
        """Start the master, then the workers, and wait until every worker is ALIVE."""
        for directory in ("pids", "logs", "work"):
            (self.root / directory).mkdir(parents=True, exist_ok=True)
        try:
            # Recorded before starting, so that stop() also reaps a half-started daemon.
            self._started.append((MASTER_CLASS, 1))
            self._daemon(
                "start",
                MASTER_CLASS,
                1,
                "--host",
                LOOPBACK,
                "--port",
                str(self.master_port),
                "--webui-port",
                str(self.master_webui_port),
            )
            for instance in range(1, self.workers + 1):
                self._started.append((WORKER_CLASS, instance))
                self._daemon(
                    "start",
                    WORKER_CLASS,
                    instance,
                    "--host",
                    LOOPBACK,
                    "--port",
                    str(free_port()),
                    "--webui-port",
                    str(free_port()),
                    "--cores",
                    str(self.worker_cores),
                    "--memory",
                    self.worker_memory,
                    "--work-dir",
                    str(self.root / "work" / f"worker-{instance}"),
                    self.master_url,
                )
            self._wait_for_workers(time.monotonic() + timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def status(self) -> dict:
        """The master's own view (``/json``): workers, cores, running applications."""
        url = f"http://{LOOPBACK}:{self.master_webui_port}/json/"
        # No proxy, whatever the environment says: this request must stay on loopback.
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(url, timeout=5) as response:
            return json.load(response)

    def _wait_for_workers(self, deadline: float) -> None:
        while True:
            with contextlib.suppress(OSError, ValueError):
                if self.status().get("aliveworkers", 0) >= self.workers:
                    return
            if time.monotonic() > deadline:
                raise ClusterStartError(
                    f"{self.workers} workers did not register with {self.master_url} in time.\n"
                    f"{self.logs()}"
                )
            time.sleep(0.5)

    def stop(self) -> None:
        """Stop workers (and their executors) first, then the master; idempotent."""
        while self._started:
            daemon_class, instance = self._started.pop()
            pid = self._pid(daemon_class, instance)
            self._daemon("stop", daemon_class, instance)
            if pid is not None:
                _wait_gone(pid)

    def _pid(self, daemon_class: str, instance: int) -> int | None:
        pid_file = self.root / "pids" / f"spark-{self._ident}-{daemon_class}-{instance}.pid"
        try:
            return int(pid_file.read_text().strip())
        except (OSError, ValueError):
            return None

    def logs(self, tail: int | None = 40) -> str:
        """Every daemon log (the last ``tail`` lines of each; None: all of it)."""
        parts = []
        for log in sorted(self.log_dir.glob("*.out")):
            lines = log.read_text(errors="replace").splitlines()
            parts.append(f"--- {log.name}\n" + "\n".join(lines[-tail:] if tail else lines))
        return "\n".join(parts)

    def __enter__(self) -> SparkStandaloneCluster:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


def _wait_gone(pid: int) -> None:
    """Wait for a daemon the stop script signalled; SIGKILL it if it lingers."""
    deadline = time.monotonic() + _STOP_GRACE_S
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
