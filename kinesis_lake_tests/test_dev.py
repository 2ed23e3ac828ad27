"""``kinesis-lake dev`` (``make dev``), started for real and stopped as people and service
managers stop it: nothing it started may outlive it.

It starts the local endpoint, a Spark Connect JVM and Dagster (webserver, daemon, code
server), whose backlog sensor launches runs. Stopped by SIGTERM (a service manager, a
closed terminal's shell, ``kill``) it died alone and left all of those running, holding
their ports; stopped by Ctrl-C (SIGINT to the terminal's foreground process group) the
same must hold. Each case waits for a run in flight before stopping, since a run worker is
the process Dagster's own shutdown leaves behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import boto3
import dagster as dg
import psutil
import pytest

from kinesis_lake.defs.jobs import DERIVE_RUN_NAME, RUN_NAME_TAG
from kinesis_lake.defs.sensors import AUTOMATION_SENSOR_NAME
from kinesis_lake.kinesis.endpoint import free_port
from kinesis_lake.kinesis.producer import put_records, sample_events
from kinesis_lake_tests.pipeline_helpers import processes_with_data_dir

STREAM = "dev-test-events"
DUPLICATES = "no_duplicate_records"  # raw's blocking check
START_TIMEOUT_S = 420


def _until(condition: Callable[[], bool], timeout_s: float, what: str, log: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-4000:]
            raise TimeoutError(f"{what} not within {timeout_s} s; dev's log:\n{tail}")
        time.sleep(1)


def _serving(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except OSError:
        return False


STARTED = dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED])


def _runs(dagster_home: Path, which: dg.RunsFilter) -> list[dg.DagsterRun]:
    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        return list(instance.get_runs(which))


def _port_free(port: int) -> bool:
    """Whether a server could listen on ``port`` again (as servers do, with SO_REUSEADDR:
    the closed connections' TIME_WAIT entries do not hold a port, a listener does)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@contextlib.contextmanager
def _dev(
    tmp_path: Path, records: int, **env_overrides: str
) -> Iterator[tuple[subprocess.Popen[bytes], dict[str, int], Path]]:
    """``kinesis-lake dev`` on free ports and its own data directory, in its own session
    (as a terminal runs it), serving and sent ``records``; whatever it left is killed
    afterwards."""
    data_dir = tmp_path / "dev"
    ports = {"ui": free_port(), "endpoint": free_port(), "spark": free_port()}
    env = {
        **os.environ,
        "KINESIS_LAKE_DATA_DIR": str(data_dir),
        "KINESIS_STREAM_NAME": STREAM,
        **env_overrides,
    }
    env.pop("SPARK_MASTER", None)
    env.pop("DAGSTER_HOME", None)
    log = tmp_path / "dev.log"
    with log.open("wb") as out:
        dev = subprocess.Popen(
            [
                *(sys.executable, "-m", "kinesis_lake.cli", "dev", "--port", str(ports["ui"])),
                *("--endpoint-port", str(ports["endpoint"]), "--spark-port", str(ports["spark"])),
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        ui = f"http://127.0.0.1:{ports['ui']}/server_info"
        _until(lambda: dev.poll() is None and _serving(ui), START_TIMEOUT_S, "the UI", log)
        client = boto3.client(
            "kinesis",
            endpoint_url=f"http://127.0.0.1:{ports['endpoint']}",
            region_name="us-east-1",
        )
        if records:
            put_records(client, STREAM, sample_events(records, seed=5))
        yield dev, ports, log
    finally:
        for process in processes_with_data_dir(data_dir):
            with contextlib.suppress(psutil.Error):
                process.kill()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(dev.pid, signal.SIGKILL)
        dev.wait()


@pytest.fixture
def dev_session(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], dict[str, int], Path]]:
    """A dev session with a run in flight (lingering, so still in flight when stopped)."""
    with _dev(tmp_path, 50, KINESIS_LAKE_RUN_LINGER_SECONDS="120") as (dev, ports, log):
        dagster_home = tmp_path / "dev" / "dagster_home"
        _until(lambda: bool(_runs(dagster_home, STARTED)), START_TIMEOUT_S, "a run in flight", log)
        yield dev, ports, log


@pytest.mark.parametrize("stop", ["SIGTERM", "SIGINT"])
def test_dev_stopped_by_a_signal_leaves_no_process_or_port_behind(
    dev_session, stop: str, tmp_path: Path
):
    dev, ports, log = dev_session
    started = processes_with_data_dir(tmp_path / "dev")
    assert len(started) >= 5, started  # dev, endpoint, JVM, Dagster's processes, the run

    if stop == "SIGTERM":  # a service manager or kill: the process alone
        os.kill(dev.pid, signal.SIGTERM)
    else:  # Ctrl-C: the terminal signals its whole foreground process group
        os.killpg(dev.pid, signal.SIGINT)
    dev.wait(timeout=300)

    left = [
        f"{p.pid} {' '.join(p.cmdline())[:150]}" for p in processes_with_data_dir(tmp_path / "dev")
    ]
    assert left == [], "\n".join(left)
    assert [name for name, port in ports.items() if not _port_free(port)] == []
    assert not (tmp_path / "dev" / "warm-up").exists()  # the Connect server's warm-up
    text = log.read_text(errors="replace")
    assert dev.returncode == 0, text[-3000:]
    # Its log opened with `dev_command is superseded ... Use 'dg dev'` and a warning that the
    # dagster.yaml in the folder "will not be used", though dev copies it into DAGSTER_HOME.
    assert "Dagster UI:" in text
    assert "superseded" not in text and "will not be used" not in text


def test_the_automation_sensor_s_derive_runs_carry_a_name_an_operator_understands(
    tmp_path: Path,
):
    """The derived tables' runs, which the automation sensor launches once raw_events is
    materialized and checked, were listed as ``__ASSET_JOB`` (declarative automation
    requests assets, not a job). Raw's materialization and blocking check are reported
    into dev's instance, as an ingestion run records them; dev's daemon does the rest."""
    with _dev(tmp_path, 0) as (_, ports, log):
        endpoint = f"http://127.0.0.1:{ports['endpoint']}"
        dagster_home = tmp_path / "dev" / "dagster_home"
        with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
            raw = dg.AssetKey("raw_events")
            instance.report_runless_asset_event(dg.AssetMaterialization(raw))
            instance.report_runless_asset_event(
                dg.AssetCheckEvaluation(asset_key=raw, check_name=DUPLICATES, passed=True)
            )
        by_automation = dg.RunsFilter(tags={"dagster/sensor_name": AUTOMATION_SENSOR_NAME})
        _until(
            lambda: bool(_runs(dagster_home, by_automation)), START_TIMEOUT_S, "a derive run", log
        )
        (run, *_) = _runs(dagster_home, by_automation)
        # dev warms its Connect server up, on an endpoint and a lake of its own
        said = "Spark Connect server warm"  # "... warmed up in" or "... warm-up failed"
        _until(lambda: said in log.read_text(), START_TIMEOUT_S, "the warm-up", log)
        warm_up = next(line for line in log.read_text().splitlines() if said in line)
        client = boto3.client("kinesis", endpoint_url=endpoint, region_name="us-east-1")
        streams = client.list_streams()["StreamNames"]

    assert run.tags.get(RUN_NAME_TAG) == DERIVE_RUN_NAME, run.tags
    assert dg.AssetKey("events") in (run.asset_selection or set())
    assert "Spark Connect server warmed up" in warm_up, warm_up
    assert streams == [STREAM]
    assert not (tmp_path / "dev" / "warm-up").exists()
