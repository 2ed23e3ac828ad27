"""The soak, short: three simulated rounds of 20 hours with a split, a merge and a
deliberate loss, through kills, ambiguous commits and racing maintenance."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(2400)
def test_a_short_soak_loses_and_duplicates_nothing_and_reports_the_deliberate_loss():
    completed = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "scripts" / "soak.py"),
            *("--days", "3", "--split-day", "1", "--merge-day", "2", "--loss-day", "3"),
            *("--records-per-day", "60", "--seed", "7"),
        ],
        capture_output=True,
        text=True,
        timeout=2300,
        check=False,
    )
    output = completed.stdout
    assert "RESULT: PASS" in output, output[-3000:] + completed.stderr[-3000:]
    lines = {
        line.strip().split("  ")[0]: line.rsplit(" ", 1)[-1]
        for line in output.splitlines()
        if line.startswith("  ")
    }
    assert lines["lost"] == "0" and lines["duplicated"] == "0"
    assert int(lines["records expired unread on purpose"]) > 0
    assert lines["data-loss gaps reported"] == "1"
    assert lines["ingestion still starts"] == "yes"
