"""Position delete files (Iceberg format v2): written, committed and read back here.

pyiceberg 0.12 reads position deletes in its scans but has no public API to write them,
so merge-on-read upserts (:mod:`kinesis_lake.pipeline.upsert`) and the maintenance that
folds deletes back into data files (:mod:`kinesis_lake.iceberg.maintenance`) use these
pyiceberg internals, and only through this module:

* ``pyiceberg.table.update.snapshot._SnapshotProducer`` is subclassed (:class:`_RowDelta`):
  one snapshot that adds data files and delete files and removes data and delete files.
  pyiceberg's own producers cannot: ``_FastAppendFiles`` and ``_OverwriteFiles`` write
  every added file into a manifest of content DATA and rewrite manifests with a DATA
  writer. The contract relied on: ``_manifests()`` returns the snapshot's manifests,
  ``_added_data_files`` / ``_deleted_data_files`` feed ``_summary()``'s collector (which
  counts delete files into ``added-delete-files``, ``added-position-deletes``,
  ``total-position-deletes``), ``new_manifest_output()`` names a manifest, ``commit()``
  stages the snapshot on the transaction with an ``AssertRefSnapshotId`` on its base.
* ``pyiceberg.manifest.ManifestWriterV2`` is subclassed to write manifests of content
  DELETES (its ``content()`` and ``_meta``).
* ``pyiceberg.io.pyarrow._dataframe_to_data_files`` writes the appended rows as
  ``Transaction.append`` does, so they land in the same snapshot as the deletes.
* ``ArrowScan._record_batches_from_scan_tasks_and_deletes`` reads a data file with deletes
  already read (:func:`live_batches`), what ``to_record_batches`` does after reading them.

``kinesis_lake_tests/iceberg/test_row_deletes.py`` checks each of them, fast, so an
upgrade that changes one fails there first and loudly.

A delete file holds ``file_path`` (field id 2147483546) and ``pos`` (2147483545) sorted by
path then position, with exact (untruncated) bounds of both: a reader skips a delete file
whose path bounds exclude a data file, and one whose bounds are a single path is indexed by
that path (pyiceberg's ``DeleteFileIndex``, Iceberg Java alike). Only unpartitioned tables
(upsert tables are not partitioned: see the upsert module).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.conversions import to_bytes
from pyiceberg.exceptions import ValidationException
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import ArrowScan, _dataframe_to_data_files
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestWriter,
    ManifestWriterV2,
)
from pyiceberg.table import FileScanTask, TableProperties, Transaction
from pyiceberg.table.snapshots import Operation, Summary
from pyiceberg.table.update.snapshot import _ManifestMergeManager, _SnapshotProducer
from pyiceberg.typedef import Record
from pyiceberg.types import LongType, StringType
from pyiceberg.utils.properties import property_as_bool, property_as_int

from kinesis_lake.errors import TableError

FILE_PATH_ID = 2147483546
POS_ID = 2147483545
DELETE_SCHEMA = pa.schema(
    [
        pa.field(
            "file_path", pa.string(), nullable=False, metadata={"PARQUET:field_id": "2147483546"}
        ),
        pa.field("pos", pa.int64(), nullable=False, metadata={"PARQUET:field_id": "2147483545"}),
    ]
)
"""The position delete file's columns, with the field ids the Iceberg spec reserves."""

JAVA_MERGES_MANIFESTS = True
"""``commit.manifest-merge.enabled`` unset: Iceberg Java's default (pyiceberg's is off)."""


class RowsMovedError(TableError):
    """A data file the deletes point into is no longer live: another commit (a compaction)
    rewrote it after the positions were found. Nothing was committed; the next refresh
    finds the rows again where they are now."""


def write_position_deletes(tx: Transaction, deletes: pa.Table) -> DataFile:
    """One delete file of ``deletes`` (``file_path``, ``pos``) under the table's data folder."""
    metadata = tx.table_metadata
    if not metadata.spec().is_unpartitioned():
        raise ValueError("position deletes are written for unpartitioned tables only")
    rows = deletes.select(["file_path", "pos"]).cast(DELETE_SCHEMA)
    rows = rows.sort_by([("file_path", "ascending"), ("pos", "ascending")])
    location = tx._table.location_provider().new_data_location(f"deletes-{uuid.uuid4()}.parquet")
    io = tx._table.io
    with io.new_output(location).create(overwrite=False) as stream:
        pq.write_table(rows, stream, compression="zstd")
    size = len(io.new_input(location))
    paths, positions = rows.column("file_path"), rows.column("pos")
    string, long = StringType(), LongType()
    return DataFile.from_args(
        content=DataFileContent.POSITION_DELETES,
        file_path=location,
        file_format=FileFormat.PARQUET,
        partition=Record(),
        record_count=rows.num_rows,
        file_size_in_bytes=size,
        value_counts={FILE_PATH_ID: rows.num_rows, POS_ID: rows.num_rows},
        null_value_counts={FILE_PATH_ID: 0, POS_ID: 0},
        lower_bounds={
            FILE_PATH_ID: to_bytes(string, paths[0].as_py()),
            POS_ID: to_bytes(long, pc.min(positions).as_py()),
        },
        upper_bounds={
            FILE_PATH_ID: to_bytes(string, paths[-1].as_py()),
            POS_ID: to_bytes(long, pc.max(positions).as_py()),
        },
        spec_id=metadata.default_spec_id,
    )


def deleted_positions(io: FileIO, delete_files: Iterable[DataFile]) -> dict[str, np.ndarray]:
    """Per data file path, the sorted row positions ``delete_files`` delete in it.

    Raises:
        TableError: a delete file is not a Parquet position delete file (a deletion vector
            of a v3 table, or equality deletes), which our own readers do not apply.
    """
    found: dict[str, list[np.ndarray]] = {}
    for delete_file in delete_files:
        if (
            delete_file.content != DataFileContent.POSITION_DELETES
            or delete_file.file_format != FileFormat.PARQUET
        ):
            raise TableError(
                f"{delete_file.file_path} is a {delete_file.file_format} "
                f"{delete_file.content.name.lower()} file: only Parquet position deletes are "
                "applied here; read the table with pyiceberg or Iceberg's own Spark runtime."
            )
        with io.new_input(delete_file.file_path).open() as stream:
            rows = pq.read_table(stream, columns=["file_path", "pos"])
        paths = rows.column("file_path").to_numpy(zero_copy_only=False)
        positions = rows.column("pos").to_numpy()
        for path in np.unique(paths):
            found.setdefault(str(path), []).append(positions[paths == path])
    return {path: np.unique(np.concatenate(parts)) for path, parts in found.items()}


def live_batches(
    scan: ArrowScan, task: FileScanTask, deleted: dict[str, np.ndarray]
) -> Iterator[pa.RecordBatch]:
    """``task``'s rows through pyiceberg's ``scan`` (its projection and schema evolution)
    without the ``deleted`` positions (:func:`deleted_positions`, read once for every
    file). ``ArrowScan.to_record_batches`` rereads every delete file for each call: a fold
    calling it file by file read 100 delete files 119 times (maintenance 237 s, benchmark
    8's small table)."""
    positions = deleted.get(task.file.file_path)
    held = {task.file.file_path: [pa.chunked_array([positions])]} if positions is not None else {}
    return scan._record_batches_from_scan_tasks_and_deletes([task], held)


def live_rows(io: FileIO, tasks: list[FileScanTask]) -> int:
    """Rows the planned ``tasks`` hold once their delete files are applied (a file's
    ``record_count`` counts deleted rows too)."""
    deleted = deleted_positions(io, {d for task in tasks for d in task.delete_files})
    return sum(task.file.record_count - len(deleted.get(task.file.file_path, ())) for task in tasks)


def live_records(summary: Summary | None) -> int:
    """A snapshot's live rows from its summary: Iceberg's ``total-records`` counts rows a
    position delete removed too. Exact for tables whose deletes each remove a live row
    once (ours: a refresh deletes only rows no earlier delete removed)."""
    if summary is None:
        return 0
    total = int(summary.get("total-records", 0))
    return total - int(summary.get("total-position-deletes", 0))


def stage_row_delta(
    tx: Transaction,
    snapshot_properties: dict[str, str],
    *,
    data: pa.Table | None = None,
    data_files: Iterable[DataFile] = (),
    deletes: pa.Table | None = None,
    removed: Iterable[str] = (),
    deletes_planned_on: int | None = None,
    merge_deletes: bool = True,
) -> None:
    """Stage one snapshot on ``tx``: ``data`` (rows, written here) and ``data_files``
    appended, the ``deletes`` (``file_path``, ``pos``) written as one delete file, and the
    data or delete files at the ``removed`` paths dropped.

    ``merge_deletes``: the new delete file also holds every delete of the base's live
    delete files, which it replaces, so a table holds one delete file however many
    deltas wrote deletes since maintenance last folded them. A reader opens every live
    delete file that may touch a data file it reads; at one file per merge-on-read
    refresh, a read after a hundred refreshes took 8.8x copy-on-write's (benchmark 8).
    This is what Iceberg v3 asks of its deletion vectors (one per data file, the old one
    merged in), kept in v2's position delete files. The cost moves to the delta: it
    rereads the deletes written since the last fold, positions only. Read from the base
    the delta commits on, so a retry on a moved base merges what that base holds.

    Positions in the data files ``removed`` here are dropped (they delete nothing any more;
    with ``merge_deletes`` also those of earlier delete files), so a delta that also
    rewrites a file (:mod:`kinesis_lake.iceberg.dead_rows`) leaves no delete behind for it,
    and writes no delete file when none is left.

    ``deletes_planned_on``: the snapshot whose data files the positions were found in.
    When the base moved since, every file they point into must still be live.

    Raises:
        RowsMovedError: a file ``deletes`` points into is no longer live.
        ValidationException: a ``removed`` path is not live in the base.
    """
    removed = set(removed)
    replaces = bool(removed) or (deletes is not None and deletes.num_rows > 0)
    delta = _RowDelta(
        operation=Operation.OVERWRITE if replaces else Operation.APPEND,
        transaction=tx,
        io=tx._table.io,
        snapshot_properties=snapshot_properties,
    )
    delta.removed_paths = removed
    if deletes is not None and (deletes.num_rows or removed):
        base = tx.table_metadata.current_snapshot_id
        if deletes.num_rows and deletes_planned_on is not None and base != deletes_planned_on:
            targets = set(pc.unique(deletes.column("file_path")).to_pylist())
            gone = targets - live_data_files(tx).keys()
            if gone:
                raise RowsMovedError(
                    f"{len(gone)} data files of {'.'.join(tx._table.name())} were rewritten "
                    f"while their replaced rows were being found (e.g. {sorted(gone)[0]})"
                )
        if merge_deletes:
            live = live_delete_files(tx)
            deletes = _merged(tx._table.io, live, deletes)
            delta.removed_paths = removed | {delete_file.file_path for delete_file in live}
        if removed:  # positions in the data files taken out no longer delete anything
            gone = pa.array(sorted(removed), pa.string())
            deletes = deletes.filter(pc.invert(pc.is_in(deletes.column("file_path"), gone)))
        if deletes.num_rows:
            delta.append_data_file(write_position_deletes(tx, deletes))
    if data is not None and data.num_rows:
        for data_file in _dataframe_to_data_files(tx.table_metadata, data, tx._table.io):
            delta.append_data_file(data_file)
    for data_file in data_files:
        delta.append_data_file(data_file)
    delta.commit()


def live_delete_files(tx: Transaction) -> list[DataFile]:
    """The delete files live in ``tx``'s base snapshot."""
    snapshot = tx.table_metadata.current_snapshot()
    if snapshot is None:
        return []
    return [
        entry.data_file
        for manifest in snapshot.manifests(tx._table.io)
        if manifest.content == ManifestContent.DELETES
        for entry in manifest.fetch_manifest_entry(tx._table.io, discard_deleted=True)
    ]


def _merged(io: FileIO, live: list[DataFile], deletes: pa.Table) -> pa.Table:
    """``deletes`` and those of the ``live`` delete files, each position once."""
    if not live:
        return deletes
    held = deleted_positions(io, live)
    earlier = pa.table(
        {
            "file_path": pa.array(
                np.repeat(list(held), [len(positions) for positions in held.values()]),
                pa.string(),
            ),
            "pos": pa.array(np.concatenate(list(held.values())), pa.int64()),
        }
    )
    both = pa.concat_tables([earlier, deletes.select(["file_path", "pos"]).cast(earlier.schema)])
    return both.group_by(["file_path", "pos"]).aggregate([])


def live_data_files(tx: Transaction) -> dict[str, DataFile]:
    """The data files live in ``tx``'s base snapshot, by path."""
    snapshot = tx.table_metadata.current_snapshot()
    if snapshot is None:
        return {}
    return {
        entry.data_file.file_path: entry.data_file
        for manifest in snapshot.manifests(tx._table.io)
        if manifest.content == ManifestContent.DATA
        for entry in manifest.fetch_manifest_entry(tx._table.io, discard_deleted=True)
    }


class _DeleteManifestWriter(ManifestWriterV2):
    """A v2 manifest of delete files: pyiceberg writes only data manifests."""

    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}


class _RowDelta(_SnapshotProducer["_RowDelta"]):
    """Added data and delete files, each kind in its own manifest; ``removed_paths`` taken
    out of the manifests that hold them: a manifest keeps its other entries (EXISTING),
    and the removed ones are recorded DELETED in one manifest per content, as pyiceberg's
    own overwrite records them. No validation beyond "removed files are live": every
    commit of ours requires its base snapshot, so the base is what was validated.

    A scan opens every manifest its snapshot lists, so data manifests are merged as
    Iceberg Java merges them by default (``commit.manifest-merge.enabled``,
    ``commit.manifest.min-count-to-merge``, ``commit.manifest.target-size-bytes``;
    pyiceberg's own merge manager): at one manifest per refresh, and a manifest per
    removed file left holding nothing live after a fold, a read of a two-file table
    planned 202 manifests (0.8 s, benchmark 8's shape)."""

    removed_paths: set[str]

    def _validate_concurrency(self) -> None:
        """The base is required unchanged (see the class docstring)."""

    def _deleted_entries(self) -> list[ManifestEntry]:
        return []  # written by _manifests, from what _existing_manifests took out

    def _content_writer(self, content: ManifestContent) -> ManifestWriter:
        metadata = self._transaction.table_metadata
        kind = _DeleteManifestWriter if content == ManifestContent.DELETES else ManifestWriterV2
        if metadata.format_version != 2:
            raise ValueError(f"row deletes need a format v2 table, not v{metadata.format_version}")
        return kind(
            metadata.spec(),
            self.schema(),
            self.new_manifest_output(),
            self._snapshot_id,
            self._compression,
        )

    def _manifests(self) -> list[ManifestFile]:
        kept, removed = self._existing_and_removed()
        manifests: dict[ManifestContent, list[ManifestFile]] = {}
        for content, kind in (
            (ManifestContent.DATA, DataFileContent.DATA),
            (ManifestContent.DELETES, DataFileContent.POSITION_DELETES),
        ):
            written = manifests.setdefault(content, [])
            files = [f for f in self._added_data_files if f.content == kind]
            if files:
                with self._content_writer(content) as writer:
                    for data_file in files:
                        writer.add(
                            ManifestEntry.from_args(
                                status=ManifestEntryStatus.ADDED,
                                snapshot_id=self._snapshot_id,
                                data_file=data_file,
                            )
                        )
                written.append(writer.to_manifest_file())
            gone = [entry for entry in removed if entry.data_file.content == kind]
            if gone:
                with self._content_writer(content) as writer:
                    for entry in gone:
                        writer.delete(entry)
                written.append(writer.to_manifest_file())
            written.extend(m for m in kept if m.content == content)
        return self._merged(manifests[ManifestContent.DATA]) + manifests[ManifestContent.DELETES]

    def _merged(self, data_manifests: list[ManifestFile]) -> list[ManifestFile]:
        properties = self._transaction.table_metadata.properties
        return _ManifestMergeManager(
            target_size_bytes=property_as_int(
                properties,
                TableProperties.MANIFEST_TARGET_SIZE_BYTES,
                TableProperties.MANIFEST_TARGET_SIZE_BYTES_DEFAULT,
            )
            or TableProperties.MANIFEST_TARGET_SIZE_BYTES_DEFAULT,
            min_count_to_merge=property_as_int(
                properties,
                TableProperties.MANIFEST_MIN_MERGE_COUNT,
                TableProperties.MANIFEST_MIN_MERGE_COUNT_DEFAULT,
            )
            or TableProperties.MANIFEST_MIN_MERGE_COUNT_DEFAULT,
            merge_enabled=property_as_bool(
                properties, TableProperties.MANIFEST_MERGE_ENABLED, JAVA_MERGES_MANIFESTS
            ),
            snapshot_producer=self,
        ).merge_manifests(data_manifests)

    def _existing_manifests(self) -> list[ManifestFile]:
        return self._existing_and_removed()[0]

    def _existing_and_removed(self) -> tuple[list[ManifestFile], list[ManifestEntry]]:
        """The base's manifests holding live files, each without the ``removed_paths``
        (rewritten when it held one, dropped when nothing else was live in it), and the
        removed files' entries."""
        if self._parent_snapshot_id is None:
            if self.removed_paths:
                raise ValidationException("files to remove from a table without snapshots")
            return [], []
        parent = self._transaction.table_metadata.snapshot_by_id(self._parent_snapshot_id)
        if parent is None:
            raise ValueError(f"Snapshot could not be found: {self._parent_snapshot_id}")
        kept: list[ManifestFile] = []
        removed: list[ManifestEntry] = []
        for manifest in parent.manifests(io=self._io):
            if not (manifest.has_added_files() or manifest.has_existing_files()):
                continue
            entries = self.fetch_manifest_entry(manifest) if self.removed_paths else []
            hit = [e for e in entries if e.data_file.file_path in self.removed_paths]
            if not hit:
                kept.append(manifest)
                continue
            removed.extend(hit)
            self._deleted_data_files.update(e.data_file for e in hit)
            others = [e for e in entries if e.data_file.file_path not in self.removed_paths]
            if others:
                with self._content_writer(manifest.content) as writer:
                    for entry in others:
                        writer.existing(entry)
                kept.append(writer.to_manifest_file())
        missing = self.removed_paths - {entry.data_file.file_path for entry in removed}
        if missing:
            raise ValidationException(f"Missing required files to delete: {sorted(missing)[0]}")
        return kept, removed
