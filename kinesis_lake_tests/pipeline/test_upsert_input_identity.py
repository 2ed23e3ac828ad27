"""An upsert table over an input that was re-created: real Spark over real Iceberg tables."""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa
from pyiceberg.catalog import Catalog

from kinesis_lake.config import Settings
from kinesis_lake.events.derived_tables import DerivedTable, UpsertSpec
from kinesis_lake.iceberg.arrow_schema import table_arrow_schema
from kinesis_lake.iceberg.commit import commit_arrow
from kinesis_lake.iceberg.tables import ensure_table_for_arrow
from kinesis_lake.pipeline.derived_reconciliation import reconcile_upsert
from kinesis_lake.pipeline.upsert import ensure_upsert_tables, refresh_upsert

UPDATES = pa.schema(
    [
        ("user_id", pa.string()),
        ("version", pa.int64()),
        ("approximate_arrival_timestamp", pa.timestamp("us", tz="UTC")),
        ("shard_id", pa.string()),
        ("sequence_number", pa.string()),
        ("sub_sequence_number", pa.int64()),
    ]
)
PROFILES = DerivedTable("profiles", "", ("updates",), upsert=UpsertSpec("user_id", "version"))


def put(catalog: Catalog, settings: Settings, *updates: tuple[str, int]) -> None:
    """One commit of ``(user, version)`` updates into the input table."""
    table = ensure_table_for_arrow(catalog, settings.table_identifier("updates"), UPDATES)
    rows = {
        "user_id": [user for user, _ in updates],
        "version": [version for _, version in updates],
        "approximate_arrival_timestamp": [datetime(2024, 5, 1, tzinfo=UTC)] * len(updates),
        "shard_id": ["shardId-000000000000"] * len(updates),
        "sequence_number": [str(len(table.snapshots()) * 100 + i) for i in range(len(updates))],
        "sub_sequence_number": [0] * len(updates),
    }
    data = pa.table(rows, schema=UPDATES).cast(table_arrow_schema(table.schema()))
    commit_arrow(table, data, writer_id="w", batch_id=len(table.snapshots()))


def refresh(spark, catalog: Catalog, settings: Settings) -> list[tuple[str, int]]:
    source = catalog.load_table(settings.table_identifier("updates"))
    tables = ensure_upsert_tables(catalog, settings, PROFILES, source)
    refresh_upsert(spark, PROFILES, source, tables)
    held = catalog.load_table(settings.table_identifier("profiles")).scan().to_arrow()
    users, versions = held.column("user_id").to_pylist(), held.column("version").to_pylist()
    return sorted(zip(users, versions, strict=True))


def test_an_upsert_table_rebuilds_from_a_re_created_input(
    spark, streamless_catalog, streamless_settings
) -> None:
    """Its watermark was above every snapshot of the new input: it kept the old keys and
    never read the new rows."""
    put(streamless_catalog, streamless_settings, ("ann", 1), ("bob", 1))
    put(streamless_catalog, streamless_settings, ("ann", 2))
    put(streamless_catalog, streamless_settings, ("bob", 2))
    assert refresh(spark, streamless_catalog, streamless_settings) == [("ann", 2), ("bob", 2)]

    streamless_catalog.drop_table(streamless_settings.table_identifier("updates"))
    put(streamless_catalog, streamless_settings, ("cid", 1), ("ann", 1))

    assert refresh(spark, streamless_catalog, streamless_settings) == [("ann", 1), ("cid", 1)]
    source = streamless_catalog.load_table(streamless_settings.table_identifier("updates"))
    table = streamless_catalog.load_table(streamless_settings.table_identifier("profiles"))
    assert reconcile_upsert(PROFILES, source, table).matches
