"""The per-minute event counts: one windowed SQL table over the declaration's aggregate source.

Only the minute windows that new rows of the source fall in are recomputed, from the
source's rows of those windows, and replace the old rows of those windows in one overwrite
commit (``sql_tables.refresh_windowed``, as for a declared windowed table), so a late event
corrects its minute's count instead of adding a second row for it.
"""

from __future__ import annotations

from pyiceberg.table import Table
from pyspark.sql import SparkSession

from kinesis_lake.events import columns as C
from kinesis_lake.events.declaration import AGGREGATE_TABLE
from kinesis_lake.events.derived_tables import DerivedTable, WindowSpec
from kinesis_lake.events.schema import EventSchema
from kinesis_lake.pipeline.refresh import TableRefresh
from kinesis_lake.pipeline.sql_tables import refresh_windowed

UNKNOWN_EVENT_TYPE = "unknown"


def refresh_aggregate(
    spark: SparkSession, schema: EventSchema, parsed: Table, aggregate: Table
) -> tuple[TableRefresh, int]:
    """Recompute only the minute windows that newly parsed rows fall into: the per-minute
    counts are one windowed SQL table (``aggregate_sql``), refreshed as declared ones are."""
    spec = aggregate_sql(schema, parsed.name()[-1])
    return refresh_windowed(spark, spec, parsed, aggregate, create=lambda _: aggregate)


def aggregate_sql(schema: EventSchema, source: str) -> DerivedTable:
    """The per-minute counts of ``source`` as the windowed SQL table it is."""
    event_type = (
        f"coalesce(CAST(`{schema.event_type_field}` AS STRING), '{UNKNOWN_EVENT_TYPE}')"
        if schema.event_type_field
        else f"'{C.ALL_EVENT_TYPES}'"
    )
    sql = (
        f"SELECT date_trunc('minute', {C.EVENT_TIMESTAMP}) AS {C.WINDOW_START}, "
        f"{event_type} AS {C.EVENT_TYPE}, count(*) AS {C.EVENT_COUNT}, "
        f"current_timestamp() AS {C.UPDATED_AT} FROM `{source}` GROUP BY 1, 2"
    )
    window = WindowSpec(C.EVENT_TIMESTAMP, "minute", C.WINDOW_START)
    return DerivedTable(AGGREGATE_TABLE, "", (source,), sql=sql, refresh="windowed", window=window)
