"""appended_since: the files of newer appends only, compactions skipped, gaps refused; and
caught_up_snapshot_id, the one rule for where a derived table stands on its source."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import LongType, NestedField, StringType

from kinesis_lake.errors import SnapshotExpiredError
from kinesis_lake.iceberg import summary
from kinesis_lake.iceberg.arrow_schema import table_arrow_schema
from kinesis_lake.iceberg.commit import commit_files
from kinesis_lake.iceberg.incremental import (
    IncrementalReadError,
    appended_since,
    caught_up_snapshot_id,
    read_data_file,
    read_files,
)
from kinesis_lake.iceberg.maintenance import compact
from kinesis_lake.iceberg.tables import ensure_table
from kinesis_lake_tests.iceberg.helpers import ingest


def _keys(table: Table, files: list[str]) -> list[int]:
    rows = read_files(table, files)
    return sorted(int(v) for v in rows.column("sequence_number").to_pylist())


def _snapshot_after_batch(table: Table, writer: str, batch_id: int, keys: range) -> int:
    outcome = ingest(table, writer, batch_id, keys)
    assert outcome.snapshot_id is not None
    return outcome.snapshot_id


def test_only_files_of_newer_appends_are_returned(raw: Table) -> None:
    s1 = _snapshot_after_batch(raw, "w", 0, range(0, 10))
    s2 = _snapshot_after_batch(raw, "w", 1, range(10, 20))
    s3 = _snapshot_after_batch(raw, "w", 2, range(20, 30))

    since_s1 = appended_since(raw, s1)
    since_s3 = appended_since(raw, s3)
    everything = appended_since(raw, None)

    assert (since_s1.from_snapshot_id, since_s1.to_snapshot_id) == (s1, s3)
    assert since_s1.rows == 20
    assert _keys(raw, since_s1.files) == list(range(10, 30))
    assert (since_s3.files, since_s3.rows, since_s3.to_snapshot_id) == ([], 0, s3)
    assert _keys(raw, everything.files) == list(range(30))
    assert appended_since(raw, s2).rows == 10


def test_a_compaction_is_skipped_and_its_rewritten_files_not_returned(raw: Table) -> None:
    s1 = _snapshot_after_batch(raw, "w", 0, range(0, 10))
    _snapshot_after_batch(raw, "w", 1, range(10, 20))
    s3 = _snapshot_after_batch(raw, "w", 2, range(20, 30))
    report = compact(raw, target_file_size_bytes=64 * 1024 * 1024)
    assert report.files_rewritten == 3
    compacted = raw.current_snapshot().snapshot_id
    s4 = _snapshot_after_batch(raw, "w", 3, range(30, 40))

    across = appended_since(raw, s1)
    after = appended_since(raw, s3)

    assert across.to_snapshot_id == s4
    assert _keys(raw, across.files) == list(range(10, 40))
    assert _keys(raw, after.files) == list(range(30, 40))
    assert appended_since(raw, compacted).rows == 10
    # Starting over reads the live (compacted) files, not the append history.
    assert _keys(raw, appended_since(raw, None).files) == list(range(40))


def test_an_expired_start_snapshot_demands_a_full_refresh(raw: Table) -> None:
    s1 = _snapshot_after_batch(raw, "w", 0, range(0, 10))
    _snapshot_after_batch(raw, "w", 1, range(10, 20))

    with raw.maintenance.expire_snapshots() as expiry:
        expiry.by_ids([s1])

    with pytest.raises(IncrementalReadError, match=f"Snapshot {s1} .* full refresh"):
        appended_since(raw, s1)
    with pytest.raises(IncrementalReadError, match="no longer in its history"):
        appended_since(raw, 12345)


def test_a_delete_since_the_start_demands_a_full_refresh(raw: Table) -> None:
    s1 = _snapshot_after_batch(raw, "w", 0, range(0, 10))
    _snapshot_after_batch(raw, "w", 1, range(10, 20))
    raw.delete("sequence_number = '15'")

    with pytest.raises(IncrementalReadError, match="'overwrite' that changed existing rows"):
        appended_since(raw, s1)


def test_files_written_before_a_new_column_read_it_as_null(catalog: Catalog) -> None:
    v1 = Schema(NestedField(1, "id", StringType(), required=True))
    table = ensure_table(catalog, "lake.t", v1)
    table.append(pa.table({"id": ["a"]}, schema=table_arrow_schema(v1)))
    (path,) = appended_since(table, None).files
    v2 = Schema(
        NestedField(1, "id", StringType(), required=True),
        NestedField(2, "n", LongType(), required=False),
    )
    table = ensure_table(catalog, "lake.t", v2)

    rows = read_data_file(table.io.properties, path, table_arrow_schema(table.schema()))

    assert rows.to_pylist() == [{"id": "a", "n": None}]
    assert rows.schema.field("id").nullable is False


def test_merged_manifests_still_give_only_the_newer_files(raw: Table) -> None:
    with raw.transaction() as tx:
        tx.set_properties({"commit.manifest.min-count-to-merge": "2"})
    snapshots = [_snapshot_after_batch(raw, "w", b, range(b * 10, b * 10 + 10)) for b in range(4)]
    manifests = raw.current_snapshot().manifests(raw.io)

    since = appended_since(raw, snapshots[1])

    assert len(manifests) < 4  # merged: older entries now sit in rewritten manifests
    assert _keys(raw, since.files) == list(range(20, 40))


def _catch_up(source: Table, derived: Table) -> None:
    """What a refresh commits: the source snapshot's sequence number as the watermark."""
    snapshot = source.current_snapshot()
    assert snapshot is not None and snapshot.sequence_number is not None
    commit_files(
        derived,
        [],
        writer_id=summary.derived_writer_id(source.name()[-1]),
        batch_id=snapshot.sequence_number,
    )
    derived.refresh()


def test_caught_up_is_the_watermarked_source_snapshot(catalog: Catalog, raw: Table) -> None:
    derived = ensure_table(catalog, "lake.derived", Schema(NestedField(1, "id", StringType())))
    assert caught_up_snapshot_id(raw, derived) is None
    s1 = _snapshot_after_batch(raw, "w", 0, range(0, 10))
    _catch_up(raw, derived)
    _snapshot_after_batch(raw, "w", 1, range(10, 20))

    assert caught_up_snapshot_id(raw, derived) == s1
    assert appended_since(raw, caught_up_snapshot_id(raw, derived)).rows == 10


def test_caught_up_to_an_expired_snapshot_says_to_rebuild(catalog: Catalog, raw: Table) -> None:
    derived = ensure_table(catalog, "lake.derived", Schema(NestedField(1, "id", StringType())))
    s1 = _snapshot_after_batch(raw, "w", 0, range(0, 10))
    _catch_up(raw, derived)
    _snapshot_after_batch(raw, "w", 1, range(10, 20))
    with raw.maintenance.expire_snapshots() as expiry:
        expiry.by_ids([s1])

    with pytest.raises(SnapshotExpiredError, match=r"was expired\. Rebuild the derived table"):
        caught_up_snapshot_id(raw, derived)
