"""The chaos harness, short: SIGKILLed ingestion still commits every record exactly once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_ingestion_killed_repeatedly_loses_and_duplicates_nothing():
    completed = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "scripts" / "chaos.py"),
            "--kills",
            "4",
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
    assert kills == 4
