"""Work-arounds for pyiceberg defects, shown on our own write and read paths."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.catalog import Catalog

from kinesis_lake.iceberg.commit import commit_arrow
from kinesis_lake.iceberg.data_files import table_arrow_schema
from kinesis_lake.iceberg.tables import ensure_table
from kinesis_lake_tests.iceberg.test_query import ORDER_ITEMS, ORDERS


def test_a_null_list_of_structs_stays_null_through_a_driver_side_commit(catalog: Catalog) -> None:
    """commit_arrow (upsert, SQL and replayed tables) goes through pyiceberg's append,
    whose projection wrote [] for a null list of structs (apache/iceberg-python#3833)."""
    table = ensure_table(catalog, "lake.orders", ORDERS)
    rows = {"id": list(range(len(ORDER_ITEMS))), "items": ORDER_ITEMS}
    commit_arrow(
        table, pa.table(rows, schema=table_arrow_schema(ORDERS)), writer_id="w", batch_id=0
    )

    (task,) = table.scan().plan_files()
    in_file = pq.read_table(task.file.file_path.removeprefix("file://"))
    assert in_file.sort_by("id").column("items").to_pylist() == ORDER_ITEMS
    assert table.scan().to_arrow().sort_by("id").column("items").to_pylist() == ORDER_ITEMS
