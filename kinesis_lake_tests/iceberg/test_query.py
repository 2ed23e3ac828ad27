"""run_sql, table_history and format_table: looking at the lake."""

from __future__ import annotations

import os
import time
from datetime import datetime

import pyarrow as pa
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import (
    BinaryType,
    NestedField,
    StringType,
)

from kinesis_lake.iceberg.arrow_schema import table_arrow_schema
from kinesis_lake.iceberg.commit import commit_arrow, commit_files
from kinesis_lake.iceberg.data_files import TableWriteTarget, write_data_files
from kinesis_lake.iceberg.maintenance import compact
from kinesis_lake.iceberg.query import QueryError, format_table, run_sql, table_history
from kinesis_lake.iceberg.tables import ensure_table
from kinesis_lake_tests.iceberg.helpers import ORDER_ITEMS, ORDERS, ingest

SHARDS = Schema(
    NestedField(1, "shard_id", StringType(), required=True),
    NestedField(2, "owner", StringType(), required=False),
)


def _shards(catalog: Catalog) -> Table:
    table = ensure_table(catalog, "lake.shards", SHARDS)
    rows = {"shard_id": ["shardId-000000000000"], "owner": ["team-a"]}
    commit_arrow(
        table, pa.table(rows, schema=table_arrow_schema(SHARDS)), writer_id="s", batch_id=0
    )
    return table


def _wait_for_clock_tick() -> int:
    """A timestamp strictly between two commits (snapshot times are in milliseconds)."""
    time.sleep(0.005)
    now = int(time.time() * 1000)
    time.sleep(0.005)
    return now


def test_sql_joins_two_tables_by_short_and_qualified_names(raw: Table, catalog: Catalog) -> None:
    ingest(raw, "w", 0, range(10))
    _shards(catalog)

    result = run_sql(
        catalog,
        "lake",
        "select s.owner, count(*) as n from raw r join lake.shards s using (shard_id) "
        "group by s.owner",
    )

    assert result.to_pylist() == [{"owner": "team-a", "n": 10}]
    with pytest.raises(
        QueryError, match="raw_typo does not exist!; the tables in lake are: raw, shards"
    ):
        run_sql(catalog, "lake", "select * from raw_typo")


def test_time_travel_as_of_a_time_applies_to_every_table(raw: Table, catalog: Catalog) -> None:
    ingest(raw, "w", 0, range(10))
    between = _wait_for_clock_tick()
    ingest(raw, "w", 1, range(10, 25))
    _shards(catalog)  # created after `between`: reads as empty then
    sql = "select (select count(*) from raw) as r, (select count(*) from shards) as s"

    assert run_sql(catalog, "lake", sql).to_pylist() == [{"r": 25, "s": 1}]
    assert run_sql(catalog, "lake", sql, as_of_ms=between).to_pylist() == [{"r": 10, "s": 0}]


def test_time_travel_to_a_snapshot_pins_the_table_that_owns_it(
    raw: Table, catalog: Catalog
) -> None:
    first = ingest(raw, "w", 0, range(10)).snapshot_id
    ingest(raw, "w", 1, range(10, 25))
    _shards(catalog)
    sql = "select (select count(*) from raw) as r, (select count(*) from shards) as s"

    assert run_sql(catalog, "lake", sql, snapshot_id=first).to_pylist() == [{"r": 10, "s": 1}]
    with pytest.raises(QueryError, match="has snapshot 42"):
        run_sql(catalog, "lake", sql, snapshot_id=42)
    with pytest.raises(QueryError, match="not both"):
        run_sql(catalog, "lake", sql, snapshot_id=first, as_of_ms=1)


def test_history_lists_every_snapshot_with_what_we_recorded(raw: Table) -> None:
    first = ingest(raw, "w", 0, range(10))
    second = ingest(raw, "w", 1, range(10, 14))
    compact(raw, target_file_size_bytes=64 * 1024 * 1024)

    history = table_history(raw)

    # A compaction is upkeep, not a load: said so, and its rows count as rewritten.
    assert [h["operation"] for h in history] == ["append", "append", "compaction"]
    assert [h["snapshot_id"] for h in history[:2]] == [first.snapshot_id, second.snapshot_id]
    assert [h["parent_id"] for h in history] == [
        None,
        first.snapshot_id,
        second.snapshot_id,
    ]
    assert [(h["writer_id"], h["batch_id"]) for h in history] == [
        ("w", 0),
        ("w", 1),
        ("maintenance", None),
    ]
    assert [h["added_records"] for h in history] == [10, 4, None]
    assert [h["rewritten_records"] for h in history] == [None, None, 14]
    assert [h["added_data_files"] for h in history] == [1, 1, 1]
    assert [h["total_records"] for h in history] == [10, 14, 14]
    assert [h["is_current"] for h in history] == [False, False, True]
    assert datetime.fromisoformat(history[0]["timestamp"]).utcoffset().total_seconds() == 0


def test_format_table_looks_like_spark_show() -> None:
    table = pa.table(
        {
            "id": [1, 22],
            "ok": [True, None],
            "data": [b"\xf3\x89", b"x" * 50],
            "text": ["short", "a string longer than twenty characters"],
        }
    )

    assert format_table(table) == "\n".join(
        [
            "+---+----+--------------------+--------------------+",
            "| id|  ok|                data|                text|",
            "+---+----+--------------------+--------------------+",
            "|  1|true|             [F3 89]|               short|",
            "| 22|NULL|xxxxxxxxxxxxxxxxx...|a string longer t...|",
            "+---+----+--------------------+--------------------+",
        ]
    )
    assert format_table(table, max_rows=1).endswith("only showing top 1 rows")
    assert format_table(table.slice(0, 0)).count("\n") == 3


BLOBS = Schema(
    NestedField(1, "key", StringType(), required=True),
    NestedField(2, "payload", BinaryType(), required=False),
)


def _bytes_read() -> int:
    """Bytes this process has read through read(2) and its kin, page cache or not."""
    with open("/proc/self/io") as io:
        return next(int(line.split()[1]) for line in io if line.startswith("rchar:"))


def test_a_query_reads_only_the_columns_it_uses_not_whole_tables(catalog: Catalog) -> None:
    """`query` read every table it named whole into memory: a count over one column of a
    table with large payloads read all the payloads (here 24 MiB; the query needs <1)."""
    table = ensure_table(catalog, "lake.blobs", BLOBS)
    for batch in range(3):
        rows = {
            "key": [f"k{batch}-{i}" for i in range(8)],
            "payload": [os.urandom(1 << 20) for _ in range(8)],  # incompressible
        }
        commit_arrow(
            table, pa.table(rows, schema=table_arrow_schema(BLOBS)), writer_id="b", batch_id=batch
        )

    before = _bytes_read()
    result = run_sql(catalog, "lake", "SELECT count(key) AS n FROM blobs WHERE key >= 'k1'")
    read = _bytes_read() - before

    assert result.to_pylist() == [{"n": 16}]
    assert read < 4 << 20, f"read {read / 2**20:.1f} MiB for one small column"


def _orders(catalog: Catalog) -> Table:
    """ORDERS as the sink writes it (its own Parquet files, then a commit of them)."""
    table = ensure_table(catalog, "lake.orders", ORDERS)
    batch = pa.RecordBatch.from_pydict(
        {"id": list(range(len(ORDER_ITEMS))), "items": ORDER_ITEMS},
        schema=table_arrow_schema(ORDERS),
    )
    written = write_data_files(TableWriteTarget.from_table(table), [batch], file_prefix="orders")
    commit_files(table, written, writer_id="w", batch_id=0)
    return table


def test_a_null_list_of_structs_reads_as_null_after_the_schema_evolved(catalog: Catalog) -> None:
    """pyiceberg's full read, which `query` takes once a table's schema evolved, showed []
    where a list of structs was null (apache/iceberg-python#3833)."""
    _orders(catalog)
    evolved = Schema(*ORDERS.fields, NestedField(5, "note", StringType(), required=False))
    ensure_table(catalog, "lake.orders", evolved)

    result = run_sql(catalog, "lake", "SELECT id, items, note FROM orders ORDER BY id")

    assert result.column("items").to_pylist() == ORDER_ITEMS
    assert result.column("note").to_pylist() == [None] * len(ORDER_ITEMS)
