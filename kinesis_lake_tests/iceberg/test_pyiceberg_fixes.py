"""Work-arounds for pyiceberg defects, shown on our own write and read paths."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.catalog import Catalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, MapType, NestedField, StringType, StructType

from kinesis_lake.iceberg.arrow_schema import table_arrow_schema
from kinesis_lake.iceberg.commit import commit_arrow
from kinesis_lake.iceberg.tables import ensure_table
from kinesis_lake_tests.iceberg.helpers import ORDER_ITEMS, ORDERS


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


PRICES = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(
        2,
        "prices",
        MapType(3, StringType(), 4, StructType(NestedField(5, "cents", LongType())), False),
        required=False,
    ),
)
PRICE_MAPS = [None, {}, {"a": {"cents": 1}}, {"b": None}]
"""A null map, an empty one, one with a value, one holding a null struct: all different."""


def test_a_null_map_of_structs_stays_null_through_a_driver_side_commit(catalog: Catalog) -> None:
    """The same projection rebuilds a map whose values are structs from its offsets, keys
    and values only (pyiceberg's ArrowProjectionVisitor.map): a SQL table whose query gives
    a null map<string, struct> wrote {} for it, and so would a compaction of an evolved
    table, for good."""
    table = ensure_table(catalog, "lake.prices", PRICES)
    arrow_schema = table_arrow_schema(PRICES)
    maps = [None if m is None else list(m.items()) for m in PRICE_MAPS]
    rows = pa.table({"id": list(range(len(maps))), "prices": maps}, schema=arrow_schema)
    commit_arrow(table, rows, writer_id="w", batch_id=0)

    (task,) = table.scan().plan_files()
    in_file = pq.read_table(task.file.file_path.removeprefix("file://"))
    assert in_file.sort_by("id").column("prices").to_pylist() == maps
    assert table.scan().to_arrow().sort_by("id").column("prices").to_pylist() == maps


def test_null_lists_and_maps_of_structs_stay_null_in_a_result_split_into_many_files(
    catalog: Catalog,
) -> None:
    """pyiceberg's append splits a large result into slices of one table (one per file).
    pyarrow refuses a validity bitmap over offsets that are a slice ("Null bitmap with
    offsets slice not supported"); the projection's cast gives fresh offsets, so the
    work-arounds never meet one. This keeps it so. Here every row is its own file."""
    orders = ensure_table(catalog, "lake.orders", ORDERS)
    prices = ensure_table(catalog, "lake.prices", PRICES)
    maps = [None if m is None else list(m.items()) for m in PRICE_MAPS]
    for table, column, values in ((orders, "items", ORDER_ITEMS), (prices, "prices", maps)):
        with table.transaction() as tx:
            tx.set_properties({"write.target-file-size-bytes": "1"})
        rows = {"id": list(range(len(values))), column: values}
        data = pa.table(rows, schema=table_arrow_schema(table.schema()))
        commit_arrow(table, data, writer_id="w", batch_id=0)
        assert len(list(table.scan().plan_files())) == len(values)
        assert table.scan().to_arrow().sort_by("id").column(column).to_pylist() == values
