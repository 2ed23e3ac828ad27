"""Mostly deleted data files are rewritten by the merge-on-read delta that deletes into them.

A merge-on-read refresh marks the rows it replaces deleted and never removes one; only
maintenance folded them back. With updates spread uniformly over the keys (a profile or
order table), every file collects deleted rows at the same pace, so between maintenance
passes a reader reads ever more rows it then drops, and the delta rereads ever more
positions to merge into its one delete file: benchmark 8's table held six rows for each
live one after 100 refreshes of 1,000 of its 20,000 keys, and a read took 2.75x
copy-on-write's.

So a delta also rewrites the files with the largest deleted share, at least
``REWRITE_SHARE`` of their rows, without their deleted rows and in the same snapshot, up
to ``REWRITE_FACTOR`` times the rows it deletes itself (always one file, so a file larger
than that budget is still rewritten when its turn comes). The cost stays with the work:
at most a few rows rewritten per row replaced, or one file, whatever the table's size.
With uniform updates each file is rewritten once every ``1 / REWRITE_FACTOR`` of the
table's rows have been replaced, so a file's deleted share stays under about
``1 / REWRITE_FACTOR``, half that on average. Tables with fewer than ``REWRITE_FLOOR``
deleted rows (the table property ``FLOOR_PROPERTY`` overrides it) are left alone: a
reader barely notices them, and a rewrite of a small table's one file would cost more
than the deletes it saves.

Invariant: the rows moved are exactly the chosen files' live rows (their deletes, old and
new, applied), and the chosen files leave the table in the snapshot that adds them again.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io.pyarrow import ArrowScan
from pyiceberg.manifest import DataFile
from pyiceberg.table import FileScanTask, Transaction
from pyiceberg.utils.properties import property_as_int

from kinesis_lake.iceberg.arrow_schema import table_arrow_schema
from kinesis_lake.iceberg.row_deletes import (
    deleted_positions,
    live_batches,
    live_data_files,
    live_delete_files,
)

REWRITE_SHARE = 0.2
REWRITE_FACTOR = 3
REWRITE_FLOOR = 1_000
FLOOR_PROPERTY = "kinesis-lake.rewrite-after-deleted-rows"


@dataclass(frozen=True)
class Rewrite:
    """The files a delta takes out (``paths``) and their live rows (``rows``), to append."""

    paths: frozenset[str] = frozenset()
    rows: pa.Table | None = None
    order: tuple[str, ...] = ()

    def appended_to(self, data: pa.Table) -> pa.Table:
        """``data`` with the moved rows, sorted by the table's sort order (ascending, the
        upsert tables' key), as its writers keep every file."""
        if self.rows is None or not self.rows.num_rows:
            return data
        both = pa.concat_tables([data, self.rows.cast(data.schema)])
        return both.sort_by([(name, "ascending") for name in self.order]) if self.order else both


NOTHING = Rewrite()


def plan_rewrite(tx: Transaction, deletes: pa.Table) -> Rewrite:
    """The mostly deleted files to rewrite in the delta that adds ``deletes`` (``file_path``,
    ``pos``: the rows it replaces) on ``tx``'s base, with their live rows in the table's
    current schema, sorted by its sort order."""
    if not deletes.num_rows:
        return NOTHING
    io = tx._table.io
    live = live_delete_files(tx)
    metadata = tx.table_metadata
    floor = property_as_int(metadata.properties, FLOOR_PROPERTY, REWRITE_FLOOR) or 0
    if sum(f.record_count for f in live) + deletes.num_rows < floor:
        return NOTHING
    deleted = deleted_positions(io, live)
    new = deletes.column("file_path").to_numpy(zero_copy_only=False)
    positions = deletes.column("pos").to_numpy()
    for path in np.unique(new):
        earlier = deleted.get(str(path), np.array([], np.int64))
        deleted[str(path)] = np.union1d(earlier, positions[new == path])
    files = live_data_files(tx)
    chosen = _most_deleted(files, deleted, budget=REWRITE_FACTOR * deletes.num_rows)
    if not chosen:
        return NOTHING
    scan = ArrowScan(metadata, io, metadata.schema(), AlwaysTrue())
    schema = table_arrow_schema(metadata.schema())
    # Each batch in the table's types: a file without a newer column reads it as pyiceberg's
    # large type (large_string), a file with it as written (string).
    batches = [
        batch.cast(schema)
        for data_file in chosen
        for batch in live_batches(scan, FileScanTask(data_file), deleted)
    ]
    rows = pa.Table.from_batches(batches, schema=schema)
    names = (metadata.schema().find_column_name(f.source_id) for f in metadata.sort_order().fields)
    return Rewrite(frozenset(f.file_path for f in chosen), rows, tuple(n for n in names if n))


def _most_deleted(
    files: dict[str, DataFile], deleted: dict[str, np.ndarray], budget: int
) -> list[DataFile]:
    """Files of at least ``REWRITE_SHARE`` deleted rows, the largest share first, until the
    rows taken reach ``budget`` (the first is always taken)."""
    shares = sorted(
        (
            (len(positions) / files[path].record_count, path)
            for path, positions in deleted.items()
            if path in files and len(positions) >= REWRITE_SHARE * files[path].record_count
        ),
        reverse=True,
    )
    chosen: list[DataFile] = []
    rows = 0
    for _, path in shares:
        if rows >= budget:
            break
        chosen.append(files[path])
        rows += files[path].record_count
    return chosen
