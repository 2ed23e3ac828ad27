"""A bounded coverage-guided fuzz run of each target, as part of ``make test``.

Each target runs in its own process (atheris owns the process: libFuzzer exits on the
first crash) for ``FUZZ_SECONDS`` (default 20); ``make fuzz FUZZ_SECONDS=600`` is the
long run. A crash fails the test and leaves the input as ``crash-*`` in the test's
folder; turn it into a regression test next to the code it broke.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kinesis_lake_tests.fuzz.targets import TARGETS

FUZZ_SECONDS = int(os.environ.get("FUZZ_SECONDS", "20"))


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_fuzz_target_finds_no_crash(target: str, tmp_path: Path) -> None:
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "kinesis_lake_tests.fuzz.targets",
            target,
            f"-max_total_time={FUZZ_SECONDS}",
            f"-artifact_prefix={tmp_path}/",
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        capture_output=True,
        text=True,
        timeout=FUZZ_SECONDS + 300,
        check=False,
    )
    crashes = sorted(tmp_path.glob("crash-*")) + sorted(tmp_path.glob("timeout-*"))
    assert run.returncode == 0 and not crashes, run.stderr[-4000:]
    executions = [line for line in run.stderr.splitlines() if line.startswith("Done ")]
    assert executions, run.stderr[-2000:]  # "Done N runs in S second(s)"
