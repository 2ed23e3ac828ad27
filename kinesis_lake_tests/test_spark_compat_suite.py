"""The Spark compatibility suite's list names tests that exist, so a renamed or removed test
fails here, in seconds, not at the end of `make test` in another virtualenv."""

from __future__ import annotations

import ast
from pathlib import Path

SUITE = Path(__file__).resolve().parent / "spark_compat_suite.txt"
ROOT = SUITE.parents[1]


LOCK = ROOT / "requirements-spark-compat.lock"


def entries() -> list[list[str]]:
    """The list's lines as scripts/spark_compat.sh reads them (comments and blank lines
    dropped): a node id, then maybe the Spark lines it is limited to, ``[4.0]``."""
    lines = (line.split("#", 1)[0].split() for line in SUITE.read_text().splitlines())
    return [line for line in lines if line]


def node_ids() -> list[str]:
    return [entry[0] for entry in entries()]


def test_a_version_limit_names_a_spark_line_of_the_compatibility_lock():
    locked = {
        line.split("==")[1].split()[0].rsplit(".", 1)[0]
        for line in LOCK.read_text().splitlines()
        if line.startswith("pyspark==")
    }
    assert locked
    for node, *limit in entries():
        assert len(limit) <= 1, node
        for text in limit:
            assert text.startswith("[") and text.endswith("]"), f"{node}: {text}"
            assert set(text[1:-1].split(",")) <= locked, f"{node}: {text} is not in {LOCK.name}"


def test_every_entry_of_the_compatibility_suite_names_a_test_function():
    ids = node_ids()
    assert ids and len(ids) == len(set(ids))
    for node in ids:
        path, _, name = node.partition("::")
        source = ROOT / path
        assert source.is_file(), node
        functions = {
            statement.name
            for statement in ast.parse(source.read_text()).body
            if isinstance(statement, ast.FunctionDef)
        }
        assert name in functions, f"{node}: no such test in {path}"
