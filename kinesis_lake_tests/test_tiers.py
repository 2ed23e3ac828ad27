"""The kinds of test (kinesis_lake_tests/tiers.py), on a small suite run by a real pytest:
each test gets exactly one kind, found without marking it, and under ``-m fast`` a fast
test that starts a process fails, naming itself and the mark to give it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]

CONFTEST = """
import pytest
from kinesis_lake_tests import tiers

def pytest_configure(config):
    tiers.register(config)

@pytest.fixture(scope="session")
def spark():
    return "the session's Spark, by name"
"""

HELPERS = """
import subprocess
import sys

def run_python():
    subprocess.run([sys.executable, "-c", "pass"], check=True)
"""

TESTS = """
import importlib
import subprocess
import sys

import pytest

from helpers import run_python


def test_pure():
    assert 1 + 1 == 2


def test_with_spark(spark):
    assert spark


@pytest.mark.parametrize("page", ["a stop rule's, not the browser's"])
def test_a_parameter_named_like_a_fixture(page):
    assert page


def test_a_probe():
    subprocess.run([sys.executable, "-c", "pass"], check=True)


def test_through_a_helper():
    run_python()


@pytest.mark.system
def test_marked_system():
    assert True


def test_hidden_process():
    # Out of the classifier's sight: only the guard can catch this one.
    importlib.import_module("subprocess").run(["true"], check=True)


def test_hidden_jvm():
    importlib.import_module("subprocess").run(["java", "-version"], check=True)
"""


def _suite(folder: Path) -> Path:
    (folder / "conftest.py").write_text(textwrap.dedent(CONFTEST))
    (folder / "helpers.py").write_text(textwrap.dedent(HELPERS))
    (folder / "test_sample.py").write_text(textwrap.dedent(TESTS))
    (folder / "pytest.ini").write_text(
        "[pytest]\naddopts = --strict-markers -p no:cacheprovider\nmarkers =\n"
        + "".join(
            f"    {kind}: the {kind} kind\n" for kind in ("fast", "spark", "processes", "system")
        )
    )
    return folder


def _pytest(folder: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:xdist", *args],
        cwd=folder,
        env={"PYTHONPATH": f"{REPO_ROOT}:{folder}", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
    )


def _collected(folder: Path, kind: str) -> set[str]:
    done = _pytest(folder, "--collect-only", "-q", "-m", kind)
    assert done.returncode in (0, 5), done.stdout + done.stderr
    return {line.split("::")[1] for line in done.stdout.splitlines() if "::" in line}


def test_every_test_gets_exactly_one_kind_without_being_marked(tmp_path: Path) -> None:
    suite = _suite(tmp_path)
    kinds = {kind: _collected(suite, kind) for kind in ("fast", "spark", "processes", "system")}
    assert kinds == {
        "fast": {
            "test_pure",
            "test_hidden_process",
            "test_hidden_jvm",
            "test_a_parameter_named_like_a_fixture[a stop rule's, not the browser's]",
        },
        "spark": {"test_with_spark"},
        "processes": {"test_a_probe", "test_through_a_helper"},
        "system": {"test_marked_system"},
    }


def test_a_fast_test_that_starts_a_process_fails_naming_itself_and_its_mark(
    tmp_path: Path,
) -> None:
    done = _pytest(_suite(tmp_path), "-m", "fast", "-q")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "2 passed" in done.stdout and "2 failed" in done.stdout, done.stdout
    assert "test_sample.py::test_hidden_process is marked fast but started 'true'" in done.stdout, (
        done.stdout
    )
    assert "test_sample.py::test_hidden_jvm is marked fast but started 'java -version'" in (
        done.stdout
    ), done.stdout
    assert "`pytestmark = pytest.mark.processes`" in done.stdout
    assert "the session's `spark` fixture" in done.stdout  # said for the JVM only
    assert "openjdk" not in (done.stdout + done.stderr).lower()  # refused, never started


def test_other_selections_run_the_same_tests_unguarded(tmp_path: Path) -> None:
    """``make test`` selects nothing: every test runs as it always did."""
    done = _pytest(_suite(tmp_path), "-q", "-k", "not hidden_jvm")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "7 passed" in done.stdout, done.stdout
