"""The Spark worker child (``benchmarks.spark_job``) and the protocol spoken with it."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from benchmarks.processes import TreeRssSampler, kill_tree
from benchmarks.sandbox import REPO_ROOT

if TYPE_CHECKING:
    from benchmarks.context import BenchContext


class SparkJobError(RuntimeError):
    """A benchmark's Spark child process failed; the message holds its log's tail."""


@dataclass
class SparkCall:
    """One finished command of a Spark worker child and how it was observed.

    ``cpu_before``, ``cpu_after`` and each event's ``cpu`` are cumulative CPU seconds per
    process kind (the child's JVM and Python processes, and kinesalite) at that moment:
    differences between two of them tell which process worked during that stretch.
    """

    result: dict[str, Any]
    wall_s: float
    events: list[dict[str, Any]]
    cpu_before: dict[str, float]
    cpu_after: dict[str, float]
    peak_rss_mb: float


class SparkWorker:
    """A ``benchmarks.spark_job`` child holding one Spark session; runs commands in turn.

    stdout is read line by line on a thread into a queue; stderr goes to a log file
    under the work directory, so a full pipe can never stall the child. Anything that
    goes wrong (error, timeout) kills the child's whole process tree.
    """

    def __init__(self, ctx: BenchContext, master: str, log_name: str) -> None:
        self.master = master
        self.log_path = ctx.work_dir / f"{log_name}.log"
        self.session_start_s: float | None = None
        self._endpoint_pid = ctx.endpoint_pid
        self._messages: queue.Queue[tuple[str, dict[str, Any]]] = queue.Queue()
        self._process: subprocess.Popen[str] | None = None
        self._sampler: TreeRssSampler | None = None

    @property
    def pid(self) -> int:
        assert self._process is not None
        return self._process.pid

    def start(self, *, timeout_s: float = 600) -> SparkWorker:
        with open(self.log_path, "w") as log:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "benchmarks.spark_job", "--master", self.master],
                env=dict(os.environ),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                cwd=REPO_ROOT,
                start_new_session=True,
            )
        extra = {"kinesalite": self._endpoint_pid} if self._endpoint_pid else None
        self._sampler = TreeRssSampler(self._process.pid, interval_s=0.5, extra_pids=extra)
        self._sampler.__enter__()
        threading.Thread(target=self._read, name="spark-worker-stdout", daemon=True).start()
        kind, payload = self._next(timeout_s)
        if kind != "BENCH_READY":
            self.kill()
            raise SparkJobError(f"Spark worker did not start: {kind} {payload}\n{self.log_tail()}")
        self.session_start_s = payload["session_start_s"]
        return self

    def _read(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        for line in self._process.stdout:
            kind, _, body = line.rstrip("\n").partition(" ")
            if kind.startswith("BENCH_"):
                self._messages.put((kind, json.loads(body) if body else {}))
        self._messages.put(("EOF", {}))

    def _next(self, timeout_s: float) -> tuple[str, dict[str, Any]]:
        try:
            return self._messages.get(timeout=max(0.1, timeout_s))
        except queue.Empty:
            self.kill()
            raise SparkJobError(
                f"Spark worker ({self.master}) timed out after {timeout_s:.0f} s; killed.\n"
                f"{self.log_tail()}"
            ) from None

    def log_tail(self, chars: int = 4000) -> str:
        return f"log {self.log_path}:\n" + self.log_path.read_text(errors="replace")[-chars:]

    def call(
        self,
        command: str,
        args: dict[str, Any],
        *,
        timeout_s: float,
        on_event: Callable[[dict[str, Any], int], None] | None = None,
    ) -> SparkCall:
        """Run one command; ``on_event(event, child pid)`` sees its events as they come."""
        assert self._process is not None and self._process.stdin is not None
        assert self._sampler is not None
        self._sampler.peak_mb = 0.0
        cpu_before = self._sampler.cpu_seconds()
        started = time.perf_counter()
        self._process.stdin.write(json.dumps({"command": command, "args": args}) + "\n")
        self._process.stdin.flush()
        deadline = time.monotonic() + timeout_s
        events: list[dict[str, Any]] = []
        while True:
            kind, payload = self._next(deadline - time.monotonic())
            if kind == "BENCH_EVENT":
                payload["cpu"] = self._sampler.cpu_seconds()
                events.append(payload)
                if on_event is not None:
                    on_event(payload, self.pid)
            elif kind == "BENCH_RESULT":
                return SparkCall(
                    result=payload,
                    wall_s=time.perf_counter() - started,
                    events=events,
                    cpu_before=cpu_before,
                    cpu_after=self._sampler.cpu_seconds(),
                    peak_rss_mb=round(self._sampler.peak_mb, 1),
                )
            elif kind == "BENCH_ERROR":
                raise SparkJobError(f"{command} failed in the Spark worker: {payload['trace']}")
            elif kind == "EOF":
                raise SparkJobError(f"Spark worker exited during {command}.\n{self.log_tail()}")

    def stop(self) -> None:
        """Ask the child to stop Spark and exit; kill its tree if it does not."""
        process = self._process
        if process is None:
            return
        try:
            if process.stdin is not None:
                process.stdin.write(json.dumps({"command": "exit"}) + "\n")
                process.stdin.close()
            process.wait(timeout=120)
        except (OSError, subprocess.TimeoutExpired):
            self.kill()
        finally:
            self._finish()

    def kill(self) -> None:
        if self._process is not None:
            kill_tree(self._process)
        self._finish()

    def _finish(self) -> None:
        if self._sampler is not None:
            self._sampler.__exit__()
            self._sampler = None
        self._process = None


def cpu_delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    """CPU seconds per process kind spent between two cumulative readings."""
    return {k: round(v - before.get(k, 0.0), 2) for k, v in after.items()}
