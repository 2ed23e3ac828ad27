"""The chaos harness, short: SIGKILLed ingestion still commits every record exactly once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
KILLS = int(os.environ.get("KINESIS_LAKE_CHAOS_KILLS", "4"))
"""Seed 5 aims its first two kills at the moments the sink's exactly-once rests on
(committed but not checkpointed, files written but not committed): the Spark compatibility
suite runs those two only (scripts/spark_compat.sh), each kill costing a JVM start."""


def test_ingestion_killed_repeatedly_loses_and_duplicates_nothing():
    completed = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "scripts" / "chaos.py"),
            "--kills",
            str(KILLS),
            "--records",
            "1500",
            "--seed",
            "5",
        ],
        capture_output=True,
        text=True,
        timeout=1500,
        check=False,
    )
    output = completed.stdout
    assert "RESULT: PASS" in output, output[-3000:] + completed.stderr[-3000:]
    assert "lost                                0" in output
    assert "duplicated                          0" in output
    kills = sum(
        int(line.split()[2]) for line in output.splitlines() if line.strip().startswith("kills ")
    )
    assert kills == KILLS
