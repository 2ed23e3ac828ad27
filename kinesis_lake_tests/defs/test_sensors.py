"""The backlog sensor against a real local Kinesis endpoint and a real Iceberg catalog.

Committed positions are written the way the Iceberg sink writes them (rows appended with
the table property ``kinesis-lake.positions`` in the same transaction), so these tests
need no Spark; the end-to-end tests in ``test_pipeline.py`` drive the same sensor with
real ingestion runs.
"""

from __future__ import annotations

import json
import logging
import time
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pytest

from kinesis_lake.config import SettingsError
from kinesis_lake.defs.backlog_runs import (
    BACKLOG_SENSOR_NAME,
    MAX_IMMEDIATE_ATTEMPTS,
    attempt_run_key,
    backlog_run_key,
    quiet_run_key,
)
from kinesis_lake.defs.raw_checks import STALL_CHECK
from kinesis_lake.defs.resources import KinesisResource
from kinesis_lake.defs.sensors import (
    HANDOVER_MARGIN_S,
    BacklogCursor,
    daemon_tick_gap,
    kinesis_backlog_sensor,
)
from kinesis_lake.iceberg.catalog import ensure_namespace
from kinesis_lake.iceberg.raw_table import RAW_ARROW_SCHEMA, ensure_raw_table
from kinesis_lake.iceberg.summary import POSITIONS, committed_positions
from kinesis_lake.pipeline.ingest_query import source_metadata_path
from kinesis_lake.pipeline.lake import open_lake
from kinesis_lake.spark.kinesis.progress import ShardProgressStore
from kinesis_lake_tests.pipeline_helpers import produce, read_stream


class _Lines(logging.Handler):
    """The lines a tick logs (what its "View logs" shows in the UI)."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__(logging.INFO)
        self.lines = lines

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def tick(lake, instance, cursor: str | None = None, logged: list[str] | None = None):
    with dg.build_sensor_context(
        instance=instance, cursor=cursor, resources=lake.resources
    ) as context:
        if logged is not None:
            context.log.addHandler(_Lines(logged))
        return kinesis_backlog_sensor(context)


def stream_records(lake) -> list[dict]:
    return read_stream(lake.client, lake.settings.stream_name)


def commit_as_the_sink_does(lake, records: list[dict]) -> dict[str, str]:
    """Append ``records`` to the raw table with the positions summary the sink writes."""
    catalog = open_lake(lake.settings)
    ensure_namespace(catalog, lake.settings.namespace)
    table = ensure_raw_table(catalog, lake.settings.raw_table)
    positions = dict(committed_positions(table))
    for record in records:
        shard, sequence = record["ShardId"], record["SequenceNumber"]
        if shard not in positions or int(sequence) > int(positions[shard]):
            positions[shard] = sequence
    now = datetime.now(UTC)
    rows = pa.Table.from_pylist(
        [
            {
                "stream_name": lake.settings.stream_name,
                "shard_id": r["ShardId"],
                "sequence_number": r["SequenceNumber"],
                "sub_sequence_number": 0,
                "partition_key": r["PartitionKey"],
                "approximate_arrival_timestamp": r["ApproximateArrivalTimestamp"],
                "data": r["Data"],
                "aggregated": False,
                "source_error": None,
                "ingested_at": now,
                "batch_id": 0,
            }
            for r in records
        ],
        schema=RAW_ARROW_SCHEMA,
    )
    with table.transaction() as transaction:
        transaction.append(rows)
        transaction.set_properties({POSITIONS: json.dumps(positions)})
    record_reads_to_the_tip(lake, positions)
    return positions


def record_reads_to_the_tip(lake, positions: dict[str, str], hours_ago: float = 0) -> int:
    """The status the source writes beside its checkpoint after reading every shard to its
    tip ``hours_ago`` (what tells the sensor the stream was read recently)."""
    at_ms = int((time.time() - hours_ago * 3600) * 1000)
    status = {
        "runId": "run-of-the-test",
        "epoch": 1,
        "writtenAtMs": at_ms,
        "skippedRanges": 0,
        "shards": {shard: {"tip_ms": at_ms} for shard in positions},
        "finishedShards": [],
    }
    store = ShardProgressStore(source_metadata_path(lake.settings))
    store.write_status("run-of-the-test", status)
    return at_ms


def test_an_empty_stream_is_skipped_and_its_state_recorded(lake, instance):
    logged: list[str] = []
    result = tick(lake, instance, logged=logged)

    assert result.run_requests == []
    assert "No backlog" in result.skip_reason.skip_message
    # The tick's log says what it saw and why it skipped (its "View logs" in the UI).
    assert logged == [
        f"Stream {lake.settings.stream_name}: 2 shards (retention 24 h), no backlog; "
        "raw_events has no commit yet.",
        f"Skipped: {result.skip_reason.skip_message}",
    ]
    stream, freshness = result.asset_events
    assert stream.asset_key == dg.AssetKey("kinesis_stream")
    assert stream.metadata["shards"].value == 2
    assert stream.metadata["shards_with_backlog"].value == 0
    assert stream.metadata["retention_hours"].value == 24
    assert freshness.check_name == "fresh_relative_to_stream" and freshness.passed
    # The daemon records these events; they must be valid for this instance and graph.
    for event in result.asset_events:
        instance.report_runless_asset_event(event)
    latest = instance.get_latest_materialization_event(dg.AssetKey("kinesis_stream"))
    assert latest.asset_materialization.metadata["shards"].value == 2


def test_a_backlog_requests_one_ingestion_run_under_a_deterministic_key(lake, instance):
    produce(lake.settings, 30, seed=1)

    logged: list[str] = []
    first = tick(lake, instance, logged=logged)
    again = tick(lake, instance, cursor=first.cursor)
    fresh_cursor = tick(lake, instance)

    (request,) = first.run_requests
    assert request.run_key == backlog_run_key(lake.settings.stream_name, {})
    assert [r.run_key for r in again.run_requests] == [request.run_key]
    assert [r.run_key for r in fresh_cursor.run_requests] == [request.run_key]
    assert request.tags["kinesis_lake/stream"] == lake.settings.stream_name
    assert set(request.tags["kinesis_lake/backlog_shards"].split(",")) == {
        r["ShardId"] for r in stream_records(lake)
    }
    assert json.loads(first.cursor)["backlog"] == request.run_key
    stream = first.asset_events[0]
    assert stream.metadata["shards_with_backlog"].value >= 1
    # A tick that launches a run says what it saw and why it launched it.
    shards = request.tags["kinesis_lake/backlog_shards"].replace(",", ", ")
    saw, decided = logged
    assert saw.startswith(
        f"Stream {lake.settings.stream_name}: 2 shards (retention 24 h), backlog on "
        f"{len(shards.split(', '))} of them ({shards}), its oldest record "
    )
    assert saw.endswith("s old; raw_events has no commit yet.")
    assert decided == (
        f"Requested a run of ingest_raw_events ({request.run_key}): backlog on {shards}."
    )


def test_committed_positions_decide_backlog_and_key(lake, instance):
    produce(lake.settings, 20, seed=2)
    records = stream_records(lake)
    half = records[: len(records) // 2]

    positions = commit_as_the_sink_does(lake, half)
    partial = tick(lake, instance)
    (request,) = partial.run_requests
    assert request.run_key == backlog_run_key(lake.settings.stream_name, positions)
    assert request.run_key != backlog_run_key(lake.settings.stream_name, {})

    commit_as_the_sink_does(lake, records[len(records) // 2 :])
    caught_up = tick(lake, instance, cursor=partial.cursor)
    assert caught_up.run_requests == []
    assert "No backlog" in caught_up.skip_reason.skip_message


def test_no_request_while_a_run_that_writes_raw_is_in_progress(lake, instance):
    produce(lake.settings, 10, seed=3)
    running = instance.add_run(
        dg.DagsterRun(job_name="ingest_raw_events", status=dg.DagsterRunStatus.STARTED)
    )
    result = tick(lake, instance)
    assert result.run_requests == []
    assert running.run_id in result.skip_reason.skip_message

    instance.report_run_failed(running)
    # A materialization of raw_events launched from the UI (starting) counts too.
    queued = instance.add_run(
        dg.DagsterRun(
            job_name="__ASSET_JOB",
            status=dg.DagsterRunStatus.STARTING,
            asset_selection=frozenset({dg.AssetKey("raw_events")}),
        )
    )
    result = tick(lake, instance)
    assert result.run_requests == []
    assert queued.run_id in result.skip_reason.skip_message

    # A run of something else does not hold ingestion back.
    instance.report_run_failed(queued)
    instance.add_run(
        dg.DagsterRun(
            job_name="__ASSET_JOB",
            status=dg.DagsterRunStatus.STARTED,
            asset_selection=frozenset({dg.AssetKey("events")}),
        )
    )
    assert len(tick(lake, instance).run_requests) == 1


def _launched(instance, run_key: str, status: dg.DagsterRunStatus) -> dg.DagsterRun:
    """What the daemon does with a RunRequest: a run tagged with its key and sensor."""
    return instance.add_run(
        dg.DagsterRun(
            job_name="ingest_raw_events",
            status=status,
            tags={"dagster/run_key": run_key, "dagster/sensor_name": BACKLOG_SENSOR_NAME},
        )
    )


def _due_now(cursor: str) -> str:
    """The cursor as it will be once the retry's back-off has passed (time, simulated)."""
    state = BacklogCursor.parse(cursor)
    state.retry_at_ms = 0
    return state.dump()


def _stall_verdict(result) -> dg.AssetCheckEvaluation:
    (verdict,) = [
        e
        for e in result.asset_events
        if isinstance(e, dg.AssetCheckEvaluation) and e.check_name == STALL_CHECK
    ]
    return verdict


def test_a_failed_run_is_retried_under_new_keys_with_growing_back_off(lake, instance):
    produce(lake.settings, 10, seed=4)
    result = tick(lake, instance)
    keys, waits = [], []
    reported = False
    for _ in range(MAX_IMMEDIATE_ATTEMPTS + 2):
        (request,) = result.run_requests
        keys.append(request.run_key)
        _launched(instance, request.run_key, dg.DagsterRunStatus.FAILURE)
        waiting = tick(lake, instance, cursor=result.cursor)
        state = BacklogCursor.parse(waiting.cursor)
        waits.append(state.retry_at_ms - int(time.time() * 1000))
        if waiting.run_requests:
            result = waiting
            continue
        # Not given up: the operator is told why and when, and the retry comes later.
        assert "failed" in waiting.skip_reason.skip_message
        assert "retrying" in waiting.skip_reason.skip_message
        verdicts = [e for e in waiting.asset_events if e.asset_key == dg.AssetKey("raw_events")]
        if not reported:  # the failing verdict is emitted once, when it changes
            verdict = _stall_verdict(waiting)
            assert not verdict.passed
            assert verdict.severity == dg.AssetCheckSeverity.ERROR
            reported = True
        else:
            assert all(v.check_name != STALL_CHECK for v in verdicts)
        result = tick(lake, instance, cursor=_due_now(waiting.cursor))

    base = backlog_run_key(lake.settings.stream_name, {})
    assert keys == [base] + [f"{base}:retry{n}" for n in range(1, len(keys))]
    # Immediate retries first, then a back-off that grows with every failed run.
    delayed = waits[MAX_IMMEDIATE_ATTEMPTS - 1 :]
    assert all(w <= 0 for w in waits[: MAX_IMMEDIATE_ATTEMPTS - 1])
    assert delayed[0] > 0 and delayed[1] > delayed[0]


def test_a_run_that_succeeds_without_moving_positions_is_reported_and_retried(lake, instance):
    produce(lake.settings, 10, seed=5)
    first = tick(lake, instance)
    (request,) = first.run_requests
    stuck = _launched(instance, request.run_key, dg.DagsterRunStatus.SUCCESS)

    waiting = tick(lake, instance, cursor=first.cursor)

    assert waiting.run_requests == []
    message = waiting.skip_reason.skip_message
    assert stuck.run_id in message and "did not move" in message
    verdict = _stall_verdict(waiting)
    assert not verdict.passed
    assert stuck.run_id in verdict.description
    # The daemon records these events; they must be valid for this instance and graph.
    for event in waiting.asset_events:
        instance.report_runless_asset_event(event)

    retried = tick(lake, instance, cursor=_due_now(waiting.cursor))
    (retry,) = retried.run_requests
    assert retry.run_key == f"{request.run_key}:retry1"

    # Once the positions move, the verdict turns back to passing.
    commit_as_the_sink_does(lake, stream_records(lake))
    recovered = tick(lake, instance, cursor=retried.cursor)
    assert recovered.run_requests == []
    assert _stall_verdict(recovered).passed


def test_the_stream_is_recorded_when_due_or_changed_not_every_tick(lake, instance):
    first = tick(lake, instance)
    assert len(first.asset_events) == 2
    quiet = tick(lake, instance, cursor=first.cursor)
    assert quiet.asset_events == []

    produce(lake.settings, 5, seed=6)
    changed = tick(lake, instance, cursor=quiet.cursor)
    assert [e.asset_key.to_user_string() for e in changed.asset_events] == [
        "kinesis_stream",
        "raw_events",
    ]

    stale_cursor = BacklogCursor.parse(changed.cursor)
    stale_cursor.observed_at_ms -= 6 * 60 * 1000
    due = tick(lake, instance, cursor=stale_cursor.dump())
    assert len(due.asset_events) == 2


def test_unreadable_cursor_starts_over(lake, instance):
    assert tick(lake, instance, cursor="not json").skip_reason is not None


def test_old_unconsumed_records_fail_freshness_in_the_observation(lake, instance, monkeypatch):
    produce(lake.settings, 5, seed=7)
    time.sleep(1.1)  # older than the allowed 0 minutes, whatever the arrival-time rounding
    strict = lake.rebuild(monkeypatch, KINESIS_LAKE_FRESHNESS_MINUTES="0")
    result = tick(strict, instance)
    freshness = result.asset_events[1]
    assert not freshness.passed
    assert freshness.metadata["oldest_unconsumed_age_seconds"].value >= 0
    assert "Stale" in freshness.description


@pytest.mark.parametrize(
    "change", [{"stream_name": "other"}, {"endpoint_url": "http://127.0.0.1:1"}]
)
def test_a_kinesis_resource_on_another_stream_is_refused(lake, instance, change):
    kinesis = {
        "stream_name": lake.settings.stream_name,
        "endpoint_url": lake.settings.endpoint_url,
        "region_name": lake.settings.region,
        **change,
    }
    resources = {**lake.resources, "kinesis": KinesisResource(**kinesis)}
    with (
        dg.build_sensor_context(instance=instance, resources=resources) as context,
        pytest.raises(SettingsError, match="pipeline settings target"),
    ):
        kinesis_backlog_sensor(context)


def test_each_declared_stream_has_a_sensor_that_watches_only_its_own_stream(
    lake, instance, tmp_path
):
    """Two streams: a backlog on one launches that stream's ingest job, the other skips."""
    from kinesis_lake.defs.jobs import ingest_job_for
    from kinesis_lake.defs.sensors import backlog_sensor
    from kinesis_lake.defs.streams import StreamKeys
    from kinesis_lake.kinesis.streams import ensure_stream

    quiet, busy = f"{lake.settings.stream_name}-a", f"{lake.settings.stream_name}-b"
    for name in (quiet, busy):
        ensure_stream(lake.client, name, 1)
    lake.client.put_record(StreamName=busy, Data=b'{"id": 1}', PartitionKey="p")
    sensors = {
        name: backlog_sensor(keys, ingest_job_for(keys))
        for name, keys in ((quiet, StreamKeys(quiet, "raw_a")), (busy, StreamKeys(busy, "raw_b")))
    }

    results = {}
    for name, sensor in sensors.items():
        with dg.build_sensor_context(instance=instance, resources=lake.resources) as context:
            results[name] = sensor(context)

    assert "No backlog" in results[quiet].skip_reason.skip_message
    (request,) = results[busy].run_requests
    assert request.tags["kinesis_lake/stream"] == busy
    assert sensors[busy].job_name == "ingest_raw_b"
    observed = {e.asset_key.to_user_string() for e in results[busy].asset_events}
    assert observed == {"kinesis_b", "raw_b"}  # the stream's state and raw_b's freshness


_CHECK_FOR_LATEST = """
query { assetNodes(assetKeys: [{path: ["raw_events"]}]) { assetChecksOrError {
  ... on AssetChecks { checks { name executionForLatestMaterialization { status } } } } } }
"""


def test_a_tick_during_an_ingestion_run_leaves_the_runs_freshness_verdict_current(lake, instance):
    """The UI showed fresh_relative_to_stream "Not evaluated" while its history listed
    passes: the run plans its checks when it starts, the sensor recorded a verdict
    mid-run (a newer record), the run's materialization came after that verdict, and
    Dagster shows a check's newest record only if it follows the newest materialization.
    Here a stand-in for the ingestion asset lets the sensor tick mid-run, as the daemon
    does, and the UI's own GraphQL query says whether the check has a current verdict."""
    from dagster_graphql.test.utils import define_out_of_process_context, execute_dagster_graphql

    produce(lake.settings, 10, seed=5)

    @dg.asset(name="raw_events")
    def ingestion_stand_in() -> dg.MaterializeResult:
        for event in tick(lake, instance).asset_events:
            instance.report_runless_asset_event(event)  # what the daemon does with a tick
        return dg.MaterializeResult()

    @dg.asset_check(asset=ingestion_stand_in, name="fresh_relative_to_stream")
    def fresh_in_the_run() -> dg.AssetCheckResult:
        return dg.AssetCheckResult(passed=True)

    stand_in_job = dg.define_asset_job("ingest_raw_events", selection=[ingestion_stand_in])
    ran = (
        dg.Definitions(
            assets=[ingestion_stand_in], asset_checks=[fresh_in_the_run], jobs=[stand_in_job]
        )
        .resolve_job_def(stand_in_job.name)
        .execute_in_process(instance=instance)
    )
    assert ran.success

    definitions = str(Path(__file__).resolve().parents[2] / "kinesis_lake" / "definitions.py")
    with define_out_of_process_context(definitions, "defs", instance) as context:
        answer = execute_dagster_graphql(context, _CHECK_FOR_LATEST)
    (node,) = answer.data["assetNodes"]
    latest = {
        check["name"]: check["executionForLatestMaterialization"]
        for check in node["assetChecksOrError"]["checks"]
    }
    assert latest["fresh_relative_to_stream"] == {"status": "SUCCEEDED"}


def _freshness_verdicts(result) -> list[dg.AssetCheckEvaluation]:
    return [
        e
        for e in result.asset_events
        if isinstance(e, dg.AssetCheckEvaluation) and e.check_name == "fresh_relative_to_stream"
    ]


def test_a_run_stuck_past_the_freshness_budget_does_not_hide_a_stale_verdict(
    lake, instance, monkeypatch
):
    """A run in progress evaluates freshness itself when it ends, so the sensor held its
    verdict back; a run that never ends (a hung JVM, a lost worker) kept the check
    passing for as long as it hung. Past the freshness budget a stale verdict is shown."""
    produce(lake.settings, 5, seed=8)
    time.sleep(1.1)  # older than the allowed 0 minutes
    strict = lake.rebuild(monkeypatch, KINESIS_LAKE_FRESHNESS_MINUTES="0")
    instance.add_run(
        dg.DagsterRun(job_name="ingest_raw_events", status=dg.DagsterRunStatus.STARTED)
    )
    time.sleep(0.1)  # the run is older than the budget of 0 minutes

    result = tick(strict, instance)

    assert result.run_requests == []  # still one run at a time
    (verdict,) = _freshness_verdicts(result)
    assert not verdict.passed


def test_a_run_of_the_ingestion_job_s_checks_only_does_not_hold_ingestion_back(lake, instance):
    """Re-running a check from the UI launches the ingestion job with no assets selected;
    the sensor took it for a whole-job run that writes raw_events and waited for it."""
    produce(lake.settings, 10, seed=9)
    instance.add_run(
        dg.DagsterRun(
            job_name="ingest_raw_events",
            status=dg.DagsterRunStatus.STARTED,
            asset_selection=frozenset(),
            asset_check_selection=frozenset(
                {dg.AssetCheckKey(dg.AssetKey("raw_events"), "fresh_relative_to_stream")}
            ),
        )
    )

    assert len(tick(lake, instance).run_requests) == 1


def test_after_a_lingering_run_the_next_waits_one_automation_tick(lake, instance, monkeypatch):
    """Under a steady stream the next lingering run was launched seconds after the last
    ended, and a run in progress plans raw's blocking check, which holds the derived
    tables: they waited for a gap the sensor never left. The sensor now leaves one tick of
    the automation sensor (same interval, in whole daemon loops) plus a margin between two
    lingering runs."""
    lake = lake.rebuild(
        monkeypatch,
        KINESIS_LAKE_RUN_LINGER_SECONDS="30",
        KINESIS_LAKE_SENSOR_INTERVAL_SECONDS="1",
    )
    produce(lake.settings, 10, seed=51)
    _launched(instance, "an-earlier-backlog", dg.DagsterRunStatus.SUCCESS)

    held = tick(lake, instance)
    assert not held.run_requests
    assert "derived tables" in held.skip_reason.skip_message

    # The automation sensor's tick (1 s asked for: the daemon's 5 s loop) and the margin.
    time.sleep(daemon_tick_gap(1) + HANDOVER_MARGIN_S + 0.5)
    assert len(tick(lake, instance, cursor=held.cursor).run_requests) == 1


def test_without_lingering_a_backlog_is_launched_right_after_a_run(lake, instance):
    produce(lake.settings, 10, seed=52)
    _launched(instance, "an-earlier-backlog", dg.DagsterRunStatus.SUCCESS)
    assert len(tick(lake, instance).run_requests) == 1


def test_a_quiet_stream_is_read_to_its_tip_once_a_quarter_of_its_retention(lake, instance):
    """Issue 31 defect 3 (the sensor's half): without a backlog the sensor still launches a
    run when the shards were last read to their tip 6 h (of 24 h retention) ago, since
    only a run's read records that the stream was quiet; one per stale read, retried with
    back-off when it fails."""
    produce(lake.settings, 10, seed=21)
    positions = commit_as_the_sink_does(lake, stream_records(lake))
    recent = tick(lake, instance)
    assert recent.run_requests == [] and "No backlog" in recent.skip_reason.skip_message

    read_ms = record_reads_to_the_tip(lake, positions, hours_ago=6.1)
    stale = tick(lake, instance, cursor=recent.cursor)
    (request,) = stale.run_requests
    assert request.run_key == quiet_run_key(lake.settings.stream_name, positions, read_ms)
    assert "6.1 h ago" in request.tags["kinesis_lake/reason"]

    for attempt in range(MAX_IMMEDIATE_ATTEMPTS):
        _launched(instance, attempt_run_key(request.run_key, attempt), dg.DagsterRunStatus.FAILURE)
        if attempt + 1 < MAX_IMMEDIATE_ATTEMPTS:  # a failed run is retried at once first
            (retry,) = tick(lake, instance).run_requests
            assert retry.run_key == attempt_run_key(request.run_key, attempt + 1)
    backing_off = tick(lake, instance)
    assert backing_off.run_requests == []
    assert "next attempt in" in backing_off.skip_reason.skip_message

    record_reads_to_the_tip(lake, positions, hours_ago=0)  # a run read the shards again
    assert tick(lake, instance).run_requests == []


def test_records_before_the_configured_start_are_not_backlog(lake, instance, monkeypatch):
    """Issue 31 a: a shard without a committed position was probed from its oldest record,
    so with at_timestamp or latest the records before the start were a backlog that no
    run would ever commit, until they expired: runs committing nothing, ingestion_advances
    and freshness failing for up to a day."""
    produce(lake.settings, 10, seed=41)
    start = lake.rebuild(
        monkeypatch,
        KINESIS_STARTING_POSITION="at_timestamp",
        KINESIS_STARTING_TIMESTAMP=str(int(time.time() * 1000) + 1000),
    )
    time.sleep(1.5)  # records put from now on arrive after the configured start
    before = tick(start, instance)
    assert before.run_requests == [] and "No backlog" in before.skip_reason.skip_message
    produce(lake.settings, 3, seed=42)
    assert len(tick(start, instance, cursor=before.cursor).run_requests) == 1

    latest = lake.rebuild(monkeypatch, KINESIS_STARTING_POSITION="latest")
    shards = {record["ShardId"]: "" for record in stream_records(lake)}
    record_reads_to_the_tip(latest, shards)  # the first run pinned "latest" and read nothing
    after_the_first_run = tick(latest, instance)
    assert after_the_first_run.run_requests == []
    assert "No backlog" in after_the_first_run.skip_reason.skip_message
