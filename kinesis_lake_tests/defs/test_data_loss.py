"""Quiet streams, outages and acknowledged loss in Dagster mode, over days of simulated
time: real sensor ticks, the runs they request executed with real Spark, the no_data_loss
check, the acknowledge-loss command, kinesalite behind a clock proxy (retention, server
clock)."""

from __future__ import annotations

import re

import dagster as dg

from kinesis_lake.cli import main
from kinesis_lake.defs.backlog_runs import BACKLOG_SENSOR_NAME
from kinesis_lake.defs.raw_assets import RAW_EVENTS, raw_events
from kinesis_lake.defs.raw_checks import DATA_LOSS_CHECK, raw_checks
from kinesis_lake.defs.sensors import kinesis_backlog_sensor
from kinesis_lake.defs.streams import DEFAULT_STREAM, KINESIS_STREAM, kinesis_stream
from kinesis_lake_tests.defs.helpers import Lake, make_lake
from kinesis_lake_tests.kinesis.clock_proxy import ClockProxy
from kinesis_lake_tests.pipeline_helpers import produce, raw_keys

HOUR_S = 3600
NO_DATA_LOSS = dg.AssetCheckKey(RAW_EVENTS, DATA_LOSS_CHECK)


def _run(
    lake: Lake, instance: dg.DagsterInstance, request: dg.RunRequest | None = None
) -> dg.ExecuteInProcessResult:
    """An ingestion run with raw_events' no_data_loss check; tagged as the daemon tags it
    when the sensor requested it."""
    tags = {}
    if request is not None:
        tags = {
            **request.tags,
            "dagster/run_key": request.run_key,
            "dagster/sensor_name": BACKLOG_SENSOR_NAME,
        }
    return dg.materialize(
        [kinesis_stream, raw_events, *raw_checks(DEFAULT_STREAM)],
        selection=dg.AssetSelection.assets(KINESIS_STREAM, RAW_EVENTS)
        | dg.AssetSelection.checks(NO_DATA_LOSS),
        resources=lake.resources,
        instance=instance,
        tags=tags,
        raise_on_error=False,
    )


def _no_data_loss(result: dg.ExecuteInProcessResult) -> dg.AssetCheckEvaluation:
    (evaluation,) = [
        e for e in result.get_asset_check_evaluations() if e.check_name == DATA_LOSS_CHECK
    ]
    return evaluation


def _root_cause(error) -> str:
    """The innermost error Dagster recorded for a failed step, as its last line
    ``module.SomeError: message`` (Spark nests the Python worker's traceback in it)."""
    while error.cause is not None:
        error = error.cause
    lines = [line for line in error.message.splitlines() if re.match(r"^[\w.]+Error: ", line)]
    return lines[-1] if lines else error.message.strip().splitlines()[0]


class Daemon:
    """What the Dagster daemon does with the backlog sensor: tick, then run its requests."""

    def __init__(self, lake: Lake, instance: dg.DagsterInstance) -> None:
        self.lake, self.instance = lake, instance
        self.cursor: str | None = None
        self.runs: list[dg.ExecuteInProcessResult] = []

    def tick(self) -> int:
        with dg.build_sensor_context(
            instance=self.instance, cursor=self.cursor, resources=self.lake.resources
        ) as context:
            result = kinesis_backlog_sensor(context)
        self.cursor = result.cursor
        for request in result.run_requests:
            self.runs.append(_run(self.lake, self.instance, request))
        return len(result.run_requests)


def test_a_stream_quiet_for_longer_than_retention_is_not_data_loss(
    spark, clock, tmp_path, monkeypatch
):
    """Issue 31 defect 3: the sensor launched runs only on a backlog, so after a quiet
    day nothing had refreshed the checkpoint's tip times, and the first record after it
    failed every run with a false DataLossError."""
    lake = make_lake(monkeypatch, tmp_path / "data", clock.url)
    with dg.instance_for_test() as instance:
        daemon = Daemon(lake, instance)
        produce(lake.settings, 10, seed=1)
        assert daemon.tick() == 1
        for _ in range(5):  # 25 h without a record, the sensor ticking every 5 h
            clock.advance(5 * HOUR_S)
            daemon.tick()
        produce(lake.settings, 5, seed=2)
        assert daemon.tick() == 1

    failures = [
        _root_cause(event.event_specific_data.error)
        for run in daemon.runs
        for event in run.get_step_failure_events()
    ]
    assert failures == []
    assert len(raw_keys(lake.settings)) == 15
    last = daemon.runs[-1].get_asset_materialization_events()[-1].materialization
    assert last.metadata["skipped_ranges"].value == 0


def _outage_that_loses_records(lake: Lake, clock: ClockProxy, seed: int) -> None:
    """Records arrive while nothing ingests, and the outage outlasts the retention."""
    clock.advance(2 * HOUR_S)
    produce(lake.settings, 4, seed=seed)
    clock.advance(26 * HOUR_S)


def test_an_acknowledged_loss_clears_no_data_loss_until_the_next_one(
    spark, clock, tmp_path, monkeypatch, capsys
):
    """Issue 31 b: no_data_loss counted the checkpoint's skips over its whole life, so a
    loss an operator had dealt with kept it red until the checkpoint was deleted. The
    operator acknowledges it with ``kinesis-lake acknowledge-loss``; a later loss turns
    the check red again."""
    lake = make_lake(monkeypatch, tmp_path / "data", clock.url)
    lake = lake.rebuild(monkeypatch, KINESIS_LAKE_FAIL_ON_DATA_LOSS="false")
    with dg.instance_for_test() as instance:
        produce(lake.settings, 10, seed=1)
        assert _no_data_loss(_run(lake, instance)).passed
        _outage_that_loses_records(lake, clock, seed=2)
        lost = _no_data_loss(_run(lake, instance))
        assert not lost.passed
        assert "kinesis-lake acknowledge-loss" in lost.description
        assert "\n" not in lost.description

        main(["acknowledge-loss"])
        assert "acknowledged" in capsys.readouterr().out
        produce(lake.settings, 5, seed=3)
        assert _no_data_loss(_run(lake, instance)).passed

        _outage_that_loses_records(lake, clock, seed=4)
        assert not _no_data_loss(_run(lake, instance)).passed
    assert len(raw_keys(lake.settings)) == 15
