"""Key filters that keep file pruning for any number of keys.

pyiceberg stops using file statistics for an ``In`` of more than 200 values (it says
"might match" for every file), so an upsert refresh touching 201 keys read and considered
every file of its table: cost in the table's size, not the keys touched.
"""

from __future__ import annotations

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.expressions import In
from pyiceberg.schema import Schema
from pyiceberg.types import NestedField, StringType

from kinesis_lake.iceberg.filters import any_of
from kinesis_lake.iceberg.tables import ensure_table

FILES = 10
KEYS_PER_FILE = 300


def test_a_filter_on_many_keys_plans_only_the_files_that_can_hold_them(catalog: Catalog):
    schema = Schema(NestedField(1, "key", StringType(), required=True))
    table = ensure_table(catalog, "lake.keyed", schema)
    arrow = pa.schema([pa.field("key", pa.string(), nullable=False)])
    for file in range(FILES):  # each file a narrow, sorted key range
        keys = [f"k{file:02d}-{i:04d}" for i in range(KEYS_PER_FILE)]
        table.append(pa.table({"key": keys}, schema=arrow))
    wanted = [f"k03-{i:04d}" for i in range(250)]

    assert len(list(table.scan(row_filter=In("key", wanted)).plan_files())) == FILES
    assert len(list(table.scan(row_filter=any_of("key", wanted)).plan_files())) == 1
    rows = table.scan(row_filter=any_of("key", wanted)).to_arrow()
    assert sorted(rows.column("key").to_pylist()) == wanted


def test_a_filter_on_a_hundred_thousand_keys_deletes_them(catalog: Catalog):
    """An upsert's first refresh touches every key of its source: 100k keys are 500 ``In``
    chunks, which a left-deep ``Or`` chain nests past Python's recursion limit when
    pyiceberg binds it (the refresh died with RecursionError, every retry alike)."""
    schema = Schema(NestedField(1, "key", StringType(), required=True))
    table = ensure_table(catalog, "lake.many_keys", schema)
    arrow = pa.schema([pa.field("key", pa.string(), nullable=False)])
    keys = [f"k{i:06d}" for i in range(100_000)]
    table.append(pa.table({"key": [*keys, "kept"]}, schema=arrow))

    table.delete(any_of("key", keys))

    assert table.scan().to_arrow().column("key").to_pylist() == ["kept"]
