"""Sensors: ingest when the stream has a backlog, and record the stream's state.

The backlog sensor is the only thing that launches ``raw_events`` automatically. A tick
makes only cheap calls (it has 60 s): the raw table's latest snapshot summary for the
committed positions (metadata, no data files), then ``probe_backlog`` (ListShards,
DescribeStreamSummary, and one GetShardIterator + one GetRecords(Limit=1) per shard).

* Backlog: one ``RunRequest`` of ``ingest_raw_events`` whose run key is derived from the
  stream and the committed positions, so one backlog is requested once however many
  ticks see it. If a run for it finishes and the positions have not moved (it failed, or
  it succeeded without committing anything), the same backlog is retried under a new,
  still deterministic key (``...:retry1``), with back-off and without end; while that
  lasts the ``ingestion_advances`` check of raw_events fails with the cause
  (:mod:`kinesis_lake.defs.backlog_runs`).
* No backlog, but the source last read the shards to their tip a quarter of the
  retention ago or more (by the server's clock): one ``RunRequest`` under a key derived
  from the positions and that read (``quiet-...``), retried with the same back-off. Only
  such a read lets the source tell a quiet stream from records that expired unread, so a
  stream quiet for longer than its retention is not reported as data loss
  (:func:`_quiet_stream_run`).
* No backlog, or a run that includes raw_events already queued or in progress: a
  ``SkipReason`` that says which.
* Every tick logs what it saw (the stream's shards, which of them hold a backlog and how
  old its oldest record is, where the raw table's commits stand) and what it decided (the
  run it requested and why, or why it skipped): the tick's "View logs" in the UI, where
  an operator reading the sensor's tick history otherwise finds "1 run requested" or a
  reason only on hover.
* Every few minutes, or as soon as it changes, the stream's state (shards, retention,
  backlog, age of the oldest unconsumed record) is recorded as a materialization of the
  external ``kinesis_stream`` asset, with an evaluation of the raw freshness check; the
  stream's freshness policy turns a stopped sensor into a visible stale asset.

The cursor is JSON: ``{"backlog": <run key base>, "attempt": finished runs for it,
"retry_at_ms": .., "stalled": .., "observed_at_ms": .., "stream_state": ..}``.
"""

import json
import math
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import dagster as dg

if TYPE_CHECKING:  # the type define_asset_job returns; dagster does not export it
    from dagster._core.definitions.unresolved_asset_job_definition import (
        UnresolvedAssetJobDefinition,
    )

from kinesis_lake.config import Settings
from kinesis_lake.defs.backlog_runs import (
    attempt_run_key,
    backlog_history,
    backlog_run_key,
    quiet_run_key,
)
from kinesis_lake.defs.jobs import DERIVE_RUN_NAME, FULL_JOB_NAME, RUN_NAME_TAG, ingest_job
from kinesis_lake.defs.raw_checks import FRESHNESS_CHECK, STALL_CHECK
from kinesis_lake.defs.resources import KinesisResource, PipelineSettingsResource
from kinesis_lake.defs.streams import (
    DEFAULT_STREAM,
    STREAM_OBSERVATION_INTERVAL,
    StreamKeys,
    freshness_outcome,
    stream_metadata,
)
from kinesis_lake.kinesis.backlog import BacklogProbe
from kinesis_lake.kinesis.freshness import StreamFreshness, shards_label
from kinesis_lake.pipeline.backlog import lake_freshness
from kinesis_lake.pipeline.data_loss import quiet_proof
from kinesis_lake.pipeline.lake import CommittedPositions, raw_positions

AUTOMATION_SENSOR_NAME = "kinesis_lake_automation"

IN_PROGRESS = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.CANCELING,
]

FINISHED = [
    dg.DagsterRunStatus.SUCCESS,
    dg.DagsterRunStatus.FAILURE,
    dg.DagsterRunStatus.CANCELED,
]

HANDOVER_MARGIN_S = 2
"""Seconds, beyond one automation tick, between two lingering runs of a stream."""


@dataclass
class BacklogCursor:
    backlog: str | None = None
    attempt: int = 0
    retry_at_ms: int | None = None
    stalled: bool = False
    observed_at_ms: int | None = None
    stream_state: str | None = None

    @classmethod
    def parse(cls, raw: str | None) -> "BacklogCursor":
        if not raw:
            return cls()
        try:
            data = json.loads(raw)
        except ValueError:
            return cls()  # a cursor from an older version: start over, nothing is lost
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)

    def dump(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def ingestion_in_progress(
    instance: dg.DagsterInstance, keys: StreamKeys = DEFAULT_STREAM
) -> dg.RunRecord | None:
    """A queued or running run that will write the stream's raw table, if any."""
    raw = keys.raw_asset
    for record in instance.get_run_records(dg.RunsFilter(statuses=IN_PROGRESS), limit=200):
        run = record.dagster_run
        selection = run.asset_selection
        # No asset selection, or an empty one without a check selection (how an
        # in-process execution records it), is the whole job; an empty one with checks
        # selected is a run of the job's checks only (launched from the UI): no writes.
        whole_job = selection is None or (not selection and run.asset_check_selection is None)
        if whole_job and run.job_name in (keys.ingest_job_name, FULL_JOB_NAME):
            return record
        if selection is not None and raw in selection:
            return record
    return None


def ingestion_ended_s_ago(instance: dg.DagsterInstance, keys: StreamKeys) -> float | None:
    """Seconds since the stream's last ingestion run ended (None: none has)."""
    records = instance.get_run_records(
        dg.RunsFilter(job_name=keys.ingest_job_name, statuses=FINISHED), limit=1
    )
    if not records:
        return None
    ended = records[0].end_time or records[0].update_timestamp.timestamp()
    return time.time() - ended


def _in_progress_for_s(record: dg.RunRecord) -> float:
    started = record.start_time or record.create_timestamp.timestamp()
    return time.time() - started


def _stall_verdict(
    cursor: BacklogCursor, stall: str | None, keys: StreamKeys = DEFAULT_STREAM
) -> list[dg.AssetMaterialization | dg.AssetCheckEvaluation]:
    """The ingestion_advances verdict, emitted when it changes (not on every tick)."""
    stalled = stall is not None
    if stalled == cursor.stalled:
        return []
    cursor.stalled = stalled
    return [
        dg.AssetCheckEvaluation(
            asset_key=keys.raw_asset,
            check_name=STALL_CHECK,
            passed=not stalled,
            severity=dg.AssetCheckSeverity.ERROR,
            description=stall or "Ingestion advances: the committed positions moved.",
        )
    ]


def _stream_state(fresh: StreamFreshness) -> str:
    probe = fresh.probe
    return json.dumps(
        [probe.shards, sorted(probe.shards_with_backlog), probe.retention_hours, fresh.passed]
    )


def stream_observation(
    fresh: StreamFreshness, positions_snapshot_id: int | None, keys: StreamKeys = DEFAULT_STREAM
) -> list[dg.AssetMaterialization | dg.AssetCheckEvaluation]:
    """The stream's state as a kinesis_stream materialization, plus the freshness verdict."""
    probe = fresh.probe
    metadata = stream_metadata(fresh, positions_snapshot_id)
    passed, check_metadata, description = freshness_outcome(fresh)
    return [
        dg.AssetMaterialization(
            asset_key=keys.stream_asset,
            description=(
                f"{probe.shards} shards, backlog on {shards_label(probe.shards_with_backlog)}"
            ),
            metadata=metadata,
        ),
        dg.AssetCheckEvaluation(
            asset_key=keys.raw_asset,
            check_name=FRESHNESS_CHECK,
            passed=passed,
            metadata=check_metadata,
            description=description,
        ),
    ]


DAEMON_LOOP_S = 5
"""Dagster's sensor daemon looks at the sensors once per loop of this many seconds
(``dagster._daemon.sensor.MIN_INTERVAL_LOOP_TIME``)."""


def daemon_tick_gap(interval_s: int) -> int:
    """Seconds between a sensor's ticks when ``interval_s`` is asked for: whole daemon
    loops, at least one."""
    return DAEMON_LOOP_S * max(1, math.ceil(interval_s / DAEMON_LOOP_S))


def daemon_interval(interval_s: int) -> int:
    """The ``minimum_interval_seconds`` that makes a sensor tick every
    :func:`daemon_tick_gap` seconds, never a loop later.

    The daemon ticks a sensor whose last tick is at least its minimum interval old; the
    last tick is stamped as the loop reaches it, a little after the loop began, so asked
    for a whole number of loops, a tick that is due is found a few ms short and waits a
    loop more. Benchmark 13's backlog sensor at 5 s ticked 5 or 10 s apart, 50 ticks in
    355 s (2026-12-06): one second less than the gap keeps it.
    """
    return daemon_tick_gap(interval_s) - 1


def backlog_sensor(
    keys: StreamKeys, job: "UnresolvedAssetJobDefinition", interval_s: int = 30
) -> dg.SensorDefinition:
    """The backlog sensor of one stream: it launches ``job`` (the stream's ingestion)."""

    @dg.sensor(
        name=keys.sensor_name,
        job=job,
        minimum_interval_seconds=daemon_interval(interval_s),
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=(
            f"Launches {job.name} when the Kinesis stream holds records past the "
            f"{keys.raw_table} table's committed positions (one run per backlog, never two at "
            "once) or was last read to its tip a quarter of its retention ago (so a quiet "
            f"stream is not data loss), and records the stream's state on "
            f"{keys.stream_asset.to_user_string()}."
        ),
    )
    def sensor(
        context: dg.SensorEvaluationContext,
        settings: PipelineSettingsResource,
        kinesis: KinesisResource,
    ) -> dg.SensorResult:
        return _tick(context, keys.lake(settings, kinesis), kinesis, keys)

    return sensor


def _tick(
    context: dg.SensorEvaluationContext,
    lake: Settings,
    kinesis: KinesisResource,
    keys: StreamKeys,
) -> dg.SensorResult:
    cursor = BacklogCursor.parse(context.cursor)
    stream = lake.stream_name
    committed = raw_positions(lake)
    fresh = lake_freshness(kinesis.get_client(), lake, committed.positions)
    probe = fresh.probe

    events: list[dg.AssetMaterialization | dg.AssetCheckEvaluation] = []
    now_ms = int(time.time() * 1000)
    state = _stream_state(fresh)
    due = (
        cursor.observed_at_ms is None
        or now_ms - cursor.observed_at_ms >= STREAM_OBSERVATION_INTERVAL.total_seconds() * 1000
    )
    in_progress = ingestion_in_progress(context.instance, keys)
    running = in_progress.dagster_run if in_progress is not None else None
    if due or state != cursor.stream_state:
        events = stream_observation(fresh, committed.snapshot_id, keys)
        # The run evaluates the check itself, after its materialization. A verdict
        # recorded now would judge the table before the run's commit (and, beside a check
        # a run planned at its start, make Dagster show "Not evaluated"). Unless the
        # lake is stale and the run has been going for longer than the freshness budget:
        # a run that hangs must not keep the check passing.
        if in_progress is not None and (
            fresh.passed or _in_progress_for_s(in_progress) <= lake.freshness_minutes * 60
        ):
            events = [e for e in events if not isinstance(e, dg.AssetCheckEvaluation)]
        cursor.observed_at_ms, cursor.stream_state = now_ms, state

    context.log.info(_what_it_saw(lake, keys, committed, fresh))

    def skip(reason: str) -> dg.SensorResult:
        context.log.info(f"Skipped: {reason}")
        return dg.SensorResult(skip_reason=reason, asset_events=events, cursor=cursor.dump())

    def request(run: dg.RunRequest, why: str) -> dg.SensorResult:
        context.log.info(f"Requested a run of {keys.ingest_job_name} ({run.run_key}): {why}.")
        return dg.SensorResult(run_requests=[run], asset_events=events, cursor=cursor.dump())

    if not probe.has_backlog:
        events += _stall_verdict(cursor, None, keys)
        quiet = _quiet_stream_run(context, lake, committed.positions, probe, running, keys)
        if isinstance(quiet, str):
            return skip(quiet)
        return request(quiet, quiet.tags["kinesis_lake/reason"])
    if running is not None:
        return skip(
            f"Backlog on {shards_label(probe.shards_with_backlog)}, but run "
            f"{running.run_id} ({running.job_name}) that writes {keys.raw_table} is "
            f"{running.status.value}: waiting for it."
        )

    if lake.run_linger_seconds:
        # A run in progress holds the derived tables' automation (raw is in progress);
        # under a steady stream lingering runs follow each other within seconds, so leave
        # the automation sensor one tick with raw idle between them, for a refresh a run's
        # follower left to it.
        hold_s = daemon_tick_gap(lake.sensor_interval_seconds) + HANDOVER_MARGIN_S
        ended_s_ago = ingestion_ended_s_ago(context.instance, keys)
        if ended_s_ago is not None and ended_s_ago < hold_s:
            return skip(
                f"Backlog on {shards_label(probe.shards_with_backlog)}; the last ingestion run "
                f"ended {ended_s_ago:.0f} s ago: the next starts {hold_s} s after it, so the "
                "derived tables' automation can start their refresh in between."
            )

    base = backlog_run_key(stream, committed.positions)
    history = backlog_history(context.instance, base, keys.sensor_name)
    stall = history.stall(probe.shards_with_backlog)
    events += _stall_verdict(cursor, stall, keys)
    if cursor.backlog != base or cursor.attempt != history.attempts:
        cursor.backlog, cursor.attempt = base, history.attempts
        cursor.retry_at_ms = history.next_attempt_at_ms()
    retry_at_ms = cursor.retry_at_ms or 0
    if now_ms < retry_at_ms:
        wait = (retry_at_ms - now_ms) / 1000
        reason = stall or "Ingestion of this backlog is backing off."
        return skip(f"{reason} Next attempt in {wait:.0f} s.")
    run_key = attempt_run_key(base, history.attempts)
    age = fresh.oldest_unconsumed_age_seconds or 0.0
    run = dg.RunRequest(
        run_key=run_key,
        tags={
            "kinesis_lake/stream": stream,
            "kinesis_lake/backlog_shards": ",".join(probe.shards_with_backlog),
            "kinesis_lake/oldest_unconsumed_age_seconds": f"{age:.0f}",
        },
    )
    retry = f", attempt {history.attempts + 1} at it" if history.attempts else ""
    return request(run, f"backlog on {shards_label(probe.shards_with_backlog)}{retry}")


def _what_it_saw(
    lake: Settings, keys: StreamKeys, committed: CommittedPositions, fresh: StreamFreshness
) -> str:
    """One line for the tick's log: the stream's backlog and where raw's commits stand."""
    probe = fresh.probe
    if probe.has_backlog:
        age = fresh.oldest_unconsumed_age_seconds
        oldest = f", its oldest record {age:.0f} s old" if age is not None else ""
        backlog = (
            f"backlog on {len(probe.shards_with_backlog)} of them "
            f"({shards_label(probe.shards_with_backlog)}){oldest}"
        )
    else:
        backlog = "no backlog"
    commits = (
        f"{keys.raw_table} holds positions of {len(committed.positions)} shard(s), committed "
        f"in snapshot {committed.snapshot_id}"
        if committed.snapshot_id is not None
        else f"{keys.raw_table} has no commit yet"
    )
    return (
        f"Stream {lake.stream_name}: {probe.shards} shards (retention {probe.retention_hours} "
        f"h), {backlog}; {commits}."
    )


def _quiet_stream_run(
    context: dg.SensorEvaluationContext,
    lake: Settings,
    positions: dict[str, str],
    probe: BacklogProbe,
    running: dg.DagsterRun | None,
    keys: StreamKeys,
) -> dg.RunRequest | str:
    """A run that reads a quiet stream to its tip, when the last such read grows old; else
    why not (the skip reason).

    The source tells a quiet shard from records that expired unread only by when it last
    read the shard to its tip: after a quiet spell longer than the retention period, the
    first new record would otherwise fail every run with a false data-loss error. The
    probe's "nothing to ingest" is not that proof (the checkpoint does not see it), so a
    cheap run records it, every 1/KEEP_ALIVE_SHARE of the retention, by the server's clock.
    """
    no_backlog = f"No backlog: all {probe.shards} shards are committed up to their latest record."
    try:
        proof = quiet_proof(lake, positions)
    except OSError as error:
        return (
            f"{no_backlog} The source's progress could not be read ({error}): give the sensor "
            "read access to KINESIS_LAKE_SOURCE_PROGRESS_DIR, or a stream quiet for longer "
            "than its retention will be reported as data loss."
        )
    now_ms = int(time.time() * 1000)
    server_now_ms = probe.server_ms or now_ms
    if not proof.due(server_now_ms, probe.retention_hours):
        return no_backlog
    last_read = (
        "never read to their tip by this checkpoint"
        if proof.read_to_tip_ms is None
        else f"last read to their tip {(server_now_ms - proof.read_to_tip_ms) / 3.6e6:.1f} h ago"
    )
    if running is not None:
        return f"{no_backlog} The shards were {last_read}; run {running.run_id} will read them."
    base = quiet_run_key(lake.stream_name, positions, proof.read_to_tip_ms)
    history = backlog_history(context.instance, base, keys.sensor_name)
    wait_s = (history.next_attempt_at_ms() - now_ms) / 1000
    if wait_s > 0:
        return (
            f"{no_backlog} The shards were {last_read} and the run that reads them again "
            f"did not record it ({history.attempts} attempt(s)): open its logs; next attempt "
            f"in {wait_s:.0f} s."
        )
    return dg.RunRequest(
        run_key=attempt_run_key(base, history.attempts),
        tags={
            "kinesis_lake/stream": lake.stream_name,
            "kinesis_lake/reason": (
                f"quiet stream: shards {last_read} (retention {probe.retention_hours} h)"
            ),
        },
    )


kinesis_backlog_sensor = backlog_sensor(DEFAULT_STREAM, ingest_job)


def automation_sensor(interval_s: int = 30) -> dg.AutomationConditionSensorDefinition:
    """Evaluates the derived tables' automation as often as the backlog sensors tick: a
    lingering run's successor waits one such tick (``HANDOVER_MARGIN_S``)."""
    return dg.AutomationConditionSensorDefinition(
        AUTOMATION_SENSOR_NAME,
        target=dg.AssetSelection.all(),
        default_status=dg.DefaultSensorStatus.RUNNING,
        minimum_interval_seconds=daemon_interval(interval_s),
        run_tags={RUN_NAME_TAG: DERIVE_RUN_NAME},  # not just "__ASSET_JOB" in the Runs list
        description=(
            "Evaluates the assets' automation conditions: derived tables follow raw_events. "
            "Defined explicitly because the implicit one starts stopped."
        ),
    )


def lake_sensors(
    streams: list[StreamKeys], jobs: dict[str, Any], interval_s: int = 30
) -> list[dg.SensorDefinition]:
    """A backlog sensor per stream (launching its ingest job) and the automation sensor."""
    return [
        *(backlog_sensor(keys, jobs[keys.ingest_job_name], interval_s) for keys in streams),
        automation_sensor(interval_s),
    ]
