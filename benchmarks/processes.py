"""Child processes a benchmark starts: their memory and CPU sampled, their time bounded.

Every child is started in its own session and, when anything goes wrong, killed with
its whole tree by pid (never by name), so no benchmark leaves a JVM behind.
"""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

import psutil

from benchmarks.sandbox import REPO_ROOT


class TreeRssSampler:
    """Samples the summed RSS and CPU time of a process and its descendants on a thread.

    The Spark driver is a Python process whose JVM (and, in local mode, Python workers)
    are its children, so the tree is the honest footprint of "the ingestion driver".
    ``extra_pids`` (e.g. the kinesalite server) are tracked for CPU only, under their own
    kind, to show which process a throughput run was waiting for.
    """

    def __init__(
        self,
        pid: int,
        interval_s: float = 0.2,
        extra_pids: dict[str, int] | None = None,
        *,
        pss: bool = False,
    ) -> None:
        self._root = psutil.Process(pid)
        self._extra = {}
        for kind, extra_pid in (extra_pids or {}).items():
            with contextlib.suppress(psutil.Error):
                self._extra[kind] = psutil.Process(extra_pid)
        self._interval = interval_s
        self._pss = pss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="rss-sampler", daemon=True)
        self._lock = threading.Lock()
        self._cpu: dict[int, tuple[str, float]] = {}
        self.samples: list[tuple[float, float, dict[str, float]]] = []
        self.peak_mb = 0.0
        self.peak_by_kind: dict[str, float] = {}
        # Summed RSS counts pages shared between processes (forked Python workers share
        # most of their daemon's memory) once per process; PSS splits them fairly.
        self.pss_samples: list[tuple[float, float]] = []
        self.max_processes = 0
        self.peak_pss_mb = 0.0
        self.peak_pss_by_kind: dict[str, float] = {}

    def __enter__(self) -> TreeRssSampler:
        self._started = time.perf_counter()
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        deadline = time.monotonic() + 4 * 3600  # bounded: no benchmark runs this long
        while not self._stop.is_set() and time.monotonic() < deadline:
            self.sample()
            self._stop.wait(self._interval)

    def sample(self) -> None:
        try:
            processes = [self._root, *self._root.children(recursive=True)]
        except psutil.Error:
            processes = []
        by_kind: dict[str, float] = {}
        pss_by_kind: dict[str, float] = {}
        cpu: dict[int, tuple[str, float]] = {}
        for process in processes:
            try:
                with process.oneshot():
                    kind = _process_kind(process)
                    times = process.cpu_times()
                    if self._pss:
                        full = process.memory_full_info()
                        rss, pss = full.rss / 2**20, full.pss / 2**20
                    else:
                        rss, pss = process.memory_info().rss / 2**20, 0.0
            except psutil.Error:
                continue
            by_kind[kind] = by_kind.get(kind, 0.0) + rss
            pss_by_kind[kind] = pss_by_kind.get(kind, 0.0) + pss
            cpu[process.pid] = (kind, times.user + times.system)
        for kind, process in self._extra.items():
            try:
                times = process.cpu_times()
            except psutil.Error:
                continue
            cpu[process.pid] = (kind, times.user + times.system)
        with self._lock:
            self._cpu.update(cpu)  # processes that ended keep their last reading
            if not by_kind:
                return
            now = time.perf_counter() - self._started
            self.max_processes = max(self.max_processes, len(processes))
            total = sum(by_kind.values())
            self.samples.append((now, total, by_kind))
            self.peak_mb = max(self.peak_mb, total)
            for kind, value in by_kind.items():
                self.peak_by_kind[kind] = max(self.peak_by_kind.get(kind, 0.0), value)
            if self._pss:
                pss_total = sum(pss_by_kind.values())
                self.pss_samples.append((now, pss_total))
                self.peak_pss_mb = max(self.peak_pss_mb, pss_total)
                for kind, value in pss_by_kind.items():
                    self.peak_pss_by_kind[kind] = max(self.peak_pss_by_kind.get(kind, 0.0), value)

    def cpu_seconds(self) -> dict[str, float]:
        """Cumulative CPU seconds per process kind (jvm, python, kinesalite...) so far."""
        self.sample()
        with self._lock:
            totals: dict[str, float] = {}
            for kind, seconds in self._cpu.values():
                totals[kind] = totals.get(kind, 0.0) + seconds
        return {kind: round(seconds, 2) for kind, seconds in totals.items()}


def _process_kind(process: psutil.Process) -> str:
    name = process.name().lower()
    if "java" in name:
        return "jvm"
    if "python" in name:
        return "python"
    return name


def run_with_timeout(
    command: list[str],
    *,
    env: dict[str, str],
    timeout_s: float,
    on_start: Callable[[subprocess.Popen[str]], Any] | None = None,
) -> tuple[subprocess.CompletedProcess[str], Any]:
    """Run ``command``; ``on_start(process)`` runs while it does (e.g. to sample memory).

    The child is killed (its whole process group) if it outlives ``timeout_s``, so no
    benchmark leaves a JVM behind.
    """
    process = subprocess.Popen(
        command,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO_ROOT,
        start_new_session=True,
    )
    extra = None
    try:
        if on_start is not None:
            extra = on_start(process)
        stdout, stderr = process.communicate(timeout=timeout_s)
    except BaseException:
        kill_tree(process)
        raise
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr), extra


def kill_tree(process: subprocess.Popen[str]) -> None:
    """Kill a child we started and everything it started (by pid, never by name)."""
    try:
        children = psutil.Process(process.pid).children(recursive=True)
    except psutil.Error:
        children = []
    for child in [*children]:
        with contextlib.suppress(psutil.Error):
            child.kill()
    with contextlib.suppress(OSError):
        process.kill()
    with contextlib.suppress(subprocess.TimeoutExpired, ValueError):
        process.communicate(timeout=10)
