"""``make demo`` with an Avro stream (issue 35: "make demo can run with an Avro stream"): the
real ``kinesis-lake demo --format glue-schema-registry`` process, with its own Kinesis
endpoint, moto Glue and Dagster runs, on a small count in a folder of the test's own
(``KINESIS_LAKE_DEMO_DIR``). It exits 0 with every sent record accounted for, and what
landed in the raw table is what the registry's serializer sends."""

from __future__ import annotations

import os
import re

import pytest

from kinesis_lake.config import Settings
from kinesis_lake.pipeline.lake import open_lake
from kinesis_lake_tests.pipeline_helpers import run_cli_with

pytestmark = pytest.mark.processes

EVENTS = 200
"""The fewest with a malformed record and one no route takes in each of the two waves (one
in 50 and one in 100 of a wave); the demo's time is its two Dagster runs, not its count."""


def _summary(stdout: str, name: str) -> str:
    """The value of line ``name`` of the demo's summary (``  name   value``)."""
    found = re.search(rf"^  {re.escape(name)} +(\S+)$", stdout, re.MULTILINE)
    assert found is not None, f"no {name!r} in the summary:\n{stdout[-3000:]}"
    return found[1]


def test_the_demo_runs_with_a_registry_avro_stream_and_accounts_for_every_record(tmp_path):
    data_dir = tmp_path / "demo"
    # The profile's settings, not the caller's: only what the demo's own defaults leave.
    env = {k: v for k, v in os.environ.items() if not k.startswith("KINESIS")}
    env["KINESIS_LAKE_DEMO_DIR"] = str(data_dir)

    done = run_cli_with(env, "demo", "--format", "glue-schema-registry", "--events", str(EVENTS))

    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Local Glue Schema Registry (moto) on http://127.0.0.1:" in done.stdout
    assert "(glue-schema-registry records)" in done.stdout
    assert "Demo succeeded: every record landed exactly once." in done.stdout
    assert _summary(done.stdout, "records sent") == _summary(done.stdout, "raw_events")
    assert _summary(done.stdout, "raw_events") == str(EVENTS)
    passed, run = _summary(done.stdout, "checks passed").split("/")
    assert passed == run and int(run) > 0
    assert "    passed  events_quarantine: reconciles_with_raw_events\n" in done.stdout

    variant = data_dir / "clickstream_glue_schema_registry.yaml"
    settings = Settings(data_dir=data_dir, event_schema_path=variant)
    raw = open_lake(settings).load_table(settings.raw_table).scan(selected_fields=("data",))
    payloads = raw.to_arrow()["data"].to_pylist()
    assert len(payloads) == EVENTS
    assert {payload[0] for payload in payloads} == {3}, "the registry's header version byte"
