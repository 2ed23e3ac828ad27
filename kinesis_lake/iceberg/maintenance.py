"""Table upkeep a streaming writer makes necessary: expiry, compaction, orphan removal.

A streaming writer commits every few seconds, so it leaves many small files and a long
snapshot history behind; commit latency grows with that history and scans slow down with
the file count. pyiceberg 0.12 only expires snapshots (and deletes no files doing so),
so compaction and orphan-file removal are built here on its public commit API. All three
are safe while ingestion keeps committing: they retry conflicts on fresh metadata and
never change which rows the table holds.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from pyarrow.fs import FileSelector, FileSystem, FileType
from pyiceberg.exceptions import CommitFailedException, ValidationException
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io.pyarrow import ArrowScan, PyArrowFileIO
from pyiceberg.table import FileScanTask, Table, Transaction
from pyiceberg.table.refs import SnapshotRefType
from pyiceberg.table.snapshots import ancestors_of

from kinesis_lake.errors import TableError
from kinesis_lake.iceberg import summary as keys
from kinesis_lake.iceberg.commit import DEFAULT_MAX_ATTEMPTS
from kinesis_lake.iceberg.data_files import (
    TableWriteTarget,
    data_files_of,
    delete_files,
    write_data_files,
)
from kinesis_lake.iceberg.retry import adopt_commit, backoff, fail_fast
from kinesis_lake.iceberg.row_deletes import (
    deleted_positions,
    live_batches,
    live_rows,
    stage_row_delta,
)
from kinesis_lake.iceberg.transaction import MetadataReusingTransaction

logger = logging.getLogger(__name__)

# A file under this share of the target size is worth rewriting (Iceberg's own default).
_SMALL_FILE_FRACTION = 0.75


@dataclass
class MaintenanceReport:
    """What a maintenance call did, in numbers a dashboard can plot.

    ``files_*`` and ``bytes_*`` describe the table's live data files before and after.
    """

    files_before: int = 0
    files_after: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    snapshots_expired: int = 0
    orphans_removed: int = 0
    orphan_bytes_removed: int = 0
    files_rewritten: int = 0
    files_written: int = 0
    partitions_compacted: int = 0
    delete_files_folded: int = 0
    commit_attempts: int = 0


def expire_snapshots(table: Table, *, older_than_ms: int, retain_last: int) -> MaintenanceReport:
    """Forget snapshots older than ``older_than_ms``, keeping the last ``retain_last``.

    The ``retain_last`` most recent snapshots of the current history and every branch or
    tag head are kept whatever their age. No file is deleted: files only the expired
    snapshots used become orphans for :func:`remove_orphan_files`.
    """
    if retain_last < 1:
        raise ValueError(f"retain_last must be at least 1, got {retain_last}")
    table.refresh()
    report = _with_live_files(MaintenanceReport(), table, before=True)
    for attempt in range(1, DEFAULT_MAX_ATTEMPTS + 1):
        metadata = table.metadata
        recent = itertools.islice(ancestors_of(table.current_snapshot(), metadata), retain_last)
        kept = {snapshot.snapshot_id for snapshot in recent}
        kept |= {
            ref.snapshot_id
            for ref in metadata.refs.values()
            if ref.snapshot_ref_type in (SnapshotRefType.BRANCH, SnapshotRefType.TAG)
        }
        expired = [
            s.snapshot_id
            for s in metadata.snapshots
            if s.timestamp_ms < older_than_ms and s.snapshot_id not in kept
        ]
        if not expired:
            break
        report.commit_attempts = attempt
        view = fail_fast(table)
        try:
            with view.maintenance.expire_snapshots() as expiry:
                expiry.by_ids(expired)
        except CommitFailedException:
            if attempt == DEFAULT_MAX_ATTEMPTS:
                raise
            backoff(attempt)
            table.refresh()
            continue
        adopt_commit(table, view)
        report.snapshots_expired = len(expired)
        break
    return _with_live_files(report, table, before=False)


def compact(
    table: Table, *, target_file_size_bytes: int, min_input_files: int = 2
) -> MaintenanceReport:
    """Rewrite each partition's small files into files of about the target size.

    First, row deletes are folded (:func:`fold_deletes`). Then a partition is rewritten
    when it holds at least ``min_input_files`` files smaller than 3/4 of the target. Its
    rows are streamed into new files, then one commit per partition swaps old files for
    new. pyiceberg cannot produce Iceberg's ``replace`` operation, so the snapshot is an
    ``overwrite`` marked ``kinesis-lake.operation=compaction`` (incremental readers skip
    it). A commit that loses a race with an ingestion append is retried on fresh metadata
    with the same new files, which stays correct as long as every old file is still live;
    if one is gone (another compaction took it) this partition is abandoned and its new
    files deleted.
    """
    if min_input_files < 2:
        raise ValueError(f"min_input_files must be at least 2, got {min_input_files}")
    table.refresh()
    report = _with_live_files(MaintenanceReport(), table, before=True)
    target = dataclasses.replace(
        TableWriteTarget.from_table(table), target_file_size_bytes=target_file_size_bytes
    )
    fold_deletes(table, target, report)
    planned_on = table.current_snapshot()
    for tasks in _small_files_by_partition(table, target_file_size_bytes, min_input_files):
        assert planned_on is not None  # a table with files has a snapshot
        _rewrite_partition(table, target, tasks, report, planned_on.snapshot_id)
    return _with_live_files(report, table, before=False)


def fold_deletes(table: Table, target: TableWriteTarget, report: MaintenanceReport) -> None:
    """Rewrite every data file that position deletes remove rows from, without those rows,
    and drop the table's delete files, in one commit (a compaction).

    Merge-on-read upsert refreshes add deletes (merged into one delete file since
    :func:`~kinesis_lake.iceberg.row_deletes.stage_row_delta` merges them; a table written
    before holds one per refresh); a reader applies them to every row it reads, so reads
    slow down with the deletes until this folds them. Each file is rewritten on
    its own, so it keeps its narrow key range (what upsert refreshes find candidates by).
    Every delete file is dropped: each live file it removes rows from is rewritten here.
    If any commit since planning added delete files (a refresh), the fold is abandoned and
    its files deleted: the new deletes may point into files it rewrote. A refresh that
    added none still replaced (or, rewriting, removed) the delete files the fold removes,
    so the commit finds them gone and is abandoned the same way. The next pass folds them
    all.
    """
    table.refresh()
    planned_on = table.current_snapshot()
    if planned_on is None:
        return
    tasks = list(table.scan(snapshot_id=planned_on.snapshot_id).plan_files())
    deletes = {d for task in tasks for d in task.delete_files}
    if not deletes:
        return
    deleted = deleted_positions(table.io, deletes)
    folded = [task for task in tasks if len(deleted.get(task.file.file_path, ()))]
    scan = ArrowScan(table.metadata, table.io, table.schema(), AlwaysTrue())
    prefix = f"fold-{uuid.uuid4().hex}"
    written = [
        file
        for index, task in enumerate(folded)
        for file in write_data_files(
            target, live_batches(scan, task, deleted), file_prefix=f"{prefix}-{index}"
        )
    ]
    new_paths = [file.path for file in written]
    new_files = data_files_of(table.metadata, written)
    if sum(f.record_count for f in new_files) != live_rows(table.io, folded):
        delete_files(target.io_properties, target.location, new_paths)
        raise TableError(f"Folding the deletes of {target.identifier} lost or added rows.")
    removed = [task.file.file_path for task in folded] + sorted(d.file_path for d in deletes)
    summary = {keys.OPERATION: keys.COMPACTION}

    def stage(tx: Transaction) -> None:
        stage_row_delta(tx, summary, data_files=new_files, removed=removed)

    def refreshed_since() -> bool:
        return _deletes_added_since(table, planned_on.snapshot_id)

    if _commit_rewrite(table, stage, new_paths, report, abandon=refreshed_since):
        report.files_rewritten += len(folded)
        report.delete_files_folded += len(deletes)


def _deletes_added_since(table: Table, snapshot_id: int) -> bool:
    """Whether a snapshot after ``snapshot_id`` added delete files (or it is gone)."""
    for snapshot in ancestors_of(table.current_snapshot(), table.metadata):
        if snapshot.snapshot_id == snapshot_id:
            return False
        if snapshot.summary is not None and int(snapshot.summary.get("added-delete-files") or 0):
            return True
    return True


def remove_orphan_files(table: Table, *, older_than_ms: int) -> MaintenanceReport:
    """Delete files under the table's data/ and metadata/ that nothing references.

    Orphans come from failed or duplicate batches, lost commit races and expired
    snapshots. Only files last modified before ``older_than_ms`` are candidates: a
    file written by a commit still in flight is unreferenced too, so the window must be
    longer than the longest write-to-commit time (days in production, as in Iceberg).
    """
    io = PyArrowFileIO(table.io.properties)
    location = table.location().rstrip("/")
    candidates: list[tuple[FileSystem, str, int]] = []
    for directory in (f"{location}/data", f"{location}/metadata"):
        scheme, netloc, path = PyArrowFileIO.parse_location(directory)
        filesystem = io.fs_by_scheme(scheme, netloc)
        selector = FileSelector(path, recursive=True, allow_not_found=True)
        candidates.extend(
            (filesystem, info.path, info.size or 0)
            for info in filesystem.get_file_info(selector)
            if info.type == FileType.File
            and info.mtime_ns is not None
            and info.mtime_ns // 1_000_000 < older_than_ms
        )
    # Listed first, referenced second: a commit landing in between is seen as referenced.
    table.refresh()
    referenced = _referenced_paths(table)
    report = _with_live_files(MaintenanceReport(), table, before=True)
    for filesystem, path, size in candidates:
        if path not in referenced:
            filesystem.delete_file(path)
            report.orphans_removed += 1
            report.orphan_bytes_removed += size
    logger.info("Removed %d orphan files from %s", report.orphans_removed, location)
    return _with_live_files(report, table, before=False)


def delete_unreferenced(table: Table, paths: list[str]) -> int:
    """Delete those of ``paths`` that no snapshot of ``table`` references; return how many.

    For a writer's own new files after a failed or skipped commit. An exception from a
    commit does not prove it did not land (a catalog can apply it and lose the answer),
    so the table is refreshed and read before anything is deleted. The read only proves
    the present: callers pass files no commit still in flight can add, ones never sent to
    the catalog, or sent in an attempt whose base the table has since moved past (every
    commit requires its base snapshot, so that attempt can no longer land; issue 31).
    """
    if not paths:
        return 0
    table.refresh()
    referenced = _referenced_paths(table)
    unreferenced = [p for p in paths if PyArrowFileIO.parse_location(p)[2] not in referenced]
    kept = len(paths) - len(unreferenced)
    if kept:
        logger.warning(
            "%d of %d files of a failed commit to %s are referenced by the table (the commit "
            "landed): kept",
            kept,
            len(paths),
            table.name(),
        )
    delete_files(table.io.properties, table.location(), unreferenced)
    return len(unreferenced)


def _small_files_by_partition(
    table: Table, target_file_size_bytes: int, min_input_files: int
) -> list[list[FileScanTask]]:
    """Per partition of the current spec, its small files, where there are enough."""
    threshold = target_file_size_bytes * _SMALL_FILE_FRACTION
    spec_id = table.spec().spec_id
    by_partition: dict[object, list[FileScanTask]] = defaultdict(list)
    for task in table.scan().plan_files():
        data_file = task.file
        # Files of an older spec or with delete files are left for a full rewrite.
        reusable = data_file.spec_id == spec_id and not task.delete_files
        if reusable and data_file.file_size_in_bytes < threshold:
            by_partition[data_file.partition].append(task)
    return [tasks for tasks in by_partition.values() if len(tasks) >= min_input_files]


def _rewrite_partition(
    table: Table,
    target: TableWriteTarget,
    tasks: list[FileScanTask],
    report: MaintenanceReport,
    planned_on: int,
) -> None:
    """Rewrite ``tasks`` (planned on snapshot ``planned_on``, none with deletes) into
    files of the target size. Abandoned if a commit since planning added deletes: they
    may delete rows of the old files that the rewrite, read as planned, still holds, and
    committed it would bring them back (the deletes name the old files)."""
    scan = ArrowScan(table.metadata, table.io, table.schema(), AlwaysTrue())
    written = write_data_files(
        target, scan.to_record_batches(tasks), file_prefix=f"compact-{uuid.uuid4().hex}"
    )
    new_paths = [file.path for file in written]
    new_files = data_files_of(table.metadata, written)
    rows_in = sum(task.file.record_count for task in tasks)
    rows_out = sum(data_file.record_count for data_file in new_files)
    if rows_in != rows_out:
        delete_files(target.io_properties, target.location, new_paths)
        raise TableError(
            f"Compaction of {target.identifier} read {rows_in} rows but wrote {rows_out}; "
            "nothing was committed."
        )
    summary = {keys.OPERATION: keys.COMPACTION}

    def stage(tx: Transaction) -> None:
        # The overwrite checks that every old file is still live in the new base.
        with tx.update_snapshot(snapshot_properties=summary).overwrite() as rewrite:
            for task in tasks:
                rewrite.delete_data_file(task.file)
            for data_file in new_files:
                rewrite.append_data_file(data_file)

    def deleted_since() -> bool:
        return _deletes_added_since(table, planned_on)

    if _commit_rewrite(table, stage, new_paths, report, abandon=deleted_since):
        report.files_rewritten += len(tasks)
        report.partitions_compacted += 1


def _commit_rewrite(
    table: Table,
    stage: Callable[[Transaction], None],
    new_paths: list[str],
    report: MaintenanceReport,
    abandon: Callable[[], bool] = lambda: False,
) -> bool:
    """Commit a rewrite that swaps old files for ``new_paths``, retrying conflicts on fresh
    metadata; abandoned (its new files deleted) when ``abandon()`` says so or its old
    files are no longer live. Whether it landed."""
    for attempt in range(1, DEFAULT_MAX_ATTEMPTS + 1):
        report.commit_attempts += 1
        if abandon():
            logger.warning("Rewrite of %s abandoned: it changed meanwhile", table.name())
            delete_unreferenced(table, new_paths)
            return False
        tx = MetadataReusingTransaction(view := fail_fast(table))
        try:
            stage(tx)
            tx.commit_transaction()
        except ValidationException:
            # Also what a retry sees when its previous attempt landed but raised: the
            # old files are gone because this rewrite removed them.
            logger.warning("Rewrite of %s abandoned: its files changed meanwhile", table.name())
            delete_unreferenced(table, new_paths)
            return False
        except CommitFailedException:
            if attempt == DEFAULT_MAX_ATTEMPTS:
                # Kept: a conflict can be a retrying client's lie about an attempt the
                # catalog still holds, whose base may be current (see delete_unreferenced).
                # Orphan-file removal reclaims them if it never lands.
                raise
            backoff(attempt)
            table.refresh()
            continue
        adopt_commit(table, view)
        report.files_written += len(new_paths)
        return True
    return False


def _referenced_paths(table: Table) -> set[str]:
    """Storage paths (as the filesystem lists them) of every file the table still uses."""
    metadata = table.metadata
    paths = {table.metadata_location, *(entry.metadata_file for entry in metadata.metadata_log)}
    paths.update(s.statistics_path for s in metadata.statistics)
    paths.update(s.statistics_path for s in metadata.partition_statistics)
    manifests: set[str] = set()
    for snapshot in metadata.snapshots:
        paths.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(table.io):
            if manifest.manifest_path in manifests:
                continue
            manifests.add(manifest.manifest_path)
            # A file only marked deleted is needed by no snapshot kept in this metadata.
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
                paths.add(entry.data_file.file_path)
    paths |= manifests
    return {PyArrowFileIO.parse_location(path)[2] for path in paths}


def _with_live_files(report: MaintenanceReport, table: Table, *, before: bool) -> MaintenanceReport:
    files, size = _live_files(table)
    if before:
        report.files_before, report.bytes_before = files, size
    else:
        report.files_after, report.bytes_after = files, size
    return report


def _live_files(table: Table) -> tuple[int, int]:
    """Live data files and their bytes, from the current snapshot's summary totals.

    Every commit records them, so reading them costs nothing; planning a scan to count
    files read every manifest, twice per maintenance pass, and dominated expiry on
    tables of many small files. Tables whose writer left no totals are scanned.
    """
    snapshot = table.current_snapshot()
    if snapshot is None:
        return 0, 0
    totals = snapshot.summary.additional_properties if snapshot.summary else {}
    if "total-data-files" in totals and "total-files-size" in totals:
        return int(totals["total-data-files"]), int(totals["total-files-size"])
    tasks = list(table.scan().plan_files())
    return len(tasks), sum(task.file.file_size_in_bytes for task in tasks)
