"""A long-lived Spark that commands and Dagster runs attach to over Spark Connect.

Every ``kinesis-lake ingest`` and every Dagster run used to start a JVM and its Python
workers (10-35 s) before reading a record. With ``SPARK_MASTER=sc://host:port`` they
attach to a Spark Connect server instead: the session is a gRPC client (no JVM in the
client process), and the queries, the ``kinesis`` source and the Iceberg sink run in the
server, whose JVM, daemons and workers stay warm between runs. The server is Spark's own
Connect service (the ``spark-connect`` jar pip's pyspark ships), as its plugin in a driver
whose sessions share their Python processes (``connect_server_main`` says why), started
with the settings :func:`kinesis_lake.spark.runtime.session.build_spark_session` pins for a
local JVM and bound to loopback unless ``SPARK_LOCAL_IP`` says otherwise.

The server needs what a cluster needs: kinesis-lake installed in its Python (the data
sources are found by Spark's ``pyspark_*`` auto-registration), and AWS credentials and
region in its environment (boto3's chain runs there, not in the client).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

import pyspark

from kinesis_lake.config import SPARK_CONNECT_PORT
from kinesis_lake.errors import KinesisLakeError
from kinesis_lake.spark.runtime import connect_server_main
from kinesis_lake.spark.runtime.session import BASE_CONF, LOOPBACK, driver_address_conf

CONNECT_PLUGIN = "org.apache.spark.sql.connect.SparkConnectPlugin"
SHARED_PYTHON_PROCESSES = {
    # Spark's own SparkConnectServer forces this on; off, every session and query shares
    # one Python daemon per worker module (connect_server_main). It also makes any
    # artifact a client uploads (addArtifact) every session's: no kinesis-lake client does.
    "spark.sql.artifact.isolation.enabled": "false",
    "spark.plugins": CONNECT_PLUGIN,
}


class ConnectServerError(KinesisLakeError):
    """The server could not start; the message says where to look or what to do."""


def server_command(master: str, port: int, conf: Mapping[str, str] | None = None) -> list[str]:
    """``spark-submit`` of the Connect server's driver with the pipeline's settings."""
    address = os.environ.get("SPARK_LOCAL_IP", LOOPBACK)
    settings = {
        **driver_address_conf(),
        **BASE_CONF,
        "spark.connect.grpc.binding.address": address,
        "spark.connect.grpc.binding.port": str(port),
        "spark.executorEnv.PYSPARK_PYTHON": sys.executable,
        **SHARED_PYTHON_PROCESSES,
        **(conf or {}),
    }
    command = [
        str(Path(pyspark.__file__).parent / "bin" / "spark-submit"),
        "--name",
        "kinesis-lake Spark Connect",
        "--master",
        master,
    ]
    for key, value in settings.items():
        command += ["--conf", f"{key}={value}"]
    return [*command, connect_server_main.__file__]


class ConnectServer:
    """A Connect server as a child process: started on entry, stopped on exit."""

    def __init__(
        self,
        *,
        port: int = SPARK_CONNECT_PORT,
        master: str = "local[2]",
        log_dir: Path,
        env: Mapping[str, str] | None = None,
        conf: Mapping[str, str] | None = None,
        start_timeout_s: float = 180.0,
    ) -> None:
        self.port = port
        self.master = master
        self.log_file = Path(log_dir) / "spark-connect.log"
        self._env = {
            **os.environ,
            **(env or {}),
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "SPARK_HOME": str(Path(pyspark.__file__).parent),
        }
        self._env.setdefault("SPARK_LOCAL_IP", LOOPBACK)
        self._conf = dict(conf or {})
        self._start_timeout_s = start_timeout_s
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"sc://{self._env['SPARK_LOCAL_IP']}:{self.port}"

    def serving(self) -> bool:
        """The server accepts connections on its port."""
        try:
            with socket.create_connection((self._env["SPARK_LOCAL_IP"], self.port), timeout=1):
                return True
        except OSError:
            return False

    def __enter__(self) -> ConnectServer:
        if self.serving():  # it would fail to bind, and the port would answer anyway
            raise ConnectServerError(
                f"Spark Connect: port {self.port} is already in use (another server?): stop "
                f"what serves it, or use it with SPARK_MASTER={self.url}."
            )
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "ab") as log:
            self._process = subprocess.Popen(
                server_command(self.master, self.port, self._conf),
                env=self._env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + self._start_timeout_s
        while not self.serving():
            if self._process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise ConnectServerError(
                    f"Spark Connect: the server did not start on port {self.port}: see "
                    f"{self.log_file}."
                )
            time.sleep(0.5)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop the server (its running queries stop with it).

        SIGTERM to the JVM (spark-submit execs it), whose shutdown stops Spark; then
        SIGKILL to its process group, which holds the Python driver it ran (which also
        ends by itself once the JVM is gone). The Python daemons set groups of their own
        and end when the JVM closes their stdin."""
        if self._process is None:
            return
        group = self._process.pid  # start_new_session: the JVM leads its own group
        self._process.terminate()
        try:
            self._process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._signal_group(group, signal.SIGKILL)  # anything that outlived the JVM
        self._process = None

    @staticmethod
    def _signal_group(group: int, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signum)
