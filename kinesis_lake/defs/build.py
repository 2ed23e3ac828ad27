"""The lake's ``dg.Definitions``, built from its settings and its declaration file."""

from __future__ import annotations

import dagster as dg

from kinesis_lake.config import Settings
from kinesis_lake.defs.assets import (
    derived_tables_asset,
    kinesis_stream,
    maintenance_assets,
    raw_events,
)
from kinesis_lake.defs.checks import all_checks
from kinesis_lake.defs.jobs import jobs, schedules
from kinesis_lake.defs.resources import lake_resources
from kinesis_lake.defs.sensors import sensors
from kinesis_lake.events.declaration import load_declaration


def build_definitions(settings: Settings) -> dg.Definitions:
    """The lake ``settings`` declare: one asset per table of the declaration file, its
    generated checks, and the stream, raw table, sensors and schedules around them.

    The declaration is read here, when Dagster loads the code, so an error in it stops the
    load (and ``dagster definitions validate``) with its file and line.
    """
    declaration = load_declaration(settings.event_schema_path)
    return dg.Definitions(
        assets=[
            kinesis_stream,
            raw_events,
            derived_tables_asset(declaration, settings.namespace),
            *maintenance_assets(declaration),
        ],
        asset_checks=all_checks(declaration),
        jobs=jobs,
        schedules=schedules,
        sensors=sensors,
        resources=lake_resources(),
    )
