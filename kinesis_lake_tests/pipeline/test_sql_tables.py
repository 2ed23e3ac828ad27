"""SQL tables whose input changed under them (re-created, rolled back, widened), refreshed
by real Spark from real Iceberg tables: the refresh reads tables, so no stream is needed.
(Each refresh mode through a stream: ``test_sql_table_refresh_modes.py``.)"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table
from pyiceberg.types import LongType

from kinesis_lake.config import Settings
from kinesis_lake.errors import TableError
from kinesis_lake.events.derived_tables import DerivedTable, WindowSpec
from kinesis_lake.iceberg.arrow_schema import table_arrow_schema
from kinesis_lake.iceberg.commit import commit_arrow
from kinesis_lake.iceberg.lineage import source_uuid_property
from kinesis_lake.iceberg.summary import derived_writer_id
from kinesis_lake.iceberg.tables import ensure_table_for_arrow
from kinesis_lake.pipeline.derived_reconciliation import reconcile_windows, sql_table_caught_up
from kinesis_lake.pipeline.sql_tables import refresh_sql

HOUR0 = datetime(2024, 5, 1, tzinfo=UTC)
EVENTS = pa.schema([("n", pa.int32()), ("at", pa.timestamp("us", tz="UTC"))])

TOTAL = DerivedTable("total", "", ("events",), sql="SELECT sum(n) AS n FROM events")
COPIED = DerivedTable("copied", "", ("events",), sql="SELECT n FROM events", refresh="rows")
HOURLY_SQL = "SELECT date_trunc('hour', at) AS hour, max(n) AS top FROM events GROUP BY 1"
HOURLY = DerivedTable(
    "hourly",
    "",
    ("events",),
    sql=HOURLY_SQL,
    refresh="windowed",
    window=WindowSpec("at", "hour", "hour"),
)


def append(
    catalog: Catalog, settings: Settings, values: list[int], schema: pa.Schema = EVENTS
) -> Table:
    """One commit of ``values`` into the input table, value ``n`` at hour ``n % 10``."""
    table = ensure_table_for_arrow(catalog, settings.table_identifier("events"), schema)
    at = [HOUR0 + timedelta(hours=n % 10) for n in values]
    data = pa.table({"n": values, "at": at}, schema=schema)
    done = len(table.snapshots())
    commit_arrow(table, data.cast(table_arrow_schema(table.schema())), writer_id="w", batch_id=done)
    return table


def recreate(catalog: Catalog, settings: Settings, values: list[int]) -> Table:
    """What the SnapshotExpiredError message tells operators: drop the table, fill it again."""
    catalog.drop_table(settings.table_identifier("events"))
    return append(catalog, settings, values)


def refresh(spark, catalog: Catalog, settings: Settings, spec: DerivedTable) -> Table:
    inputs = {"events": catalog.load_table(settings.table_identifier("events"))}
    refresh_sql(spark, catalog, settings, spec, inputs)
    return catalog.load_table(settings.table_identifier(spec.name))


def column(table: Table, name: str) -> list:
    return sorted(table.scan().to_arrow().column(name).to_pylist())


def test_a_full_table_recomputes_after_its_input_is_re_created(
    spark, streamless_catalog, streamless_settings
) -> None:
    """The batch id was the sum of the inputs' sequence numbers: a re-created input starts
    again at 1, so the refresh was skipped and the check passed on the old result."""
    for values in ([1], [2], [3]):
        append(streamless_catalog, streamless_settings, values)
    assert column(refresh(spark, streamless_catalog, streamless_settings, TOTAL), "n") == [6]

    events = recreate(streamless_catalog, streamless_settings, [10])
    total = streamless_catalog.load_table(streamless_settings.table_identifier("total"))
    assert not sql_table_caught_up(TOTAL, {"events": events}, total)

    assert column(refresh(spark, streamless_catalog, streamless_settings, TOTAL), "n") == [10]
    events = streamless_catalog.load_table(streamless_settings.table_identifier("events"))
    total = streamless_catalog.load_table(streamless_settings.table_identifier("total"))
    assert sql_table_caught_up(TOTAL, {"events": events}, total)


def test_a_full_table_recomputes_after_its_input_is_rolled_back(
    spark, streamless_catalog, streamless_settings
) -> None:
    first = append(streamless_catalog, streamless_settings, [1]).current_snapshot()
    append(streamless_catalog, streamless_settings, [2])
    assert column(refresh(spark, streamless_catalog, streamless_settings, TOTAL), "n") == [3]

    events = streamless_catalog.load_table(streamless_settings.table_identifier("events"))
    assert first is not None
    events.manage_snapshots().rollback_to_snapshot(first.snapshot_id).commit()

    assert column(refresh(spark, streamless_catalog, streamless_settings, TOTAL), "n") == [1]


@pytest.mark.parametrize("spec", [COPIED, HOURLY], ids=["rows", "windowed"])
def test_an_incremental_table_rebuilds_from_a_re_created_input(
    spark, streamless_catalog, streamless_settings, spec: DerivedTable
) -> None:
    """Its watermark (the input's sequence number) was above every snapshot of the new
    input, so it never read the rebuilt rows and kept the old ones."""
    for values in ([1, 2], [3], [4]):
        append(streamless_catalog, streamless_settings, values)
    refresh(spark, streamless_catalog, streamless_settings, spec)

    events = recreate(streamless_catalog, streamless_settings, [5, 17])
    table = streamless_catalog.load_table(streamless_settings.table_identifier(spec.name))
    assert not sql_table_caught_up(spec, {"events": events}, table)

    table = refresh(spark, streamless_catalog, streamless_settings, spec)
    assert column(table, "n" if spec is COPIED else "top") == [5, 17]
    assert sql_table_caught_up(spec, {"events": events}, table)
    # Next to the watermark, where the table's own snapshot expiry cannot remove it.
    recorded = table.properties[source_uuid_property(derived_writer_id("events"))]
    assert recorded == str(events.metadata.table_uuid)


def test_a_rows_table_rebuilds_from_a_rolled_back_input(
    spark, streamless_catalog, streamless_settings
) -> None:
    """A rollback left it holding rows of snapshots the input no longer has."""
    first = append(streamless_catalog, streamless_settings, [1, 2]).current_snapshot()
    append(streamless_catalog, streamless_settings, [3])
    refresh(spark, streamless_catalog, streamless_settings, COPIED)
    assert first is not None
    events = streamless_catalog.load_table(streamless_settings.table_identifier("events"))
    events.manage_snapshots().rollback_to_snapshot(first.snapshot_id).commit()

    assert column(refresh(spark, streamless_catalog, streamless_settings, COPIED), "n") == [1, 2]


WIDE = pa.schema([("n", pa.int64()), ("at", pa.timestamp("us", tz="UTC"))])
BIG = 3_000_000_290
"""Above 2^31: only a long holds it."""


def test_a_windowed_table_follows_a_widened_input_and_its_check_sees_the_input_now(
    spark, streamless_catalog, streamless_settings
) -> None:
    """The windowed table kept the int it was created with: a value above 2^31 failed every
    refresh with a bare ArrowInvalid, and its check compared the windows with the input as
    of the stuck table's last refresh, so it kept passing."""
    append(streamless_catalog, streamless_settings, [1, 2])
    refresh(spark, streamless_catalog, streamless_settings, HOURLY)

    events = append(
        streamless_catalog, streamless_settings, [BIG], schema=WIDE
    )  # the declaration widened n
    coverage = reconcile_windows(
        HOURLY, events, refresh_table(streamless_catalog, streamless_settings, HOURLY)
    )
    assert (coverage.passed, coverage.input_windows, coverage.table_windows) == (False, 3, 2)

    hourly = refresh(spark, streamless_catalog, streamless_settings, HOURLY)

    assert hourly.schema().find_field("top").field_type == LongType()
    assert column(hourly, "top") == [1, 2, BIG]
    assert reconcile_windows(HOURLY, events, hourly).passed


def test_a_windowed_result_the_table_cannot_hold_names_table_and_column(
    spark, streamless_catalog, streamless_settings
) -> None:
    append(streamless_catalog, streamless_settings, [1])
    refresh(spark, streamless_catalog, streamless_settings, HOURLY)
    append(streamless_catalog, streamless_settings, [2])
    as_text = replace(HOURLY, sql=HOURLY_SQL.replace("max(n)", "concat('#', max(n))"))

    with pytest.raises(TableError, match=r"(?s)lake\.hourly.*'top'.*int.*string"):
        refresh(spark, streamless_catalog, streamless_settings, as_text)


def refresh_table(catalog: Catalog, settings: Settings, spec: DerivedTable) -> Table:
    return catalog.load_table(settings.table_identifier(spec.name))


def test_sql_whose_columns_were_reordered_still_refreshes_full_and_windowed_tables(
    spark, streamless_catalog, streamless_settings
) -> None:
    """An edit that lists the same columns in another order is legal: the table keeps
    its columns and matches the result by name. The result was cast to the
    table's schema position by position, and every later refresh failed with pyarrow's
    "Target schema's field names are not matching the table's field names"."""
    append(streamless_catalog, streamless_settings, [1])
    refresh(spark, streamless_catalog, streamless_settings, HOURLY)
    two = replace(TOTAL, sql="SELECT sum(n) AS n, count(*) AS c FROM events")
    refresh(spark, streamless_catalog, streamless_settings, two)
    append(streamless_catalog, streamless_settings, [12])
    swapped = "SELECT max(n) AS top, date_trunc('hour', at) AS hour FROM events GROUP BY 2"

    hourly = refresh(spark, streamless_catalog, streamless_settings, replace(HOURLY, sql=swapped))
    assert column(hourly, "top") == [1, 12]
    reordered = replace(TOTAL, sql="SELECT count(*) AS c, sum(n) AS n FROM events")
    total = refresh(spark, streamless_catalog, streamless_settings, reordered)
    assert (column(total, "n"), column(total, "c")) == ([13], [2])
