"""The one ``dg.Definitions`` of kinesis-lake (``dagster dev -w workspace.yaml``).

Resources are built from the environment when this module is imported: variables that
are set become ``dg.EnvVar``s (resolved again in every run and sensor tick), the rest
take ``Settings``' defaults. See ``kinesis_lake.defs`` for what each part does.
"""

from __future__ import annotations

import dagster as dg

from kinesis_lake.defs.assets import maintenance_assets, pipeline_assets
from kinesis_lake.defs.checks import all_checks
from kinesis_lake.defs.jobs import jobs, schedules
from kinesis_lake.defs.resources import lake_resources
from kinesis_lake.defs.sensors import sensors

defs = dg.Definitions(
    assets=[*pipeline_assets, *maintenance_assets],
    asset_checks=all_checks,
    jobs=jobs,
    schedules=schedules,
    sensors=sensors,
    resources=lake_resources(),
)
