"""Upkeep never delays ingestion or derive: its schedule waits for a quiet moment, its ops
give way to a run that starts meanwhile, unless upkeep was put off for over an hour.
A real instance and the real job and schedule; no Spark (upkeep has nothing to do)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.utils import make_new_run_id

from kinesis_lake.defs import maintenance
from kinesis_lake.defs.maintenance import (
    MAINTENANCE_JOB_NAME,
    maintenance_job,
    maintenance_schedule,
)
from kinesis_lake.events.declaration_file import load_declaration

REPO_ROOT = Path(__file__).resolve().parents[2]
JOB = maintenance_job(load_declaration(REPO_ROOT / "schemas" / "events.yaml"))
SCHEDULE = maintenance_schedule(JOB, "*/10 * * * *")

# Executing the maintenance job in process still tails its compute log in a process.
pytestmark = pytest.mark.processes


def _run(instance: dg.DagsterInstance, job_name: str, status: dg.DagsterRunStatus) -> None:
    instance.add_run(dg.DagsterRun(job_name=job_name, run_id=make_new_run_id(), status=status))


def _tick(instance: dg.DagsterInstance) -> list:
    data = SCHEDULE.evaluate_tick(dg.build_schedule_context(instance=instance))
    return list(data.run_requests or [])


def test_the_schedule_skips_its_tick_while_ingestion_runs(instance):
    _run(instance, MAINTENANCE_JOB_NAME, dg.DagsterRunStatus.SUCCESS)  # upkeep is not overdue
    (quiet,) = _tick(instance)
    assert all(op["config"]["give_way"] for op in quiet.run_config["ops"].values())

    _run(instance, "ingest_raw_events", dg.DagsterRunStatus.STARTED)
    assert _tick(instance) == []


def test_a_new_lake_waits_too_but_overdue_upkeep_runs_anyway_without_giving_way(
    instance, monkeypatch
):
    _run(instance, "ingest_raw_events", dg.DagsterRunStatus.STARTED)
    assert _tick(instance) == []  # no upkeep yet, but the lake's first run is seconds old

    monkeypatch.setattr(maintenance, "MAX_DEFERRAL", timedelta(0))
    (overdue,) = _tick(instance)
    assert not any(op["config"]["give_way"] for op in overdue.run_config["ops"].values())


def test_each_table_gives_way_to_a_run_under_way(lake, instance):
    _run(instance, "ingest_raw_events", dg.DagsterRunStatus.STARTING)
    result = JOB.execute_in_process(resources=lake.resources, instance=instance)
    assert result.success
    logged = [
        e.message or ""
        for e in instance.all_logs(result.run_id)
        if "left for the next upkeep" in (e.message or "")
    ]
    assert len(logged) == len(JOB.nodes)
