"""Table upkeep: a job of ops on a schedule (hourly unless KINESIS_LAKE_MAINTENANCE_CRON
says otherwise), one op per table of the lake.

Upkeep never delays ingestion or the downstream tables: on a machine of a few cores its
compaction and its process took the cores a burst's run needed. So it runs between
waves: the schedule skips its tick while another run of the lake is queued or going, each
op gives way to one that starts meanwhile (the tables left are done next time), and the
job runs its ops one after another in one process. Unless upkeep was put off for longer
than ``MAX_DEFERRAL``: then it runs anyway, because snapshot history that is never
expired makes every commit slower.

Upkeep is not data: compaction and snapshot expiry change files, never rows. As assets
they were part of every "Materialize all" in the UI (minutes of compaction for no new
rows) and of the asset graph a user reads the lake from. As ops they run only on their
schedule or when launched by hand, and each records what it did on its table's own page
as an asset observation (files, bytes and snapshots before/after; numeric, so plotted).
"""

import dataclasses
import time
from datetime import timedelta
from typing import Any

import dagster as dg
from pydantic import Field

from kinesis_lake.config import SettingsError
from kinesis_lake.defs.resources import PipelineSettingsResource
from kinesis_lake.events.declaration import RAW_TABLE, LakeDeclaration
from kinesis_lake.pipeline.lake import load_table, open_lake
from kinesis_lake.pipeline.maintain import (
    MaintenancePass,
    MaintenancePolicy,
    consumers,
    run_maintenance,
)

MAINTENANCE_JOB_NAME = "iceberg_maintenance"
MAINTENANCE_SCHEDULE_NAME = "iceberg_maintenance_schedule"
MAINTENANCE_POOL = "kinesis_lake_maintenance"

MAX_DEFERRAL = timedelta(hours=1)
"""Upkeep waits for a quiet moment at most this long after its last completed run."""

_WAITING_OR_GOING = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
]


def lake_busy(instance: dg.DagsterInstance) -> dg.DagsterRun | None:
    """A run of the lake other than upkeep that is queued or going (ingestion, a derive
    run), if any."""
    records = instance.get_run_records(dg.RunsFilter(statuses=_WAITING_OR_GOING), limit=50)
    for record in records:
        if record.dagster_run.job_name != MAINTENANCE_JOB_NAME:
            return record.dagster_run
    return None


def _put_off_for(instance: dg.DagsterInstance) -> timedelta:
    """How long upkeep has waited: since its last successful run ended, or, before its
    first, since the lake's first run (a new lake's history needs no upkeep yet)."""
    records = instance.get_run_records(
        dg.RunsFilter(job_name=MAINTENANCE_JOB_NAME, statuses=[dg.DagsterRunStatus.SUCCESS]),
        limit=1,
    )
    if records:
        since = records[0].end_time or records[0].update_timestamp.timestamp()
    else:
        first = instance.get_run_records(limit=1, ascending=True)
        since = first[0].create_timestamp.timestamp() if first else time.time()
    return timedelta(seconds=max(0.0, time.time() - since))


class MaintenanceConfig(dg.Config):
    """How aggressive one upkeep pass is; the defaults suit a table committed every minute."""

    snapshot_max_age_hours: float | None = Field(
        default=None,
        description=(
            "Expire snapshots older than this (time travel reaches this far back); None: the "
            "table's history.expire.max-snapshot-age-ms (raw tables: 1 h), else 24 h. "
            "Snapshots a downstream table has not processed yet are never expired, nor any "
            "until each declared downstream table had its first refresh."
        ),
    )
    retain_last_snapshots: int | None = Field(
        default=None,
        description=(
            "Always keep this many recent snapshots; None: the table's "
            "history.expire.min-snapshots-to-keep, else 100."
        ),
    )
    orphan_min_age_hours: float = Field(
        default=MaintenancePolicy.orphan_min_age_hours,
        description=(
            "Only delete unreferenced files older than this: a file of a commit still in flight "
            "is unreferenced too (Iceberg's own default is 3 days)."
        ),
    )
    target_file_size_bytes: int | None = Field(
        default=None,
        description="Compaction target; None: the table's write.target-file-size-bytes or 128 MiB.",
    )
    min_input_files: int = Field(
        default=MaintenancePolicy.min_input_files,
        description="Compact a partition once it has this many small files.",
    )
    give_way: bool = Field(
        default=True,
        description=(
            "Skip this table when another run of the lake (ingestion, derive) is queued or "
            "going: upkeep never delays them. The schedule sets it to false once upkeep was "
            "put off for longer than an hour."
        ),
    )

    def policy(self) -> MaintenancePolicy:
        return MaintenancePolicy(**self.model_dump(exclude={"give_way"}))


def maintenance_op(table: str, owner: str | None = None) -> dg.OpDefinition:
    """Upkeep of ``table``; nothing to do while the table does not exist yet. A table
    that is no asset of its own (an upsert table's tombstones) is reported on its
    ``owner``'s asset, its numbers prefixed ``tombstones_``."""

    @dg.op(
        name=f"maintain_{table}",
        out={},  # it yields an observation of the table, no output
        pool=MAINTENANCE_POOL,
        description=(
            f"Upkeep of the {table} table: compact small files, expire old snapshots (never "
            "one a downstream table still needs), delete orphan files. Rows never change."
        ),
    )
    def maintain(
        context: dg.OpExecutionContext,
        config: MaintenanceConfig,
        settings: PipelineSettingsResource,
    ):
        lake = settings.settings()
        busy = lake_busy(context.instance) if config.give_way else None
        if busy is not None:
            context.log.info(
                f"{table}: left for the next upkeep; run {busy.run_id} ({busy.job_name}) "
                "is under way and upkeep never delays it."
            )
            return
        if load_table(open_lake(lake), lake.table_identifier(table)) is None:
            context.log.info(f"{table} does not exist yet: nothing to maintain.")
            return
        done = run_maintenance(lake, table, config.policy())
        context.log.info(
            f"{done.table}: files {done.files_before} -> {done.files_after}, snapshots "
            f"{done.snapshots_before} -> {done.snapshots_after}, {done.orphans_removed} "
            "orphans removed"
        )
        yield dg.AssetObservation(
            asset_key=dg.AssetKey(owner or table),
            description=f"maintenance of {table}: compaction, snapshot expiry, orphan removal",
            metadata=upkeep_metadata(done, owner),
        )

    return maintain


def upkeep_metadata(done: MaintenancePass, owner: str | None) -> dict[str, Any]:
    """One pass's numbers as its observation's metadata, prefixed ``tombstones_`` when
    reported on the upsert table that ``owner`` names.

    No key may be one a commit's materialization has: Dagster plots a key across a table's
    materializations and observations alike, so the pass's duration, under the commits'
    ``seconds``, was plotted among them as a commit that never happened."""
    metadata = dataclasses.asdict(done)
    metadata["maintenance_seconds"] = metadata.pop("seconds")
    if owner is not None:
        metadata = {f"tombstones_{key}": value for key, value in metadata.items()}
    return metadata


def maintenance_job(declaration: LakeDeclaration, raw_table: str = RAW_TABLE) -> dg.JobDefinition:
    """One upkeep op per table of the lake (raw, declared, fixed and tombstones alike)."""
    owners = {spec.tombstones: spec.name for spec in declaration.derived if spec.upsert}
    ops = [maintenance_op(table, owners.get(table)) for table in consumers(declaration, raw_table)]

    @dg.job(
        name=MAINTENANCE_JOB_NAME,
        description=(
            "Compact, expire snapshots and remove orphan files on every table, one after "
            "another in one process, giving way to ingestion and derive runs."
        ),
        executor_def=dg.in_process_executor,
    )
    def iceberg_maintenance() -> None:
        for op in ops:
            op()

    return iceberg_maintenance


def maintenance_schedule(job: dg.JobDefinition, cron: str) -> dg.ScheduleDefinition:
    """Upkeep on ``cron`` (KINESIS_LAKE_MAINTENANCE_CRON); refused at load, naming the
    setting, when Dagster cannot read it."""
    ops = [node.name for node in job.nodes]

    def upkeep(context: dg.ScheduleEvaluationContext) -> dg.RunRequest | dg.SkipReason:
        busy = lake_busy(context.instance)
        overdue = _put_off_for(context.instance) > MAX_DEFERRAL
        if busy is not None and not overdue:
            return dg.SkipReason(
                f"Run {busy.run_id} ({busy.job_name}) is under way: upkeep waits for the next "
                "tick between waves (it never delays ingestion or derive)."
            )
        config = {"ops": {op: {"config": {"give_way": not overdue}} for op in ops}}
        return dg.RunRequest(run_config=config)

    try:
        return dg.ScheduleDefinition(
            name=MAINTENANCE_SCHEDULE_NAME,
            cron_schedule=cron,
            job=job,
            execution_fn=upkeep,
            default_status=dg.DefaultScheduleStatus.RUNNING,
            description=(
                f"Upkeep on '{cron}' (KINESIS_LAKE_MAINTENANCE_CRON), skipped while ingestion "
                "or derive is under way unless put off for over an hour. Snapshot expiry "
                "keeps commit latency flat (it grows with history); compaction keeps scans "
                "fast; orphan removal reclaims files of failed batches."
            ),
        )
    except dg.DagsterInvalidDefinitionError:
        raise SettingsError(
            f"KINESIS_LAKE_MAINTENANCE_CRON={cron!r} is not a cron schedule Dagster reads: use "
            "five fields, such as '17 * * * *' (hourly) or '*/5 * * * *'."
        ) from None
