"""The lake's ``dg.Definitions``, built from its settings and its declaration file."""

from __future__ import annotations

import dagster as dg

from kinesis_lake.config import Settings
from kinesis_lake.defs.assets import (
    derived_tables_asset,
    maintenance_assets,
    raw_asset,
    stream_spec,
)
from kinesis_lake.defs.checks import all_checks
from kinesis_lake.defs.jobs import lake_jobs, schedules
from kinesis_lake.defs.resources import lake_resources
from kinesis_lake.defs.sensors import lake_sensors
from kinesis_lake.defs.streams import stream_keys
from kinesis_lake.events.declaration import load_declaration


def build_definitions(settings: Settings) -> dg.Definitions:
    """The lake ``settings`` declare: one asset per table of the declaration file, its
    generated checks, and the stream, raw table, sensors and schedules around them.

    The declaration is read here, when Dagster loads the code, so an error in it stops the
    load (and ``dagster definitions validate``) with its file and line.
    """
    declaration = load_declaration(settings.event_schema_path)
    streams = stream_keys(settings, declaration)
    jobs = lake_jobs(streams)
    return dg.Definitions(
        assets=[
            *(stream_spec(keys) for keys in streams),
            *(raw_asset(keys) for keys in streams),
            derived_tables_asset(declaration, settings.namespace, streams),
            *maintenance_assets(declaration, settings.raw_table_name),
        ],
        asset_checks=all_checks(declaration, streams),
        jobs=list(jobs.values()),
        schedules=schedules,
        sensors=lake_sensors(streams, jobs),
        resources=lake_resources(),
    )
