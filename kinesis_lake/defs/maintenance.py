"""Table upkeep: a job of ops on a schedule (hourly unless KINESIS_LAKE_MAINTENANCE_CRON
says otherwise), one op per table of the lake.

Upkeep is not data: compaction and snapshot expiry change files, never rows. As assets
they were part of every "Materialize all" in the UI (minutes of compaction for no new
rows) and of the asset graph a user reads the lake from. As ops they run only on their
schedule or when launched by hand, and each records what it did on its table's own page
as an asset observation (files, bytes and snapshots before/after; numeric, so plotted).
"""

import dataclasses

import dagster as dg
from pydantic import Field

from kinesis_lake.config import SettingsError
from kinesis_lake.defs.resources import PipelineSettingsResource
from kinesis_lake.events.declaration import RAW_TABLE, LakeDeclaration
from kinesis_lake.pipeline.lake import load_table, open_lake
from kinesis_lake.pipeline.maintain import MaintenancePolicy, consumers, run_maintenance

MAINTENANCE_JOB_NAME = "iceberg_maintenance"
MAINTENANCE_SCHEDULE_NAME = "iceberg_maintenance_schedule"
MAINTENANCE_POOL = "kinesis_lake_maintenance"


class MaintenanceConfig(dg.Config):
    """How aggressive one upkeep pass is; the defaults suit a table committed every minute."""

    snapshot_max_age_hours: float | None = Field(
        default=None,
        description=(
            "Expire snapshots older than this (time travel reaches this far back); None: the "
            "table's history.expire.max-snapshot-age-ms (raw tables: 1 h), else 24 h. "
            "Snapshots a downstream table has not processed yet are never expired."
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

    def policy(self) -> MaintenancePolicy:
        return MaintenancePolicy(**self.model_dump())


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
        if load_table(open_lake(lake), lake.table_identifier(table)) is None:
            context.log.info(f"{table} does not exist yet: nothing to maintain.")
            return
        done = run_maintenance(lake, table, config.policy())
        context.log.info(
            f"{done.table}: files {done.files_before} -> {done.files_after}, snapshots "
            f"{done.snapshots_before} -> {done.snapshots_after}, {done.orphans_removed} "
            "orphans removed"
        )
        metadata = dataclasses.asdict(done)
        if owner is not None:
            metadata = {f"tombstones_{key}": value for key, value in metadata.items()}
        yield dg.AssetObservation(
            asset_key=dg.AssetKey(owner or table),
            description=f"maintenance of {table}: compaction, snapshot expiry, orphan removal",
            metadata=metadata,
        )

    return maintain


def maintenance_job(declaration: LakeDeclaration, raw_table: str = RAW_TABLE) -> dg.JobDefinition:
    """One upkeep op per table of the lake (raw, declared, fixed and tombstones alike)."""
    owners = {spec.tombstones: spec.name for spec in declaration.derived if spec.upsert}
    ops = [maintenance_op(table, owners.get(table)) for table in consumers(declaration, raw_table)]

    @dg.job(
        name=MAINTENANCE_JOB_NAME,
        description="Compact, expire snapshots and remove orphan files on every table.",
    )
    def iceberg_maintenance() -> None:
        for op in ops:
            op()

    return iceberg_maintenance


def maintenance_schedule(job: dg.JobDefinition, cron: str) -> dg.ScheduleDefinition:
    """Upkeep on ``cron`` (KINESIS_LAKE_MAINTENANCE_CRON); refused at load, naming the
    setting, when Dagster cannot read it."""
    try:
        return dg.ScheduleDefinition(
            name=MAINTENANCE_SCHEDULE_NAME,
            cron_schedule=cron,
            target=job,
            default_status=dg.DefaultScheduleStatus.RUNNING,
            description=(
                f"Upkeep on '{cron}' (KINESIS_LAKE_MAINTENANCE_CRON). Snapshot expiry keeps "
                "commit latency flat (it grows with history); compaction keeps scans fast; "
                "orphan removal reclaims files of failed batches."
            ),
        )
    except dg.DagsterInvalidDefinitionError:
        raise SettingsError(
            f"KINESIS_LAKE_MAINTENANCE_CRON={cron!r} is not a cron schedule Dagster reads: use "
            "five fields, such as '17 * * * *' (hourly) or '*/5 * * * *'."
        ) from None
