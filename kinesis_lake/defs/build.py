"""The lake's ``dg.Definitions``, built from its settings and its declaration file."""

from __future__ import annotations

import dagster as dg

from kinesis_lake.config import Settings
from kinesis_lake.defs.checks import all_checks
from kinesis_lake.defs.derived_assets import derived_tables_asset
from kinesis_lake.defs.jobs import lake_jobs
from kinesis_lake.defs.launch import LaunchResource, launched
from kinesis_lake.defs.maintenance import maintenance_job, maintenance_schedule
from kinesis_lake.defs.raw_assets import raw_asset
from kinesis_lake.defs.resources import lake_resources
from kinesis_lake.defs.sensors import lake_sensors
from kinesis_lake.defs.streams import stream_asset, stream_keys
from kinesis_lake.events.declaration_file import load_declaration


def build_definitions(settings: Settings) -> dg.Definitions:
    """The lake ``settings`` declare: one asset per table of the declaration file, its
    generated checks, and the stream, raw table, sensors and schedules around them.

    The declaration is read here, when Dagster loads the code, so an error in it stops the
    load (and ``dagster definitions validate``) with its file and line.
    """
    declaration = load_declaration(settings.event_schema_path)
    streams = stream_keys(settings, declaration)
    upkeep = maintenance_job(declaration, settings.raw_table_name)
    jobs = lake_jobs(streams, upkeep, lingering=bool(settings.run_linger_seconds))
    return dg.Definitions(
        assets=[
            *(stream_asset(keys) for keys in streams),
            *(launched(raw_asset(keys), keys) for keys in streams),
            launched(derived_tables_asset(declaration, settings.namespace, streams)),
        ],
        asset_checks=all_checks(declaration, streams),
        jobs=list(jobs.values()),
        schedules=[maintenance_schedule(upkeep, settings.maintenance_cron)],
        sensors=lake_sensors(streams, jobs, settings.sensor_interval_seconds),
        resources={**lake_resources(), "launch": LaunchResource.from_env()},
        # One process per run, not per step: one Python start and one Spark driver for
        # the raw step, the derive step and every check (Dagster's default started each).
        executor=dg.in_process_executor,
    )
