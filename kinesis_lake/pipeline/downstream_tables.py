"""The tables one refresh of the lake writes, by role, created or evolved before any is written.

Every routed table of the declaration, the quarantine and the per-minute counts are ensured
together, so a refresh (or a replay) never writes a table whose schema lags the declaration
it routes by.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyiceberg.table import Table

from kinesis_lake.config import Settings
from kinesis_lake.events.declaration import LakeDeclaration
from kinesis_lake.events.tables import (
    aggregate_partition_spec,
    aggregate_table_schema,
    quarantine_partition_spec,
    quarantine_table_schema,
)
from kinesis_lake.iceberg.tables import ensure_table
from kinesis_lake.pipeline.lake import open_lake
from kinesis_lake.pipeline.routed_tables import ensure_routed_table


@dataclass(frozen=True)
class DownstreamTables:
    """The loaded tables one refresh writes, by role."""

    routed: dict[str, Table]
    quarantine: Table
    aggregate: Table


def ensure_downstream_tables(settings: Settings, declaration: LakeDeclaration) -> DownstreamTables:
    """Create or evolve every routed table, the quarantine and the aggregate."""
    catalog = open_lake(settings)
    routed = {}
    for table in declaration.tables:
        identifier = settings.table_identifier(table.name)
        routed[table.name] = ensure_routed_table(catalog, identifier, table)
    quarantine_schema = quarantine_table_schema()
    aggregate_schema = aggregate_table_schema()
    return DownstreamTables(
        routed,
        ensure_table(
            catalog,
            settings.quarantine_table,
            quarantine_schema,
            partition_spec=quarantine_partition_spec(quarantine_schema),
        ),
        ensure_table(
            catalog,
            settings.aggregate_table,
            aggregate_schema,
            partition_spec=aggregate_partition_spec(aggregate_schema),
        ),
    )
