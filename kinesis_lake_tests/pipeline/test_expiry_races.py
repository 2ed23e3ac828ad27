"""Snapshot expiry against a derived table's first refresh (found by the soak in CI at
0526c57: a short soak whose maintenance raced every run stopped with
SnapshotExpiredError, and every later refresh of the table would have too).

A first refresh reads the whole source at its current snapshot and records that
snapshot's sequence number when it commits. Until then the derived table names no
snapshot of the source, so a maintenance pass in between saw no reader to protect and
expired the very snapshot the refresh was about to record: the table then "caught up" to
a snapshot its source no longer has. The same happens on AWS when a table declared
months into a stream takes longer for its first refresh than the raw table's snapshot
age (1 hour by default) while ingestion keeps committing.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import LongType, NestedField

from kinesis_lake.iceberg.catalog import ensure_namespace, open_catalog
from kinesis_lake.iceberg.commit import commit_arrow
from kinesis_lake.iceberg.incremental import caught_up_snapshot_id, read_files
from kinesis_lake.iceberg.lineage import source_properties, source_summary
from kinesis_lake.iceberg.maintenance import compact, expire_snapshots
from kinesis_lake.iceberg.summary import derived_writer_id
from kinesis_lake.iceberg.tables import ensure_table
from kinesis_lake.pipeline.maintain import expiry_cutoff_ms
from kinesis_lake.pipeline.refresh import pending_slice
from kinesis_lake_tests.ambiguous_catalog import catalog_environment, pause_commits
from kinesis_lake_tests.iceberg.helpers import id_rows

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))
WRITER = derived_writer_id("src")


def _upkeep_with_the_tightest_policy(catalog, reader: Table | None) -> None:
    """A pass that compacts the source and keeps one snapshot, none by age."""
    raw = catalog.load_table("lake.src")
    compact(raw, target_file_size_bytes=64 * 1024 * 1024)
    cutoff = expiry_cutoff_ms(raw, [reader], max_age_hours=0.0)
    expire_snapshots(raw, older_than_ms=cutoff, retain_last=1)


@pytest.mark.parametrize("upkeep", ["before-the-table-exists", "during-the-commit"])
def test_upkeep_during_a_first_refresh_keeps_the_snapshot_it_will_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, upkeep: str
) -> None:
    for key, value in catalog_environment(tmp_path / "data", tmp_path / "f.json").items():
        monkeypatch.setenv(key, value)
    catalog = open_catalog("kinesis_lake", data_dir=tmp_path / "data")
    ensure_namespace(catalog, "lake")
    source = ensure_table(catalog, "lake.src", SCHEMA)
    commit_arrow(source, id_rows([1]), writer_id="raw", batch_id=0)
    commit_arrow(source, id_rows([2]), writer_id="raw", batch_id=1)
    read_at = source.current_snapshot()
    assert read_at is not None and read_at.sequence_number is not None
    rows = source.scan().to_arrow()  # the first refresh reads the whole source ...
    if upkeep == "before-the-table-exists":  # ... and upkeep runs before it creates it
        _upkeep_with_the_tightest_policy(catalog, None)
    derived = ensure_table(catalog, "lake.dst", SCHEMA)
    once = threading.Lock()

    def upkeep_before_the_commit_lands(table: str) -> None:
        if upkeep == "during-the-commit" and table == "lake.dst" and once.acquire(False):
            _upkeep_with_the_tightest_policy(catalog, catalog.load_table("lake.dst"))

    with pause_commits(upkeep_before_the_commit_lands):
        commit_arrow(
            derived,
            rows,
            writer_id=WRITER,
            batch_id=read_at.sequence_number,
            summary=source_summary(source, read_at.snapshot_id),
            writer_properties=source_properties(source),
        )
    commit_arrow(source, id_rows([3]), writer_id="raw", batch_id=2)

    source = catalog.load_table("lake.src")
    derived = catalog.load_table("lake.dst")
    assert caught_up_snapshot_id(source, derived) == read_at.snapshot_id
    piece = pending_slice(source, derived)
    assert read_files(source, piece.files).column("id").to_pylist() == [3]
