"""Merge-on-read deltas over months: the deleted rows a reader must skip stay bounded.

Each merge-on-read refresh marks the rows it replaces deleted and appends the winners;
nothing ever removes a deleted row until maintenance folds the deletes. Uniformly spread
updates (a profile table: 1,000 of 20,000 keys a refresh) left benchmark 8's table holding
six rows for every live one after 100 refreshes, and its read 2.75x copy-on-write's.
These tests commit through ``commit_row_delta`` as the upsert refresh does, with positions
found the way it finds them (the live rows of the files that hold the keys).
"""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.catalog import Catalog
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.sorting import SortField, SortOrder
from pyiceberg.types import LongType, NestedField, StringType

from kinesis_lake.iceberg.arrow_schema import table_arrow_schema
from kinesis_lake.iceberg.commit import commit_row_delta
from kinesis_lake.iceberg.dead_rows import FLOOR_PROPERTY
from kinesis_lake.iceberg.query import table_history
from kinesis_lake.iceberg.row_deletes import deleted_positions, live_records
from kinesis_lake.iceberg.summary import REWRITTEN_RECORDS
from kinesis_lake_tests.iceberg.helpers import NAMESPACE

SCHEMA = Schema(
    NestedField(1, "key", LongType(), required=False),
    NestedField(2, "version", LongType(), required=False),
)


def _keyed_table(catalog: Catalog, keys: int, files: int) -> Table:
    table = catalog.create_table(
        f"{NAMESPACE}.profiles",
        SCHEMA,
        sort_order=SortOrder(SortField(source_id=1)),
        properties={"format-version": "2"},
    )
    per_file = keys // files
    for first in range(0, keys, per_file):
        span = range(first, first + per_file)
        table.append(pa.table({"key": pa.array(span, pa.int64()), "version": [0] * per_file}))
    return table


def _update(table: Table, keys: list[int], version: int, **columns: pa.Array) -> None:
    """One refresh's commit: ``keys`` at ``version`` (other columns null unless given), their
    held rows deleted by position."""
    table.refresh()
    snapshot = table.current_snapshot()
    wanted = pa.array(keys, pa.int64())
    paths: list[str] = []
    positions: list[np.ndarray] = []
    tasks = list(table.scan().plan_files())
    deleted = deleted_positions(table.io, {d for task in tasks for d in task.delete_files})
    for task in tasks:
        with table.io.new_input(task.file.file_path).open() as stream:
            held = pq.read_table(stream, columns=["key"]).column("key")
        hit = np.flatnonzero(np.isin(held.to_numpy(), wanted.to_numpy()))
        hit = np.setdiff1d(hit, deleted.get(task.file.file_path, np.array([], np.int64)))
        paths += [task.file.file_path] * len(hit)
        positions.append(hit)
    deletes = pa.table(
        {"file_path": pa.array(paths, pa.string()), "pos": pa.array(np.concatenate(positions))}
    )
    schema = table_arrow_schema(table.schema())
    given = {"key": wanted, "version": pa.array([version] * len(keys), pa.int64()), **columns}
    nulls = {field.name: pa.nulls(len(keys), field.type) for field in schema}
    data = pa.table({**nulls, **given}, schema=schema).sort_by("key")
    commit_row_delta(
        table,
        data,
        deletes,
        planned_on=snapshot.snapshot_id,
        writer_id="derive:changes",
        batch_id=version,
    )


def test_uniform_updates_keep_the_deleted_rows_bounded_and_each_rewrite_sized_to_the_work(
    catalog: Catalog,
) -> None:
    keys, updates = 5_000, 500
    table = _keyed_table(catalog, keys, files=5)
    model = dict.fromkeys(range(keys), 0)
    rng = random.Random(34)
    for version in range(1, 31):
        touched = rng.sample(range(keys), updates)
        largest = max(task.file.record_count for task in table.scan().plan_files())
        _update(table, touched, version)
        model.update(dict.fromkeys(touched, version))

        table.refresh()
        rows = table.scan().to_arrow().to_pylist()
        assert len(rows) == keys, f"refresh {version}: every key exactly once"
        assert {r["key"]: r["version"] for r in rows} == model, f"refresh {version}"
        summary = table.current_snapshot().summary
        assert live_records(summary) == keys, f"refresh {version}: the summary's count"
        # Rows a refresh rewrites are bounded by its own work (a few times the rows it
        # replaced, and the one file that crosses that), never the table.
        rewritten = int(summary.get(REWRITTEN_RECORDS) or 0)
        assert rewritten <= 3 * updates + largest, f"refresh {version} rewrote {rewritten}"
        assert int(summary["added-records"]) - rewritten == updates
        physical = int(summary["total-records"])
        assert physical <= 1.5 * keys, f"refresh {version}: {physical} rows for {keys} live"
    # The history (`kinesis-lake tables history`) counts the moved rows as rewritten.
    refreshes = [h for h in table_history(table) if h["writer_id"] == "derive:changes"]
    assert len(refreshes) == 30 and {h["added_records"] for h in refreshes} == {updates}
    assert any(h["rewritten_records"] for h in refreshes)
    assert {h["total_records"] for h in refreshes} == {keys}


def test_a_few_deleted_rows_stay_deletes_and_nothing_is_rewritten(catalog: Catalog) -> None:
    """Rewriting a file costs more than skipping a handful of deleted rows: below the
    floor the delta stays a delete file, whatever share of a small file it deletes."""
    table = _keyed_table(catalog, 40, files=1)
    _update(table, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 1)

    summary = table.current_snapshot().summary
    assert summary["total-position-deletes"] == "10"
    assert summary.get("deleted-data-files") is None
    assert summary.get(REWRITTEN_RECORDS) is None
    assert int(summary["total-data-files"]) == 2


def test_files_written_before_and_after_a_new_column_are_rewritten_together(
    catalog: Catalog,
) -> None:
    """pyiceberg fills a column a file lacks with its large Arrow type (``large_string``)
    while a file that has it reads as written (``string``): the moved rows of two such
    files must still combine (they once raised, and the refresh failed on every rerun)."""
    table = _keyed_table(catalog, 200, files=2)
    with table.transaction() as tx:
        tx.set_properties({FLOOR_PROPERTY: "0"})
    with table.update_schema() as update:
        update.add_column("email", StringType())
    _update(table, list(range(200, 300)), 1, email=pa.array(["new@example.com"] * 100))

    _update(table, [*range(0, 30), *range(200, 230)], 2)  # 30% of an old and the new file

    summary = table.current_snapshot().summary
    assert int(summary[REWRITTEN_RECORDS]) == 140  # both files' 70 live rows each
    assert int(summary["deleted-data-files"]) == 2
    rows = {r["key"]: (r["version"], r["email"]) for r in table.scan().to_arrow().to_pylist()}
    assert len(rows) == 300
    assert rows[0] == (2, None) and rows[99] == (0, None)
    assert rows[200] == (2, None) and rows[299] == (1, "new@example.com")
    assert live_records(summary) == 300
