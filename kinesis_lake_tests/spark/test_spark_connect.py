"""Spark Connect: commands and Dagster runs attach to a long-lived Spark (``sc://``)
instead of starting a JVM each; the data sources run in the server. Each client runs in a
process of its own: a process that has made a Connect session is in Connect mode
everywhere, which the suite's shared local session must not be.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from kinesis_lake.iceberg.catalog import open_catalog
from kinesis_lake.kinesis.endpoint import free_port
from kinesis_lake.spark.runtime.session import spark_log_file
from kinesis_lake_tests.aws_env import FAKE_AWS_ENV
from kinesis_lake_tests.pipeline_helpers import (
    assert_reconciled,
    processes_with_data_dir,
    produce,
    run_cli_with,
    settings_env,
)


@dataclass(frozen=True)
class Server:
    url: str
    port: int
    pid: int

    def session_daemons(self) -> int:
        """The server JVM's Python daemons kept for Connect sessions and their queries."""
        count = 0
        for process in psutil.Process(self.pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):  # workers and daemons come and go
                parent = process.parent()
                session = process.environ().get("SPARK_JOB_ARTIFACT_UUID", "default")
                count += parent is not None and parent.name() == "java" and session != "default"
        return count

    def daemon_pids(self) -> set[int]:
        """The server JVM's Python daemons (workers are forked by them, not the JVM)."""
        pids = set()
        for process in psutil.Process(self.pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):  # workers and daemons come and go
                parent = process.parent()
                if (
                    parent is not None
                    and parent.name() == "java"
                    and "daemon" in " ".join(process.cmdline())
                ):
                    pids.add(process.pid)
        return pids

    def serving(self) -> bool:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), 1):
            return True
        return False


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory) -> Iterator[Server]:
    """``kinesis-lake connect-server`` as an operator runs it; stopped with SIGTERM, after
    which none of the processes it started (the JVM, the Python driver it runs, the
    daemons) is left."""
    port = free_port()
    data_dir = tmp_path_factory.mktemp("c")
    env = {**os.environ, **FAKE_AWS_ENV, "KINESIS_LAKE_DATA_DIR": str(data_dir)}
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "kinesis_lake.cli", "connect-server", "--port", str(port)),
        ],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    announced = process.stdout.readline()  # printed once the server serves
    server = Server(f"sc://127.0.0.1:{port}", port, process.pid)
    try:
        assert f"SPARK_MASTER={server.url}" in announced, announced
        yield server
    finally:
        process.terminate()
        process.wait(timeout=120)
    assert process.returncode == 0
    assert not server.serving()  # the server stopped with the command
    deadline = time.monotonic() + 30  # daemons end once the JVM has closed their stdin
    while (left := processes_with_data_dir(data_dir)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, [" ".join(p.cmdline())[:150] for p in left]


def _without_java(env: dict[str, str]) -> dict[str, str]:
    """A client that could not start a JVM if it tried."""
    return {**env, "JAVA_HOME": "/nonexistent/jdk", "SPARK_HOME": "/nonexistent/spark"}


def test_the_cli_ingests_exactly_once_through_spark_connect_without_a_jvm(
    connect_server, kinesalite_endpoint, settings_factory
):
    # 8 shards: over Spark Connect the client knows no cores, and each shard wrote a file
    # of its own per micro-batch before issue 34 ([8, 8] here); now files follow bytes.
    settings = settings_factory(kinesalite_endpoint, shard_count=8)
    env = _without_java({**settings_env(settings), "SPARK_MASTER": connect_server.url})
    produce(settings, 300, malformed_every=25, seed=21)

    first = run_cli_with(env, "ingest")
    produce(settings, 200, seed=22)
    second = run_cli_with(env, "ingest", "--derive")  # the derived tables' refresh too

    assert first.returncode == 0, first.stderr[-3000:]
    assert second.returncode == 0, second.stderr[-3000:]
    assert "ingested 300 rows" in first.stdout and "ingested 200 rows" in second.stdout
    rows = open_catalog(data_dir=settings.data_dir).load_table(settings.raw_table).scan()
    keys = rows.to_arrow().select(["shard_id", "sequence_number", "sub_sequence_number"])
    assert keys.num_rows == 500 == len(set(zip(*keys.to_pydict().values(), strict=True)))
    assert len(set(keys.column("shard_id").to_pylist())) == 8
    table = open_catalog(data_dir=settings.data_dir).load_table(settings.raw_table)
    summaries = [s.summary.additional_properties for s in table.snapshots()]
    added = [int(summary.get("added-data-files", 0)) for summary in summaries]
    # produce() stamps one arrival day. A new query's first batch guesses each shard's
    # bytes from its record limit (100,000 at 1 KiB: more tasks, never above one per
    # shard); the next run knows what each shard gave last time: one task, one file.
    assert added[-1] == 1 and max(added) <= 8, added
    assert not spark_log_file(settings.log_dir).exists()  # no local JVM logged anything
    assert_reconciled(settings, ("events",))  # the default declaration's one table


def test_runs_share_the_servers_python_daemons_so_none_piles_up(
    connect_server, kinesalite_endpoint, settings_factory
):
    """Spark keys its Python daemons on a session's artifact id: in Spark's own server
    (artifact isolation forced on) every run's session and query started daemons of its
    own, importing PySpark and our modules again, and Spark kept them all until it stopped
    (SPARK-54055): three runs left 7, 12, then 17. Sharing them, the third run starts none."""
    settings = settings_factory(kinesalite_endpoint)
    env = _without_java({**settings_env(settings), "SPARK_MASTER": connect_server.url})
    daemons = []
    for run in range(3):
        produce(settings, 50, seed=40 + run)
        result = run_cli_with(env, "ingest")
        assert result.returncode == 0, result.stderr[-3000:]
        assert "ingested 50 rows" in result.stdout
        daemons.append(connect_server.daemon_pids())
    assert connect_server.session_daemons() == 0  # none belongs to one session
    assert daemons[0] and daemons[2] == daemons[1] == daemons[0], daemons
    raw = open_catalog(data_dir=settings.data_dir).load_table(settings.raw_table)
    assert raw.scan().to_arrow().num_rows == 150


WARM_UP_COMMAND = (sys.executable, "-m", "kinesis_lake.pipeline.server_warm_up")


def _user_env(tmp_path: Path, **more: str) -> dict[str, str]:
    """A user's settings the warm-up must ignore: their lake, an endpoint nothing serves (a
    warm-up that used it would fail), and no region (its endpoint is its own: any will do;
    without one it failed with NoRegionError)."""
    env = {
        **os.environ,
        **FAKE_AWS_ENV,
        "KINESIS_LAKE_DATA_DIR": str(tmp_path / "user"),
        "KINESIS_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}",
        **more,
    }
    for region in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        env.pop(region, None)
    return _without_java(env)


def test_a_warm_up_runs_every_refresh_on_an_endpoint_and_lake_of_its_own(
    connect_server, tmp_path: Path
):
    """``make dev`` warms its new server up (a server's first run took 45 s where its
    second, on a new lake too, took 12 s) with the whole path, on an endpoint and a lake of
    its own: the user's settings in its environment name neither."""
    scratch = tmp_path / "warm-up"
    result = subprocess.run(
        [*WARM_UP_COMMAND, connect_server.url, str(scratch)],
        env=_user_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=600,
    )

    assert result.returncode == 0, result.stderr[-3000:]
    # routed (5), quarantine, aggregate, upsert and SQL: every kind of refresh ran
    assert "200 records ingested into a scratch lake, 9 downstream tables" in result.stdout
    assert not scratch.exists()
    assert not (tmp_path / "user").exists()  # the user's lake was never opened
    assert processes_with_data_dir(tmp_path / "user") == []  # its endpoint stopped with it


def test_a_warm_up_refuses_a_configured_catalog_of_its_name_in_one_line(tmp_path: Path):
    catalog = {"PYICEBERG_CATALOG__KINESIS_LAKE_WARM_UP__URI": f"sqlite:///{tmp_path}/c.db"}
    result = subprocess.run(
        [*WARM_UP_COMMAND, "sc://127.0.0.1:1", str(tmp_path / "warm-up")],
        env=_user_env(tmp_path, **catalog),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert "kinesis_lake_warm_up is configured" in result.stdout
    assert "rename that catalog" in result.stdout


def test_a_warm_up_stopped_midway_leaves_nothing_even_signalled_twice(
    connect_server, tmp_path: Path
):
    """Stopped as dev stops it (SIGTERM), or as a closed terminal would (SIGHUP), it
    unwinds: its endpoint stops and its scratch lake goes. A second signal while it
    unwinds (dev's, a service manager's) used to cut that short."""
    scratch = tmp_path / "warm-up"
    warm_up = subprocess.Popen(
        [*WARM_UP_COMMAND, connect_server.url, str(scratch)],
        env=_user_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 300
    while not (scratch / "checkpoints").exists() and warm_up.poll() is None:
        assert time.monotonic() < deadline, "the warm-up's query never started"
        time.sleep(0.2)
    warm_up.send_signal(signal.SIGHUP)
    time.sleep(0.2)
    warm_up.send_signal(signal.SIGTERM)
    _, stderr = warm_up.communicate(timeout=120)

    assert warm_up.returncode == 128 + signal.SIGHUP, stderr[-3000:]
    assert not scratch.exists()
    assert processes_with_data_dir(tmp_path / "user") == []
    assert connect_server.serving()


SESSION_AND_TEARDOWN = """
import sys
import dagster as dg
from kinesis_lake.defs.resources import SparkResource
from pyspark.sql.connect.session import SparkSession as ConnectSession
with dg.build_resources({"spark": SparkResource(master=sys.argv[1])}) as resources:
    session = resources.spark.session
    assert isinstance(session, ConnectSession), type(session)
    print("rows", session.range(5).count())
"""


def test_the_dagster_spark_resource_attaches_to_the_server(connect_server, tmp_path: Path):
    result = subprocess.run(
        [sys.executable, "-c", SESSION_AND_TEARDOWN, connect_server.url],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=_without_java({**os.environ, **FAKE_AWS_ENV, "KINESIS_LAKE_DATA_DIR": str(tmp_path)}),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "rows 5" in result.stdout
    # Teardown released the session only: the server still serves.
    assert connect_server.serving()


def test_a_port_already_served_is_refused_in_one_line_before_any_jvm_starts(tmp_path: Path):
    """A second ``make dev`` (or a server left over) holds the port: the new server could
    not bind, yet the port answered, so the caller took the other process for its own."""
    from kinesis_lake.errors import KinesisLakeError
    from kinesis_lake.spark.runtime.connect_server import ConnectServer

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = ConnectServer(port=port, log_dir=tmp_path / "logs")
        with pytest.raises(KinesisLakeError) as refused:
            server.__enter__()

    message = str(refused.value)
    assert "\n" not in message and f"port {port} is already in use" in message
    assert f"SPARK_MASTER=sc://127.0.0.1:{port}" in message
    assert not server.log_file.exists()  # nothing was started
