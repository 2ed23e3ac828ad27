"""The lake's tables as Dagster shows them: the fixed tables' keys, the derive pool, and
the metadata of a table and of one commit of it.

Apart from the assets so the checks and the ingestion run's follower, which the assets
start, can use them without importing the assets.
"""

from typing import TYPE_CHECKING, Any

import dagster as dg
from pyiceberg.schema import Schema
from pyiceberg.table import Table

from kinesis_lake.events.declaration import AGGREGATE_TABLE, QUARANTINE_TABLE
from kinesis_lake.iceberg.tables import type_text
from kinesis_lake.pipeline.lake import table_stats

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

    from kinesis_lake.pipeline.refresh import TableRefresh

DERIVE_POOL = "kinesis_lake_derive"

EVENTS_QUARANTINE = dg.AssetKey(QUARANTINE_TABLE)
EVENT_COUNTS_PER_MINUTE = dg.AssetKey(AGGREGATE_TABLE)


def table_column_schema(schema: Schema) -> dg.TableSchema:
    """The Iceberg schema as Dagster's column schema (names, types, nullability, docs)."""
    return dg.TableSchema(
        columns=[
            dg.TableColumn(
                name=f.name,
                type=type_text(f.field_type),
                description=f.doc,
                constraints=dg.TableColumnConstraints(nullable=not f.required),
            )
            for f in schema.fields
        ]
    )


def table_metadata(identifier: str, table: Table) -> dict[str, Any]:
    stats = table_stats(table)
    metadata: dict[str, Any] = {
        "dagster/table_name": identifier,
        "dagster/row_count": stats.rows,
        "dagster/column_schema": table_column_schema(table.schema()),
        "data_files": stats.data_files,
    }
    if stats.snapshot_id is not None:
        metadata["snapshot_id"] = stats.snapshot_id
    return metadata


def shown_seconds(seconds: float) -> float:
    """Seconds as a materialization shows them: to the millisecond."""
    return round(seconds, 3)


def rate(rows: int, seconds: float) -> float:
    """Rows per second of the work that wrote them, from the seconds as shown beside them
    (so an operator dividing the two numbers gets this one); 0 when the work took no
    millisecond."""
    shown = shown_seconds(seconds)
    return round(rows / shown, 1) if shown > 0 else 0.0


def refresh_materialization(
    catalog: "Catalog",
    name: str,
    refresh: "TableRefresh",
    numbers: dict[str, int] | None = None,
) -> dg.AssetMaterialization:
    """One downstream table's commit as its materialization, timed by its own work
    (``TableRefresh.seconds``: tables refresh side by side), so ``rows_per_second`` is
    its own."""
    seconds = refresh.seconds
    metadata: dict[str, Any] = {
        **table_metadata(refresh.table, catalog.load_table(refresh.table)),
        "rows_added": refresh.rows_written,
        "source_files_read": refresh.source_files_read,
        "source_rows_read": refresh.source_rows_read,
        "committed": refresh.committed,
        "seconds": shown_seconds(seconds),
        "rows_per_second": rate(refresh.rows_written, seconds),
        **(numbers or {}),
    }
    if refresh.source_snapshot_id is not None:
        metadata["source_snapshot_id"] = int(refresh.source_snapshot_id)
    return dg.AssetMaterialization(asset_key=dg.AssetKey(name), metadata=metadata)
