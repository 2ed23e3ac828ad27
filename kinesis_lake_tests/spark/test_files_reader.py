"""The Iceberg files reader (spark/iceberg/files_reader.py): small files packed into few
tasks, each row read once, deleted rows dropped, positions still the file's own."""

from __future__ import annotations

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from kinesis_lake.iceberg.row_deletes import stage_row_delta
from kinesis_lake.spark.iceberg.files_reader import FILE_PATH, POSITION, read_planned_files
from kinesis_lake.spark.packing import known_cores

SCHEMA = Schema(
    NestedField(1, "key", LongType(), required=False),
    NestedField(2, "value", StringType(), required=False),
)
FILES = 12


def test_small_files_are_read_by_a_task_per_core_with_their_deletes_and_positions(
    spark, catalog: Catalog
) -> None:
    """Twelve small files on two cores: two tasks (Spark's file-split rule), not twelve;
    the rows are pyiceberg's (deletes applied) and each row's position is its row number
    in its own file, what a merge-on-read refresh deletes by."""
    table = catalog.create_table("lake.small_files", SCHEMA, properties={"format-version": "2"})
    for file in range(FILES):
        keys = pa.array(range(file * 10, file * 10 + 10), pa.int64())
        table.append(pa.table({"key": keys, "value": [f"v{k}" for k in keys.to_pylist()]}))
    planned = list(table.scan().plan_files())
    deletes = pa.table(
        {
            "file_path": [task.file.file_path for task in planned[:3]],
            "pos": pa.array([4, 0, 9], pa.int64()),
        }
    )
    before = table.current_snapshot()
    assert before is not None
    with table.transaction() as tx:
        stage_row_delta(tx, {}, deletes=deletes, deletes_planned_on=before.snapshot_id)
    table.refresh()
    planned = list(table.scan().plan_files())

    frame = read_planned_files(spark, table, planned, positions=True)

    assert len(planned) == FILES
    assert frame.rdd.getNumPartitions() == known_cores(spark) == 2
    rows = frame.toArrow()
    expected = table.scan().to_arrow()
    assert sorted(rows.column("key").to_pylist()) == sorted(expected.column("key").to_pylist())
    assert rows.num_rows == FILES * 10 - 3
    first_rows = {task.file.file_path: task for task in planned}
    for row in rows.to_pylist():
        assert row[FILE_PATH] in first_rows
        # Each file holds ten consecutive keys in order: key % 10 is the row's position.
        assert row[POSITION] == row["key"] % 10
