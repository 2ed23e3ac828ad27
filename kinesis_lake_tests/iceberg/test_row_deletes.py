"""Position deletes written through pyiceberg internals (iceberg/row_deletes.py): read back
by pyiceberg's own scan, counted in the summary, and loud if an upgrade moves an internal."""

from __future__ import annotations

import dataclasses
import inspect

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import ValidationException
from pyiceberg.io.pyarrow import ArrowScan, _dataframe_to_data_files
from pyiceberg.manifest import DataFileContent, ManifestContent, ManifestWriterV2
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.update.snapshot import _SnapshotProducer
from pyiceberg.types import LongType, NestedField, StringType

from kinesis_lake.iceberg.data_files import TableWriteTarget
from kinesis_lake.iceberg.maintenance import (
    MaintenanceReport,
    _rewrite_partition,
    _small_files_by_partition,
    compact,
)
from kinesis_lake.iceberg.row_deletes import (
    FILE_PATH_ID,
    POS_ID,
    RowsMovedError,
    deleted_positions,
    stage_row_delta,
)
from kinesis_lake_tests.iceberg.helpers import NAMESPACE

SCHEMA = Schema(
    NestedField(1, "key", LongType(), required=False),
    NestedField(2, "value", StringType(), required=False),
)


@pytest.fixture
def table(catalog: Catalog) -> Table:
    table = catalog.create_table(f"{NAMESPACE}.keyed", SCHEMA, properties={"format-version": "2"})
    table.append(pa.table({"key": [1, 2, 3, 4], "value": ["a", "b", "c", "d"]}))
    return table


def _rows(table: Table) -> list[tuple[int, str]]:
    table.refresh()
    return sorted((r["key"], r["value"]) for r in table.scan().to_arrow().to_pylist())


def _file(table: Table) -> str:
    return next(iter(table.scan().plan_files())).file.file_path


def _delta(table: Table, **kwargs: object) -> None:
    with table.transaction() as tx:
        stage_row_delta(tx, {"kinesis-lake.batch-id": "1"}, **kwargs)  # type: ignore[arg-type]


def test_deletes_and_new_rows_land_in_one_snapshot_that_pyiceberg_reads(table: Table) -> None:
    path = _file(table)
    before = table.current_snapshot()
    new = pa.table({"key": pa.array([2, 5], pa.int64()), "value": ["B", "e"]})
    deletes = pa.table({"file_path": [path, path], "pos": pa.array([3, 1], pa.int64())})
    _delta(table, data=new, deletes=deletes, deletes_planned_on=before.snapshot_id)

    assert _rows(table) == [(1, "a"), (2, "B"), (3, "c"), (5, "e")]
    snapshot = table.current_snapshot()
    assert snapshot.parent_snapshot_id == before.snapshot_id  # one snapshot
    summary = snapshot.summary
    assert summary.operation.value == "overwrite"
    assert summary["added-delete-files"] == "1"
    assert summary["added-position-deletes"] == "2"
    assert summary["total-position-deletes"] == "2"
    assert summary["added-records"] == "2"
    assert summary["kinesis-lake.batch-id"] == "1"
    manifests = snapshot.manifests(table.io)
    assert sorted(m.content for m in manifests) == [
        ManifestContent.DATA,
        ManifestContent.DATA,
        ManifestContent.DELETES,
    ]
    task = next(t for t in table.scan().plan_files() if t.file.file_path == path)
    (delete_file,) = task.delete_files
    assert delete_file.content == DataFileContent.POSITION_DELETES
    assert delete_file.lower_bounds[FILE_PATH_ID] == path.encode()  # exact, not truncated
    with table.io.new_input(delete_file.file_path).open() as stream:
        written = pq.read_table(stream)
    assert written.column("pos").to_pylist() == [1, 3]  # sorted by path, then position
    ids = [f.metadata[b"PARQUET:field_id"] for f in written.schema]
    assert ids == [str(FILE_PATH_ID).encode(), str(POS_ID).encode()]
    assert deleted_positions(table.io, [delete_file])[path].tolist() == [1, 3]


def test_removing_a_data_file_and_its_deletes_folds_them(table: Table) -> None:
    path = _file(table)
    deletes = pa.table({"file_path": [path], "pos": pa.array([0], pa.int64())})
    _delta(table, deletes=deletes)
    (delete_file,) = next(iter(table.scan().plan_files())).delete_files
    rewritten = pa.table({"key": pa.array([2, 3, 4], pa.int64()), "value": ["b", "c", "d"]})
    _delta(table, data=rewritten, removed=[path, delete_file.file_path])

    assert _rows(table) == [(2, "b"), (3, "c"), (4, "d")]
    summary = table.current_snapshot().summary
    assert summary["total-position-deletes"] == "0"
    assert summary["total-delete-files"] == "0"
    assert summary["total-records"] == "3"
    assert all(not t.delete_files for t in table.scan().plan_files())


def test_a_file_removed_twice_or_rewritten_under_the_deletes_is_refused(table: Table) -> None:
    path = _file(table)
    planned = table.current_snapshot().snapshot_id
    _delta(table, data=pa.table({"key": pa.array([9], pa.int64()), "value": ["z"]}))
    _delta(table, removed=[path])
    with pytest.raises(ValidationException):
        _delta(table, removed=[path])
    deletes = pa.table({"file_path": [path], "pos": pa.array([0], pa.int64())})
    with pytest.raises(RowsMovedError):
        _delta(table, deletes=deletes, deletes_planned_on=planned)
    assert _rows(table) == [(9, "z")]


def test_the_pyiceberg_internals_used_are_still_there() -> None:
    """What iceberg/row_deletes.py relies on (its docstring lists why): a pyiceberg upgrade
    that renames or reshapes one fails here first."""
    for name in (
        "_manifests",
        "_existing_manifests",
        "_deleted_entries",
        "_summary",
        "new_manifest_output",
        "fetch_manifest_entry",
        "_validate_concurrency",
        "commit",
    ):
        assert callable(getattr(_SnapshotProducer, name, None)), name
    init = inspect.signature(_SnapshotProducer.__init__).parameters
    assert {"operation", "transaction", "io", "snapshot_properties"} <= set(init)
    source = inspect.getsource(_SnapshotProducer)
    for attribute in (
        "_added_data_files",
        "_deleted_data_files",
        "_compression",
        "_parent_snapshot_id",
    ):
        assert f"self.{attribute}" in source, attribute
    assert "_summary(self.snapshot_properties)" in source and "self._manifests()" in source
    assert ManifestWriterV2.__init__.__code__.co_varnames[1:6] == (
        "spec",
        "schema",
        "output_file",
        "snapshot_id",
        "avro_compression",
    )
    assert "_meta" in vars(ManifestWriterV2) and "content" in vars(ManifestWriterV2)
    parameters = list(
        inspect.signature(ArrowScan._record_batches_from_scan_tasks_and_deletes).parameters
    )
    assert parameters == ["self", "tasks", "deletes_per_file"]
    parameters = list(inspect.signature(_dataframe_to_data_files).parameters)
    assert parameters[:3] == ["table_metadata", "df", "io"]


def test_compaction_folds_row_deletes_back_into_data_files(table: Table) -> None:
    path = _file(table)
    new = pa.table({"key": pa.array([1], pa.int64()), "value": ["A"]})
    _delta(
        table, data=new, deletes=pa.table({"file_path": [path], "pos": pa.array([0], pa.int64())})
    )
    # Unmerged, as a table written before deltas merged their deletes holds them.
    _delta(
        table,
        deletes=pa.table({"file_path": [path], "pos": pa.array([2], pa.int64())}),
        merge_deletes=False,
    )
    before = _rows(table)

    report = compact(table, target_file_size_bytes=64 * 1024 * 1024, min_input_files=99)

    assert report.delete_files_folded == 2 and report.files_rewritten == 1
    assert _rows(table) == before == [(1, "A"), (2, "b"), (4, "d")]
    assert all(not task.delete_files for task in table.scan().plan_files())
    summary = table.current_snapshot().summary
    assert summary["total-records"] == "3" and summary["total-position-deletes"] == "0"
    assert summary["kinesis-lake.operation"] == "compaction"


def test_new_deletes_merge_with_the_live_ones_into_one_delete_file(table: Table) -> None:
    """A reader opens every live delete file for every data file it could touch: after a
    hundred merge-on-read refreshes that was a hundred files per read (benchmark 8's read
    8.8x copy-on-write's). So each delta leaves one delete file holding every live delete,
    as Iceberg v3 keeps one deletion vector per data file."""
    path = _file(table)
    extra = pa.table({"key": pa.array([5, 6], pa.int64()), "value": ["e", "f"]})
    _delta(table, data=extra)
    second = next(t.file.file_path for t in table.scan().plan_files() if t.file.file_path != path)
    for deleted_path, position in [(path, 0), (second, 1), (path, 2)]:
        deletes = pa.table({"file_path": [deleted_path], "pos": pa.array([position], pa.int64())})
        _delta(table, deletes=deletes, deletes_planned_on=table.current_snapshot().snapshot_id)

    assert _rows(table) == [(2, "b"), (4, "d"), (5, "e")]
    delete_files = {d.file_path for t in table.scan().plan_files() for d in t.delete_files}
    assert len(delete_files) == 1
    (delete_file,) = next(t for t in table.scan().plan_files() if t.delete_files).delete_files
    assert deleted_positions(table.io, [delete_file]).keys() == {path, second}
    summary = table.current_snapshot().summary
    assert summary["total-delete-files"] == "1"
    assert summary["total-position-deletes"] == "3"
    assert summary["total-records"] == "6"


def _live_manifest_counts(table: Table) -> tuple[int, int]:
    """The current snapshot's manifests, and those holding a live file."""
    table.refresh()
    manifests = table.current_snapshot().manifests(table.io)
    live = [m for m in manifests if m.has_added_files() or m.has_existing_files()]
    return len(manifests), len(live)


def test_manifests_stay_few_over_many_deltas_and_a_fold(table: Table) -> None:
    """A scan opens every manifest its snapshot lists: a manifest per delta, and after a
    fold a rewritten manifest per removed file holding nothing live, made a read of a
    table of two data files plan 202 manifests (0.8 s, benchmark 8's shape). Data
    manifests merge as Iceberg Java merges them (``commit.manifest.min-count-to-merge``),
    and the files a delta removes are recorded in one manifest per content."""
    with table.transaction() as tx:
        tx.set_properties({"commit.manifest.min-count-to-merge": "5"})
    last: str | None = None
    for key in range(10, 22):  # each delta adds two rows and deletes one of the last two
        earlier = {t.file.file_path for t in table.scan().plan_files()}
        new = pa.table({"key": pa.array([key, -key], pa.int64()), "value": ["new", "old"]})
        deletes = None
        if last is not None:
            deletes = pa.table({"file_path": [last], "pos": pa.array([1], pa.int64())})
        planned = table.current_snapshot().snapshot_id
        _delta(table, data=new, deletes=deletes, deletes_planned_on=planned)
        (last,) = {t.file.file_path for t in table.scan().plan_files()} - earlier
    before = _rows(table)

    listed, live = _live_manifest_counts(table)
    assert listed <= 5 + 2, listed  # merged at five, plus this delta's own

    compact(table, target_file_size_bytes=64 * 1024 * 1024, min_input_files=99)

    assert _rows(table) == before
    listed, live = _live_manifest_counts(table)
    assert live <= 2 and listed <= live + 2, (listed, live)


def test_compaction_racing_a_row_delete_never_brings_the_row_back(table: Table) -> None:
    """Compaction plans two small files; a merge-on-read refresh then deletes a row of one
    of them; the compaction's rewrite, read as planned, still holds that row. Committed,
    it would bring the row back (the delete names the old file). It is abandoned instead,
    as the fold is when deletes land meanwhile."""
    table.append(pa.table({"key": pa.array([5, 6], pa.int64()), "value": ["e", "f"]}))
    target = dataclasses.replace(
        TableWriteTarget.from_table(table), target_file_size_bytes=64 * 1024 * 1024
    )
    planned_on = table.current_snapshot().snapshot_id
    (tasks,) = _small_files_by_partition(table, 64 * 1024 * 1024, 2)
    deletes = pa.table({"file_path": [_file(table)], "pos": pa.array([1], pa.int64())})
    _delta(table, deletes=deletes, deletes_planned_on=planned_on)
    after_delete = _rows(table)

    report = MaintenanceReport()
    _rewrite_partition(table, target, tasks, report, planned_on)

    assert len(after_delete) == 5
    assert _rows(table) == after_delete
    assert report.partitions_compacted == 0
