"""The Spark compatibility suite's list names tests that exist, so a renamed or removed test
fails here, in seconds, not at the end of `make test` in another virtualenv."""

from __future__ import annotations

import ast
from pathlib import Path

SUITE = Path(__file__).resolve().parent / "spark_compat_suite.txt"
ROOT = SUITE.parents[1]


def node_ids() -> list[str]:
    """The list's pytest node ids, as scripts/spark_compat.sh reads them (comments and
    blank lines dropped)."""
    lines = (line.split("#", 1)[0].strip() for line in SUITE.read_text().splitlines())
    return [line for line in lines if line]


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
