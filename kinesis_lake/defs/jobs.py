"""Jobs and schedules: the named ways to run the assets.

* ``ingest_raw_events``: raw_events and its checks; what the backlog sensor launches.
* ``kinesis_lake_full``: every asset (ingest, derive, maintenance) and every check, in
  dependency order; for a manual "bring everything up to date" run.
* ``iceberg_maintenance``: the four maintenance assets, on an hourly schedule: a
  streaming writer's snapshot history must be expired routinely, or commits slow down.
"""

from __future__ import annotations

import dagster as dg

from kinesis_lake.defs.assets import KINESIS_STREAM, MAINTENANCE_GROUP, RAW_EVENTS

INGEST_JOB_NAME = "ingest_raw_events"
FULL_JOB_NAME = "kinesis_lake_full"
MAINTENANCE_JOB_NAME = "iceberg_maintenance"

ingest_job = dg.define_asset_job(
    INGEST_JOB_NAME,
    selection=dg.AssetSelection.assets(RAW_EVENTS),
    description="Drain the stream's backlog into raw_events, then run its checks.",
)

full_job = dg.define_asset_job(
    FULL_JOB_NAME,
    selection=dg.AssetSelection.all() - dg.AssetSelection.assets(KINESIS_STREAM),
    description="Every asset and check: ingest, derive, maintain.",
)

maintenance_job = dg.define_asset_job(
    MAINTENANCE_JOB_NAME,
    selection=dg.AssetSelection.groups(MAINTENANCE_GROUP),
    description="Compact, expire snapshots and remove orphan files on every table.",
)

maintenance_schedule = dg.ScheduleDefinition(
    name="iceberg_maintenance_hourly",
    cron_schedule="17 * * * *",
    target=maintenance_job,
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description=(
        "Hourly upkeep. Snapshot expiry keeps commit latency flat (it grows with history); "
        "compaction keeps scans fast; orphan removal reclaims files of failed batches."
    ),
)

jobs = [ingest_job, full_job, maintenance_job]
schedules = [maintenance_schedule]
