"""What a fresh read of a keyed table reads on the driver: only the data files whose key
statistics can hold the keys it decides again, however many keys that is (pyiceberg stops
pruning an ``In`` of more than 200 values; ``iceberg/filters.any_of`` keeps it pruning)."""

from __future__ import annotations

import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.io.pyarrow import PyArrowFile, PyArrowFileIO
from pyiceberg.table import Table

from kinesis_lake.pipeline.fresh_read import SnapshotRows, _rows_with_keys


class CountingFileIO(PyArrowFileIO):
    """pyiceberg's own FileIO, counting the data files it opens."""

    def __init__(self, properties: dict[str, str]) -> None:
        super().__init__(properties)
        self.opened: list[str] = []

    def new_input(self, location: str) -> PyArrowFile:
        if location.endswith(".parquet"):
            self.opened.append(location)
        return super().new_input(location)


def test_a_keyed_read_of_more_than_200_keys_opens_only_the_files_that_can_hold_them(
    catalog: SqlCatalog,
):
    schema = pa.schema([pa.field("id", pa.string(), nullable=False), pa.field("n", pa.int64())])
    table = catalog.create_table("lake.orders", schema=schema)
    for prefix in ("a", "b", "c"):  # three files, disjoint key ranges
        ids = [f"{prefix}{i:04d}" for i in range(300)]
        table.append(pa.table({"id": ids, "n": list(range(300))}, schema=schema))
    table = catalog.load_table("lake.orders")
    snapshot = table.current_snapshot()
    assert snapshot is not None
    counting = CountingFileIO(table.io.properties)
    watched = Table(table.name(), table.metadata, table.metadata_location, counting, catalog)
    keys = pa.array([f"b{i:04d}" for i in range(201)])  # all in the second file's range

    rows = _rows_with_keys(SnapshotRows(watched, snapshot.snapshot_id, schema), "id", keys)

    assert sorted(rows.column("id").to_pylist()) == sorted(keys.to_pylist())
    assert len(counting.opened) == 1, counting.opened
