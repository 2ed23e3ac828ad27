"""A table's upkeep is recorded on its asset page beside its commits, and Dagster plots a
numeric metadata key across a table's materializations and observations alike. Upkeep
reported its pass's duration as ``seconds``, the key a commit's own duration has: in
make dev's mode (upkeep every 10 minutes) the ``seconds`` plot of raw_events,
page_views and user_profiles each showed a third point at 22:00 (0.084, 0.598 and
0.082 s), when no commit landed, among the two commits' 11.4 and 0.9 s (raw_events)."""

from __future__ import annotations

import pyarrow as pa
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from kinesis_lake.defs.maintenance import upkeep_metadata
from kinesis_lake.defs.raw_assets import raw_batch_materialization
from kinesis_lake.defs.tables import refresh_materialization
from kinesis_lake.pipeline.ingest_report import BatchReport
from kinesis_lake.pipeline.maintain import MaintenancePass
from kinesis_lake.pipeline.refresh import TableRefresh


def _upkeep(table: str) -> MaintenancePass:
    return MaintenancePass(
        table=table,
        files_before=3,
        files_after=1,
        bytes_before=900,
        bytes_after=800,
        files_rewritten=3,
        files_written=1,
        partitions_compacted=1,
        snapshots_before=2,
        snapshots_after=3,
        snapshots_expired=0,
        orphans_removed=0,
        orphan_bytes_removed=0,
        commit_attempts=1,
        seconds=0.084,
    )


def test_upkeep_shares_no_metadata_key_with_a_commit(catalog, streamless_settings):
    table = catalog.create_table("lake.t", Schema(NestedField(1, "n", LongType())))
    table.append(pa.table({"n": pa.array([1], pa.int64())}))
    refresh = TableRefresh("lake.t", 1, 1, 1, None, committed=True, seconds=1.5)
    derived_commit = refresh_materialization(catalog, "t", refresh, {"windows": 1})
    raw_commit = raw_batch_materialization(
        streamless_settings,
        BatchReport(
            batch_id=0,
            rows=500,
            seconds=11.444,
            raw_rows_total=500,
            snapshot_id=1,
            max_millis_behind_latest=0,
            skipped_ranges=0,
        ),
    )
    commits = set(derived_commit.metadata) | set(raw_commit.metadata)

    upkeep = upkeep_metadata(_upkeep("lake.t"), owner=None)
    tombstones_upkeep = upkeep_metadata(_upkeep("lake.t_tombstones"), owner="t")

    assert set(upkeep) & commits == set()
    assert set(tombstones_upkeep) & commits == set()
    # The pass's duration is still there, under a name of its own.
    assert upkeep["maintenance_seconds"] == tombstones_upkeep["tombstones_maintenance_seconds"]
