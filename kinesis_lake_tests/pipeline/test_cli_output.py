"""What the command line prints: query results people and scripts can use, help that helps,
profiles found from anywhere, and the commands ``make dev`` hands out."""

from __future__ import annotations

import argparse
import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from kinesis_lake.cli import build_parser
from kinesis_lake.dev import session_commands
from kinesis_lake.iceberg.raw_table import ensure_raw_table
from kinesis_lake.pipeline.lake import open_lake
from kinesis_lake_tests.iceberg.helpers import ingest
from kinesis_lake_tests.pipeline_helpers import run_cli, settings_env

QUERY = "SELECT sequence_number, data, approximate_arrival_timestamp FROM raw_events ORDER BY 1"


@pytest.fixture
def lake(kinesalite_endpoint, settings_factory):
    settings = settings_factory(kinesalite_endpoint)
    catalog = open_lake(settings)
    catalog.create_namespace_if_not_exists(settings.namespace)
    ingest(ensure_raw_table(catalog, settings.raw_table), "writer", 0, [1, 2])
    return settings


def test_query_writes_json_lines_and_csv_with_payloads_as_text(lake):
    as_json = run_cli(lake, "query", QUERY, "--format", "json")
    as_csv = run_cli(lake, "query", QUERY, "--format", "csv")

    assert as_json.returncode == 0 and as_csv.returncode == 0, as_json.stderr + as_csv.stderr
    rows = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert [(r["sequence_number"], r["data"]) for r in rows] == [
        ("1", '{"n": 1}'),
        ("2", '{"n": 2}'),
    ]
    assert rows[0]["approximate_arrival_timestamp"].startswith("2024-05-01T00:00:01")
    table = list(csv.reader(io.StringIO(as_csv.stdout)))
    assert table[0] == ["sequence_number", "data", "approximate_arrival_timestamp"]
    assert table[1][:2] == ["1", '{"n": 1}']


def test_query_cuts_table_cells_at_max_width_and_off_a_terminal_at_spark_s_20(lake):
    wide = run_cli(lake, "query", "SELECT repeat('x', 50) AS long_text")
    narrow = run_cli(lake, "query", "SELECT repeat('x', 50) AS long_text", "--max-width", "10")
    full = run_cli(lake, "query", "SELECT repeat('x', 50) AS long_text", "--max-width", "60")

    assert "|" + "x" * 17 + "...|" in wide.stdout
    assert "x" * 7 + "...|" in narrow.stdout
    assert "x" * 50 + "|" in full.stdout


def test_every_option_says_what_it_does_and_help_has_no_markup():
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, command in commands.choices.items():
        text = command.format_help()
        assert "``" not in text and ":func:" not in text, name
        for action in command._actions:
            assert action.help, f"{name} {action.option_strings or action.dest} has no help"
    query = commands.choices["query"].format_help()
    assert "(default: table)" in query and "(default: 20)" in query


def test_a_profile_is_found_in_the_repository_from_any_directory(lake, tmp_path):
    shown = subprocess.run(
        [sys.executable, "-m", "kinesis_lake.cli", "--profile", "profiles/local.env", "settings"],
        env=settings_env(lake),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    missing = subprocess.run(
        [sys.executable, "-m", "kinesis_lake.cli", "--profile", "profiles/nope.env", "settings"],
        env=settings_env(lake),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )

    assert shown.returncode == 0, shown.stderr
    assert "KINESIS_LAKE_EVENT_SCHEMA" in shown.stdout
    assert missing.returncode != 0
    (line,) = missing.stderr.strip().splitlines()
    assert "--profile profiles/nope.env: no such file here or in the repository" in line


def test_make_dev_hands_out_commands_on_its_own_lake():
    text = session_commands("http://127.0.0.1:4567", Path("/repo/.data/dev"), "sc://127.0.0.1:1")
    assert (
        "export KINESIS_ENDPOINT_URL=http://127.0.0.1:4567 KINESIS_LAKE_DATA_DIR=/repo/.data/dev"
        " SPARK_MASTER=sc://127.0.0.1:1" in text
    )
    for command in ("produce", "query", "history", "check"):
        assert f"--profile profiles/local.env {command}" in text
