"""What was appended to a table since a snapshot: the input of incremental refreshes.

A derived table records the source snapshot it has caught up to (its commits carry
:data:`SOURCE_SNAPSHOT_PROPERTY` in their summary and the source position in their
watermark), then reads only the data files appended after it instead of the whole
source. Appends are found the way Iceberg itself tracks them: manifest entries with
status ADDED whose snapshot lies in the range, via pyiceberg's incremental append scan.

Only appends can be followed this way. A compaction rewrites files without changing
rows, so it is skipped; any other change to existing rows (delete, overwrite) means the
appended files no longer tell the whole story, and a full refresh is required instead.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io import load_file_io
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Operation, Snapshot, ancestors_of

from kinesis_lake.errors import SnapshotExpiredError, TableError
from kinesis_lake.iceberg import summary as keys
from kinesis_lake.iceberg.arrow_schema import conform_batch, table_arrow_schema
from kinesis_lake.iceberg.commit import last_committed_batch

# Summary key of a derived table's snapshot: the source snapshot its rows come up to.
SOURCE_SNAPSHOT_PROPERTY = "kinesis-lake.source-snapshot-id"


class IncrementalReadError(TableError, RuntimeError):
    """The changes since a snapshot cannot be read as appends: a full refresh is needed."""


@dataclass
class IncrementalSlice:
    """Data files appended in the snapshot range ``(from_snapshot_id, to_snapshot_id]``.

    ``from_snapshot_id`` None means "from the beginning": every live file of the table.
    ``to_snapshot_id`` is None only for a table without snapshots.
    """

    from_snapshot_id: int | None
    to_snapshot_id: int | None
    files: list[str]
    rows: int


def caught_up_snapshot_id(source: Table, derived: Table) -> int | None:
    """The snapshot of ``source`` that ``derived`` last caught up to; None when it never has.

    The one rule for the refresh (where to read from) and the checks (how many source rows
    were processed). It reads the commit protocol's watermark on ``derived``: the source
    snapshot's sequence number, moved by every refresh (one that wrote no rows too) and kept
    through expiry of ``derived``'s own history, which the summary key
    :data:`SOURCE_SNAPSHOT_PROPERTY` is not. The newest source snapshot at or before it is
    the one.

    Raises:
        SnapshotExpiredError: ``derived`` caught up to a snapshot that, with every earlier
            one, has been expired from ``source``.
    """
    done = last_committed_batch(derived, keys.derived_writer_id(source.name()[-1]))
    if done is None:
        return None
    at_or_before = [s for s in source.metadata.snapshots if (s.sequence_number or 0) <= done]
    if not at_or_before:
        raise SnapshotExpiredError(
            f"{'.'.join(source.name())} no longer has the snapshot (sequence number {done}) "
            f"{'.'.join(derived.name())} last processed: it was expired. Rebuild the derived "
            "table from the whole source (drop it; the next refresh recreates it), and keep "
            "snapshots longer than the refresh interval (history.expire.max-snapshot-age-ms)."
        )
    return max(at_or_before, key=lambda s: s.sequence_number or 0).snapshot_id


def appended_since(
    table: Table, from_snapshot_id: int | None, to_snapshot_id: int | None = None
) -> IncrementalSlice:
    """The data files appended to ``table`` after ``from_snapshot_id``, up to
    ``to_snapshot_id`` (default: now).

    Raises:
        IncrementalReadError: ``from_snapshot_id`` is no longer in the table's history
            (expired, rolled back, table recreated), or a snapshot since then deleted or
            overwrote rows.
    """
    current = table.current_snapshot() if to_snapshot_id is None else None
    if to_snapshot_id is not None:
        current = table.snapshot_by_id(to_snapshot_id)
        if current is None:
            raise _history_gone(table, to_snapshot_id)
    if from_snapshot_id is None:
        # Everything: the live files, not the append history, which may be expired.
        tasks = list(table.scan(snapshot_id=current.snapshot_id).plan_files()) if current else []
        if any(task.delete_files for task in tasks):
            # A slice is file paths; a reader of them would bring deleted rows back.
            raise IncrementalReadError(
                f"Table {'.'.join(table.name())} has row deletes (a merge-on-read upsert "
                "table): its rows cannot be read as appended files. Read it whole "
                "(refresh: full), which applies the deletes."
            )
        return IncrementalSlice(
            from_snapshot_id=None,
            to_snapshot_id=current.snapshot_id if current else None,
            files=[task.file.file_path for task in tasks],
            rows=sum(task.file.record_count for task in tasks),
        )
    if current is None:
        raise _history_gone(table, from_snapshot_id)
    if current.snapshot_id == from_snapshot_id:
        return IncrementalSlice(from_snapshot_id, from_snapshot_id, [], 0)
    for snapshot in _snapshots_after(table, current, from_snapshot_id):
        _require_no_row_changes(table, snapshot)
    scan = table.incremental_append_scan(
        from_snapshot_id_exclusive=from_snapshot_id,
        to_snapshot_id_inclusive=current.snapshot_id,
    )
    tasks = list(scan.plan_files())
    return IncrementalSlice(
        from_snapshot_id=from_snapshot_id,
        to_snapshot_id=current.snapshot_id,
        files=[task.file.file_path for task in tasks],
        rows=sum(task.file.record_count for task in tasks),
    )


def read_files(table: Table, files: Iterable[str]) -> pa.Table:
    """Rows of some of ``table``'s data files, in its current schema (driver-side)."""
    schema = table_arrow_schema(table.schema())
    parts = [read_data_file(table.io.properties, path, schema) for path in files]
    return pa.concat_tables(parts) if parts else schema.empty_table()


def read_data_file(io_properties: dict[str, str], path: str, arrow_schema: pa.Schema) -> pa.Table:
    """One Parquet data file read through FileIO and shaped to ``arrow_schema``.

    Catalog-free, for executors. Columns are matched by name, as our writers and
    add_files' name mapping match them; columns added to the table after the file was
    written read as nulls.
    """
    io = load_file_io(io_properties, path)
    with io.new_input(path).open() as stream:
        parquet = pq.ParquetFile(stream)
        present = set(parquet.schema_arrow.names)
        rows = parquet.read(columns=[name for name in arrow_schema.names if name in present])
    batches = [conform_batch(batch, arrow_schema) for batch in rows.to_batches()]
    return pa.Table.from_batches(batches, schema=arrow_schema)


def _snapshots_after(table: Table, current: Snapshot, from_snapshot_id: int) -> list[Snapshot]:
    """Snapshots in ``(from_snapshot_id, current]`` along the parent chain, newest first.

    ``from_snapshot_id`` must itself still be there: pyiceberg's expiry also clears the
    parent id of the snapshot after an expired one, so nothing else proves the range whole.
    """
    newer: list[Snapshot] = []
    for snapshot in ancestors_of(current, table.metadata):
        if snapshot.snapshot_id == from_snapshot_id:
            return newer
        newer.append(snapshot)
    raise _history_gone(table, from_snapshot_id)


def _require_no_row_changes(table: Table, snapshot: Snapshot) -> None:
    summary = snapshot.summary
    operation = summary.operation if summary else None
    if operation in (Operation.APPEND, Operation.REPLACE):
        return
    if summary is not None and summary.get(keys.OPERATION) == keys.COMPACTION:
        return
    raise IncrementalReadError(
        f"Snapshot {snapshot.snapshot_id} of table {'.'.join(table.name())} is an "
        f"'{operation.value if operation else 'unknown'}' that changed existing rows, so the "
        "files appended since the last refresh do not describe the change. A full refresh "
        "is needed: rebuild the derived table from the whole source table."
    )


def _history_gone(table: Table, snapshot_id: int) -> IncrementalReadError:
    return IncrementalReadError(
        f"Snapshot {snapshot_id} of table {'.'.join(table.name())} is no longer in its "
        "history (expired, rolled back, or the table was recreated), so the rows appended "
        "since it cannot be listed. A full refresh is needed: rebuild the derived table "
        "from the whole source table, or keep snapshots longer than the refresh interval."
    )
