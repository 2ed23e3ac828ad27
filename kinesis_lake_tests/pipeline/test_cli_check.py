"""``kinesis-lake check``: a data team's CI step, run as CI runs it (a separate process)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from kinesis_lake.iceberg.raw_table import ensure_raw_table
from kinesis_lake.pipeline.lake import open_lake
from kinesis_lake_tests.iceberg.helpers import ingest
from kinesis_lake_tests.pipeline_helpers import run_cli

DUPLICATES = "raw_events:no_duplicate_records"


def test_check_passes_then_fails_on_a_broken_table_and_writes_junit_xml(
    kinesalite_endpoint, settings_factory, tmp_path
):
    settings = settings_factory(kinesalite_endpoint)
    catalog = open_lake(settings)
    catalog.create_namespace_if_not_exists(settings.namespace)
    raw = ensure_raw_table(catalog, settings.raw_table)
    ingest(raw, "writer-a", 0, [1, 2, 3])

    healthy = run_cli(settings, "check", "--select", DUPLICATES)

    assert healthy.returncode == 0, healthy.stdout + healthy.stderr[-2000:]
    assert healthy.stdout.splitlines()[0].startswith(f"PASS  {DUPLICATES}  ")

    ingest(raw, "writer-b", 0, [3])  # a second writer loads record 3 again
    report = tmp_path / "reports" / "checks.xml"
    broken = run_cli(
        settings,
        "check",
        "--select",
        DUPLICATES,
        "events_quarantine:quarantine_ratio",
        "--junit-xml",
        str(report),
    )

    assert broken.returncode == 1, broken.stdout + broken.stderr[-2000:]
    lines = broken.stdout.splitlines()
    assert lines[0].startswith("FAIL  events_quarantine:quarantine_ratio  Table ")
    assert lines[1].startswith(f"FAIL  {DUPLICATES}  ")
    assert lines[-1] == "0 passed, 0 warned, 2 failed"
    suite = ET.parse(report).getroot().find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures")) == ("2", "2")
    cases = {(c.get("classname"), c.get("name")): c for c in suite.iter("testcase")}
    assert set(cases) == {
        ("raw_events", "no_duplicate_records"),
        ("events_quarantine", "quarantine_ratio"),
    }
    failure = cases[("raw_events", "no_duplicate_records")].find("failure")
    assert failure is not None and failure.get("type") == "FAIL"


def test_an_unknown_selection_names_the_checks_there_are(kinesalite_endpoint, settings_factory):
    settings = settings_factory(kinesalite_endpoint)

    unknown = run_cli(settings, "check", "--select", "raw_event")

    assert unknown.returncode != 0
    (line,) = unknown.stderr.strip().splitlines()
    assert line.startswith(
        "kinesis-lake: configuration error: --select 'raw_event' matches no check"
    )
    assert DUPLICATES in line
