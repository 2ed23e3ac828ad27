"""The one ``dg.Definitions`` of kinesis-lake (``dagster dev -w workspace.yaml``).

Resources are built from the environment when this module is imported: variables that
are set become ``dg.EnvVar``s (resolved again in every run and sensor tick), the rest
take ``Settings``' defaults. See ``kinesis_lake.defs`` for what each part does.
"""

from __future__ import annotations

from kinesis_lake.config import Settings
from kinesis_lake.defs.build import build_definitions

defs = build_definitions(Settings.from_env())
