"""The facts a reader needs to judge a number: machine, versions, load.

Recorded once per run (``environment_info``) and next to each measurement
(``load_now``), because the machine these run on is shared.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
from datetime import UTC, datetime
from typing import Any

import psutil

from benchmarks.sandbox import REPO_ROOT


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def _run(command: list[str], timeout_s: float = 30) -> subprocess.CompletedProcess[str] | None:
    """Run a short probe command in the repository; None when it is missing or fails to run.

    A missing tool is a fact to record (``None`` in the environment), not an error.
    """
    if shutil.which(command[0]) is None:
        return None
    try:
        return subprocess.run(
            command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None


def _java_version() -> str | None:
    completed = _run(["java", "-version"])
    if completed is None:
        return None
    first = (completed.stderr or completed.stdout).strip().splitlines()
    return first[0] if first else None


def _command_output(command: list[str]) -> str | None:
    completed = _run(command)
    return None if completed is None else completed.stdout.strip()


def _kinesalite_version() -> str | None:
    from kinesis_lake.kinesis.endpoint import find_kinesalite

    module = find_kinesalite()
    if module is None:
        return None
    return json.loads((module / "package.json").read_text()).get("version")


def _git_commit() -> str | None:
    head = _run(["git", "rev-parse", "--short", "HEAD"], timeout_s=10)
    if head is None or not head.stdout:
        return None
    status = _run(["git", "status", "--porcelain", "--untracked-files=no"], timeout_s=10)
    dirty = status is not None and status.stdout.strip()
    return head.stdout.strip() + ("+dirty" if dirty else "")


def environment_info(mode: str, scale: float) -> dict[str, Any]:
    """The facts a reader needs to judge a number: machine, versions, load, mode."""
    memory = psutil.virtual_memory()
    return {
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "mode": mode,
        "scale": scale,
        "cores_logical": os.cpu_count(),
        "cores_physical": psutil.cpu_count(logical=False),
        "memory_total_mb": round(memory.total / 2**20),
        "memory_available_mb_at_start": round(memory.available / 2**20),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "platform": platform.platform(),
        "python": platform.python_version(),
        "java": _java_version(),
        "pyspark": _version("pyspark"),
        "pyiceberg": _version("pyiceberg"),
        "pyarrow": _version("pyarrow"),
        "boto3": _version("boto3"),
        "kinesalite": _kinesalite_version(),
        "node": _command_output(["node", "--version"]),
        "git_commit": _git_commit(),
    }


def load_now() -> list[float]:
    """1/5/15-minute load averages: recorded next to each measurement as a noise marker."""
    return [round(x, 2) for x in os.getloadavg()]
