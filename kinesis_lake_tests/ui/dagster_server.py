"""``dagster dev`` for browser tests: started in its own process group on 127.0.0.1, asked
over GraphQL what the UI did, and stopped together with everything it started.

``dagster dev`` starts the webserver, the daemon and a code server; the daemon's runs
start run workers (a run's steps execute in its worker) and Spark JVMs. All of them share
the process group of ``dagster dev`` (a new session), so stopping the group stops them
all; anything that left the group is found as a descendant and stopped too.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil

from kinesis_lake.dev import dagster_dev_command
from kinesis_lake.kinesis.endpoint import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
FINISHED = {"SUCCESS", "FAILURE", "CANCELED"}
BACKLOG_SENSOR = "kinesis_backlog_sensor"
"""The demo lake's backlog sensor, whose ticks the browser tests wait for and read."""
_LOOPBACK = urllib.request.build_opener(urllib.request.ProxyHandler({}))
"""HTTP to the test server only: a proxy configured in the environment is never used."""

_STOP_INSTIGATORS = """
query Instigators {
  repositoriesOrError {
    ... on RepositoryConnection {
      nodes {
        sensors { name sensorState { id status } }
        schedules { name scheduleState { id status } }
      }
    }
  }
}
"""
_STOP_SENSOR = """
mutation StopSensor($id: String!) {
  stopSensor(id: $id) {
    __typename
    ... on StopSensorMutationResult { instigationState { status } }
    ... on PythonError { message }
  }
}
"""
_STOP_SCHEDULE = """
mutation StopSchedule($id: String!) {
  stopRunningSchedule(id: $id) {
    __typename
    ... on ScheduleStateResult { scheduleState { status } }
    ... on PythonError { message }
  }
}
"""
_SENSOR_TICKS = """
query SensorTicks($selector: SensorSelector!) {
  sensorOrError(sensorSelector: $selector) {
    ... on Sensor { sensorState { ticks(limit: 20) { status skipReason } } }
  }
}
"""
_REPOSITORIES = """
query Repositories {
  repositoriesOrError { ... on RepositoryConnection { nodes { name location { name } } } }
}
"""
_RUNS = """
query Runs {
  runsOrError(limit: 50) {
    ... on Runs { results { runId status jobName } }
    ... on PythonError { message }
  }
}
"""
_RUN_FAILURE = """
query RunFailure($runId: ID!) {
  logsForRun(runId: $runId, limit: 2000) {
    ... on EventConnection {
      events {
        __typename
        ... on MessageEvent { message stepKey }
        ... on ExecutionStepFailureEvent { error { message stack } }
        ... on RunFailureEvent { error { message } }
      }
    }
  }
}
"""


class DagsterDevServer:
    """One ``dagster dev -w workspace.yaml -h 127.0.0.1`` with its own DAGSTER_HOME."""

    def __init__(self, env: dict[str, str], dagster_home: Path, log_path: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        command = dagster_dev_command(self.port)
        with log_path.open("w") as log:
            self.process = subprocess.Popen(
                command,
                cwd=REPO_ROOT,
                env={**env, "DAGSTER_HOME": str(dagster_home)},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def log_tail(self, chars: int = 6000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]

    def wait_until_serving(self, timeout_s: float) -> None:
        """Until ``GET /server_info`` answers; fails early if ``dagster dev`` exited."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"dagster dev exited:\n{self.log_tail()}")
            try:
                with _LOOPBACK.open(f"{self.url}/server_info", timeout=10) as answer:
                    if answer.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(1)
        raise TimeoutError(f"dagster dev did not serve within {timeout_s} s:\n{self.log_tail()}")

    def graphql(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        request = urllib.request.Request(
            f"{self.url}/graphql",
            data=json.dumps({"query": query, "variables": variables or {}}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with _LOOPBACK.open(request, timeout=60) as answer:
            body = json.load(answer)
        if body.get("errors"):
            raise RuntimeError(f"GraphQL errors: {body['errors']}")
        return body["data"]

    def stop_sensors_and_schedules(self) -> list[str]:
        """Stop every sensor and schedule; returns their names."""
        stopped = []
        for repository in self.graphql(_STOP_INSTIGATORS)["repositoriesOrError"]["nodes"]:
            for sensor in repository["sensors"]:
                result = self.graphql(_STOP_SENSOR, {"id": sensor["sensorState"]["id"]})
                assert result["stopSensor"]["instigationState"]["status"] == "STOPPED", result
                stopped.append(sensor["name"])
            for schedule in repository["schedules"]:
                result = self.graphql(_STOP_SCHEDULE, {"id": schedule["scheduleState"]["id"]})
                assert result["stopRunningSchedule"]["scheduleState"]["status"] == "STOPPED"
                stopped.append(schedule["name"])
        return stopped

    def repository(self) -> tuple[str, str]:
        """(repository name, code location name) of the workspace's one repository."""
        (node,) = self.graphql(_REPOSITORIES)["repositoriesOrError"]["nodes"]
        return node["name"], node["location"]["name"]

    def sensor_ticks(self, sensor: str) -> list[dict[str, str | None]]:
        """The sensor's latest ticks as the UI lists them: status and skip reason."""
        repository, location = self.repository()
        selector = {
            "repositoryName": repository,
            "repositoryLocationName": location,
            "sensorName": sensor,
        }
        found = self.graphql(_SENSOR_TICKS, {"selector": selector})["sensorOrError"]
        return found["sensorState"]["ticks"]

    def wait_for_a_tick(self, sensor: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.sensor_ticks(sensor):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{sensor} did not tick within {timeout_s} s")
            time.sleep(2)

    def runs(self) -> list[dict[str, str]]:
        return self.graphql(_RUNS)["runsOrError"]["results"]

    def run_id_with_prefix(self, prefix: str) -> str:
        """The UI names a launched run by the first 8 characters of its id."""
        matches = [run["runId"] for run in self.runs() if run["runId"].startswith(prefix)]
        assert len(matches) == 1, (prefix, self.runs())
        return matches[0]

    def wait_for_run(self, run_id: str, timeout_s: float) -> str:
        """The run's final status; raises with the run's errors if it did not succeed."""
        started = time.monotonic()
        status = None
        while time.monotonic() < started + timeout_s:
            status = next(run["status"] for run in self.runs() if run["runId"] == run_id)
            if status in FINISHED:
                break
            time.sleep(3)
        if status != "SUCCESS":
            raise AssertionError(
                f"run {run_id} is {status}:\n{self.run_errors(run_id)}\n{self.log_tail()}"
            )
        print(f"run {run_id}: {status} after {time.monotonic() - started:.0f} s")
        return status

    def run_errors(self, run_id: str) -> str:
        events = self.graphql(_RUN_FAILURE, {"runId": run_id})["logsForRun"].get("events", [])
        failures = [e for e in events if "error" in e or "Failure" in e["__typename"]]
        return "\n".join(json.dumps(event) for event in failures)

    def stop(self, grace_s: float = 20) -> None:
        """SIGTERM to the process group and to any descendant that left it, then SIGKILL to
        whatever is still alive after ``grace_s``: the runs are over, nothing to save."""
        try:
            strays = psutil.Process(self.process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            strays = []
        for signum in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signum)
            for process in strays:
                with contextlib.suppress(psutil.NoSuchProcess):
                    process.send_signal(signum)
            deadline = time.monotonic() + grace_s
            while self.alive(strays) and time.monotonic() < deadline:
                time.sleep(0.5)
            if not self.alive(strays):
                return

    def alive(self, strays: Sequence[psutil.Process] = ()) -> list[psutil.Process]:
        """What still runs of ``dagster dev``: its process group, ``strays`` that left it.

        Orphans count too: a Python worker of a finished run's Spark JVM is no longer a
        descendant of ``dagster dev``, but it is still in its process group.
        """
        self.process.poll()  # reap dagster dev itself once it has exited
        found = [p for p in strays if _running(p)]
        for process in psutil.process_iter():
            with contextlib.suppress(psutil.NoSuchProcess, ProcessLookupError):
                if os.getpgid(process.pid) == self.process.pid and _running(process):
                    found.append(process)
        return found


def _running(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
