"""A fresh read (``pipeline/fresh_read.py``) on kinesalite and real Iceberg tables: the
table's snapshot plus the stream's uncommitted tail equals, row for row, the table after the
pipeline's next commit, for the raw table and routed tables (one keyed), across a split and
a merge, also when the commits land during the read; and it keeps to its tail cap.

Rows are compared without the stamps only a commit gives (``ingested_at``, ``batch_id``,
``parsed_at``: null in rows still in the stream).
"""

from __future__ import annotations

import json
import time
from functools import partial
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql.types import LongType

from kinesis_lake.cli.entry import main
from kinesis_lake.config import Settings
from kinesis_lake.events import columns as C
from kinesis_lake.kinesis.client import kinesis_client
from kinesis_lake.kinesis.streams import list_shards
from kinesis_lake.pipeline.derive import refresh_downstream
from kinesis_lake.pipeline.fresh_read import (
    FreshRead,
    FreshReadNotOffered,
    TailLimits,
    fresh_base,
    fresh_read,
    read_fresh,
)
from kinesis_lake.pipeline.fresh_spark import register_fresh_reads
from kinesis_lake.pipeline.ingest import run_ingestion
from kinesis_lake.pipeline.ingest_query import prepare_raw_table
from kinesis_lake.spark.iceberg.sink import SINK_NAME, IcebergDataSource
from kinesis_lake.spark.spark_version import register_data_source
from kinesis_lake_tests.pipeline.declared_lakes import AT
from kinesis_lake_tests.pipeline.fresh_helpers import comparable
from kinesis_lake_tests.pipeline_helpers import put, table_rows
from kinesis_lake_tests.spark.source_helpers import merge, split

DECLARATION = """\
tables:
  - name: orders
    route: {type: order}
    fields:
      - {name: id, type: string, required: true}
      - {name: amount, type: int}
      - {name: at, type: timestamp, required: true}
    event_time_field: at
    dedup: id
  - name: notes
    route: {type: note}
    fields:
      - {name: text, type: string}
  - name: prices
    route: {type: price}
    fields:
      - {name: sku, type: string}
      - {name: version, type: long, required: true}
      - {name: op, type: string}
derived:
  - name: current_prices
    from: prices
    upsert: {key: sku, version: version, delete: {field: op, equals: delete}}
  - name: order_count
    sql: SELECT count(*) AS n FROM orders
    refresh: full
"""
COUNT_RAW = "SELECT count(*) AS n FROM raw_events"
spread = partial(put, keys=[f"k{i}" for i in range(8)])
"""``put`` with each record on the next of eight partition keys, so every shard gets some."""


def order(order_id: str, amount: int = 1) -> dict[str, Any]:
    return {"type": "order", "id": order_id, "amount": amount, "at": AT}


def price(sku: str, version: int, op: str = "set") -> dict[str, Any]:
    return {"type": "price", "sku": sku, "version": version, "op": op}


def rows_of(settings: Settings, name: str) -> list[tuple]:
    """A committed table's rows without the commit's stamps, sorted."""
    return comparable(table_rows(settings, settings.table_identifier(name)))


def fresh_rows(fresh: FreshRead) -> list[tuple]:
    return comparable(fresh.table.to_pylist())


def identities(fresh: FreshRead) -> list[tuple]:
    return [tuple(row[c] for c in C.IDENTITY_COLUMNS) for row in fresh.table.to_pylist()]


def test_fresh_reads_equal_the_tables_after_the_next_commits_across_a_split_and_a_merge(
    spark, settings
):
    """Also with the commits landing during a read (between its base and its tail)."""
    spread(settings, order("o1"), order("o2"), {"type": "note", "text": "first"}, price("a", 1))
    spread(settings, price("b", 1), price("d", 1))
    run_ingestion(spark, settings)
    refresh_downstream(spark, settings)
    # Committed to raw, not yet derived: the routed table's fresh read routes these too.
    spread(settings, order("o3"), order("o1", 99))  # o1 again: a duplicate of a committed key
    spread(settings, price("a", 2), price("d", 2, op="delete"))
    run_ingestion(spark, settings)
    client = kinesis_client(settings.endpoint_url, settings.region)
    before = sorted(s.shard_id for s in list_shards(client, settings.stream_name))
    spread(settings, order("o4"), b"{broken", order("o4", 2))  # o4 twice in the tail itself
    split(client, settings.stream_name, before[0])
    spread(settings, order("o5"), {"type": "note", "text": "after the split"})
    children = sorted(
        s.shard_id for s in list_shards(client, settings.stream_name) if s.shard_id not in before
    )
    merge(client, settings.stream_name, children[0], children[1])
    spread(settings, order("o6"), order("o5", 3), {"type": "note", "text": "after the merge"})
    # b deleted, c new, a's older version loses, d's update loses to its delete.
    spread(settings, price("b", 2, op="delete"), price("c", 1), price("a", 1), price("d", 1))

    raw_fresh = fresh_read(settings, settings.raw_table_name)
    orders_fresh = fresh_read(settings, "orders")
    notes_fresh = fresh_read(settings, "notes")
    prices_fresh = fresh_read(settings, "current_prices")
    spark_reads = spark_fresh_rows(spark, settings, raw_fresh, orders_fresh, prices_fresh)
    # Reads racing the commits below: based on the tables as they are now, and reading
    # the stream only once both commits have landed.
    raw_base = fresh_base(settings, settings.raw_table_name)
    orders_base = fresh_base(settings, "orders")

    assert raw_fresh.rows_from_snapshot == 10 and raw_fresh.rows_from_tail == 12
    assert raw_fresh.shards_read == 5 and not raw_fresh.tail_truncated
    assert len(set(identities(raw_fresh))) == 22, "a committed record read again"
    assert orders_fresh.rows_from_snapshot == 2
    assert orders_fresh.rows_from_raw == 1, "o3; the second o1 is a duplicate"
    assert orders_fresh.rows_from_tail == 3, "o4, o5, o6 once each"
    assert (raw_fresh.tail_records, orders_fresh.tail_records) == (12, 12)
    run_ingestion(spark, settings)
    refresh_downstream(spark, settings)
    raw_raced, orders_raced = read_fresh(raw_base), read_fresh(orders_base)
    assert fresh_rows(raw_fresh) == fresh_rows(raw_raced) == rows_of(settings, "raw_events")
    assert fresh_rows(orders_fresh) == fresh_rows(orders_raced) == rows_of(settings, "orders")
    assert raw_raced.rows_from_tail == 12 and orders_raced.rows_from_tail == 3
    assert fresh_rows(notes_fresh) == rows_of(settings, "notes")
    assert spark_reads == [
        fresh_rows(raw_fresh),
        fresh_rows(orders_fresh),
        fresh_rows(prices_fresh),
    ]
    assert fresh_rows(prices_fresh) == rows_of(settings, "current_prices")
    assert sorted((r["sku"], r["version"]) for r in prices_fresh.table.to_pylist()) == [
        ("a", 2),
        ("c", 1),
    ]
    assert sorted(r["id"] for r in orders_fresh.table.to_pylist()) == [
        "o1",
        "o2",
        "o3",
        "o4",
        "o5",
        "o6",
    ]
    caught_up = fresh_read(settings, "orders")
    assert (caught_up.rows_from_raw, caught_up.rows_from_tail, caught_up.tail_records) == (0, 0, 0)


def spark_fresh_rows(spark, settings: Settings, *reads: FreshRead) -> list[list[tuple]]:
    """The Spark reader's fresh reads of the tables ``reads`` read (rows as in
    :func:`fresh_rows`, which must equal them: the tail is still where it was), made with
    the lake's registration; and that a session without it refuses option ``fresh``."""
    names = [settings.raw_table_name, "orders", "current_prices"][: len(reads)]
    register_fresh_reads(spark, settings)
    try:
        frames = [spark.read.format(SINK_NAME).option("fresh", "true").load(name) for name in names]
        rows = [comparable(frame.toArrow().to_pylist()) for frame in frames]
        assert frames[0].count() == reads[0].table.num_rows
        # The snapshot is read by the executors, a task per data file, not on the driver:
        # one partition per file, and one more for the rows the driver decided.
        for frame, read in zip(frames, reads, strict=True):
            snapshot = read.snapshot
            assert snapshot.table is not None and snapshot.snapshot_id is not None
            files = list(snapshot.table.scan(snapshot_id=snapshot.snapshot_id).plan_files())
            assert files and frame.rdd.getNumPartitions() == len(files) + 1
    finally:
        register_data_source(spark, IcebergDataSource)
    with pytest.raises(Exception, match=r"Option 'fresh' needs the lake's kinesis_lake_iceberg"):
        spark.read.format(SINK_NAME).option("fresh", "true").load(names[0])
    return rows


def test_the_tail_cap_is_honoured_and_reported(settings, monkeypatch, capsys):
    put(settings, *(order(f"c{i}") for i in range(12)), keys=[f"k{i}" for i in range(12)])

    capped = fresh_read(settings, settings.raw_table_name, limits=TailLimits(max_records=5))
    whole = fresh_read(settings, settings.raw_table_name)
    base = fresh_base(settings, settings.raw_table_name)
    # As if the records had waited a minute: the pipeline is behind by more than the limit.
    aged = read_fresh(base, limits=TailLimits(max_age_s=30), now_ms=lambda: _later_ms(60_000))

    assert capped.table.num_rows == capped.tail_records == 5
    assert capped.tail_truncated and whole.table.num_rows == 12 and not whole.tail_truncated
    assert capped.left_out and all("tail cap of 5 records" in o.reason for o in capped.left_out)
    # What the capped read took is a prefix of each shard, so a table with no gap.
    assert set(identities(capped)) <= set(identities(whole))
    assert aged.table.num_rows == 0 and len(aged.left_out) == 2
    assert all("more than the tail's age limit of 30 s" in o.reason for o in aged.left_out)
    # Bytes as Kinesis counts them: data and partition key; a record that would pass the
    # cap is left out, so the rows are again a prefix of each shard.
    sizes = [len(data) + len(key) for data, key in _data_and_keys(whole)]
    capped_bytes = fresh_read(
        settings, settings.raw_table_name, limits=TailLimits(max_bytes=3 * max(sizes))
    )
    taken = _data_and_keys(capped_bytes)
    assert 3 <= len(taken) < 12 and sum(len(d) + len(k) for d, k in taken) <= 3 * max(sizes)
    assert set(identities(capped_bytes)) <= set(identities(whole))
    assert capped_bytes.left_out
    assert all(f"tail cap of {3 * max(sizes)} bytes" in o.reason for o in capped_bytes.left_out)

    prepare_raw_table(settings)  # the query command reads tables that exist
    for variable, value in settings.to_env().items():
        monkeypatch.setenv(variable, value)
    main(["query", "--fresh", "--fresh-max-records", "5", "--format", "json", COUNT_RAW])
    out, err = capsys.readouterr()
    assert json.loads(out) == {"n": 5}
    assert "raw_events: 0 rows from snapshot None" in err and "tail truncated" in err
    main(["query", "--fresh", "--fresh-max-bytes", str(max(sizes)), "--format", "json", COUNT_RAW])
    out, err = capsys.readouterr()
    assert json.loads(out) == {"n": 1} and f"tail cap of {max(sizes)} bytes" in err
    with pytest.raises(FreshReadNotOffered, match="reads raw, routed and upsert tables"):
        fresh_base(settings, "order_count")


def _data_and_keys(fresh: FreshRead) -> list[tuple[bytes, bytes]]:
    data = fresh.table.column("data").to_pylist()
    keys = fresh.table.column("partition_key").to_pylist()
    return [(bytes(d), k.encode()) for d, k in zip(data, keys, strict=True)]


def _later_ms(ms: int) -> int:
    return int(time.time() * 1000) + ms


def _commit_then_declare(spark, settings, amount_fields: str, *orders: dict[str, Any]) -> None:
    """``orders`` committed (ingested and refreshed), then the declaration's ``amount``
    field replaced by ``amount_fields``: an edit the next refresh has not seen yet."""
    spread(settings, *orders)
    run_ingestion(spark, settings)
    refresh_downstream(spark, settings)
    edited = DECLARATION.replace("      - {name: amount, type: int}\n", amount_fields, 1)
    settings.event_schema_path.write_text(edited)


def test_a_field_added_to_the_declaration_reads_fresh_before_the_refresh_adds_it(spark, settings):
    """A fresh read never differs from what the next refresh commits: after a field is
    added to a keyed table's declaration, the tail's rows carry it and the committed rows
    read as null there, as the refresh will leave them."""
    _commit_then_declare(
        spark,
        settings,
        "      - {name: amount, type: int}\n      - {name: note, type: string}\n",
        order("o1"),
        order("o2"),
    )
    spread(settings, {**order("o3"), "note": "new"}, order("o1", 99))  # o1: a repeat

    fresh = fresh_read(settings, "orders")

    notes = {row["id"]: row["note"] for row in fresh.table.to_pylist()}
    assert notes == {"o1": None, "o2": None, "o3": "new"}
    run_ingestion(spark, settings)
    refresh_downstream(spark, settings)
    assert fresh_rows(fresh) == rows_of(settings, "orders")


def test_raw_rows_an_earlier_read_routed_are_routed_again_after_the_declaration_changes(
    spark, settings
):
    """Fresh reads in one process keep raw files' routed rows (``fresh_memo``): after an
    edit of the declaration, the next read of a table behind raw routes raw's rows as the
    next refresh will, never as the read before the edit did."""
    spread(settings, order("o1"), order("o2"))
    run_ingestion(spark, settings)
    refresh_downstream(spark, settings)
    spread(settings, {**order("o3"), "note": "kept"})
    run_ingestion(spark, settings)  # raw holds o3, orders does not yet
    assert fresh_read(settings, "orders").rows_from_raw == 1
    settings.event_schema_path.write_text(
        DECLARATION.replace(
            "      - {name: amount, type: int}\n",
            "      - {name: amount, type: int}\n      - {name: note, type: string}\n",
            1,
        )
    )

    fresh = fresh_read(settings, "orders")

    notes = {row["id"]: row["note"] for row in fresh.table.to_pylist()}
    assert notes == {"o1": None, "o2": None, "o3": "kept"}
    assert fresh.rows_from_raw == 1
    refresh_downstream(spark, settings)
    assert fresh_rows(fresh) == rows_of(settings, "orders")


def test_a_widened_field_reads_fresh_as_the_refresh_widens_it_in_both_readers(spark, settings):
    """A declared type widened (int to long) reads fresh as the wider type, as the refresh
    evolves the table before it writes: an amount past int's range in the tail is kept,
    the committed int amounts read as longs, and the Spark reader's schema and rows are the
    Python read's, the just-declared field included."""
    _commit_then_declare(
        spark,
        settings,
        "      - {name: amount, type: long}\n      - {name: note, type: string}\n",
        order("o1"),
        order("o2", 7),
    )
    spread(settings, {**order("o3", 2**40), "note": "big"})

    fresh = fresh_read(settings, "orders")
    register_fresh_reads(spark, settings)
    try:
        frame = spark.read.format(SINK_NAME).option("fresh", "true").load("orders")
        spark_rows = comparable(frame.toArrow().to_pylist())
    finally:
        register_data_source(spark, IcebergDataSource)

    assert fresh.table.schema.field("amount").type == pa.int64()
    amounts = {row["id"]: (row["amount"], row["note"]) for row in fresh.table.to_pylist()}
    assert amounts == {"o1": (1, None), "o2": (7, None), "o3": (2**40, "big")}
    assert frame.schema["amount"].dataType == LongType()
    assert frame.schema.fieldNames() == fresh.table.schema.names
    assert spark_rows == fresh_rows(fresh)
    run_ingestion(spark, settings)
    refresh_downstream(spark, settings)
    assert fresh_rows(fresh) == rows_of(settings, "orders")


def test_a_raw_table_older_than_the_code_reads_fresh_with_the_columns_ingestion_adds(
    spark, settings
):
    """Ingestion evolves the raw table to the code's schema before it commits, so a raw
    table from before a column was added (here ``source_error``) reads fresh with it."""
    from pyiceberg.schema import Schema

    from kinesis_lake.iceberg.catalog import ensure_namespace
    from kinesis_lake.iceberg.raw_table import RAW_PARTITION_SPEC, RAW_SCHEMA
    from kinesis_lake.iceberg.tables import ensure_table
    from kinesis_lake.pipeline.lake import open_lake

    catalog = open_lake(settings)
    ensure_namespace(catalog, settings.namespace)
    older = Schema(
        *(f for f in RAW_SCHEMA.fields if f.name != "source_error"),
        identifier_field_ids=RAW_SCHEMA.identifier_field_ids,
    )
    ensure_table(catalog, settings.raw_table, older, partition_spec=RAW_PARTITION_SPEC)
    spread(settings, order("o1"), order("o2"))

    fresh = fresh_read(settings, settings.raw_table_name)

    assert fresh.table.schema.names[-1] == "source_error", "evolution adds columns last"
    run_ingestion(spark, settings)
    evolved = catalog.load_table(settings.raw_table).schema()
    assert fresh.table.schema.names == [f.name for f in evolved.fields]
    assert fresh_rows(fresh) == rows_of(settings, settings.raw_table_name)


def test_an_upsert_behind_its_source_reads_fresh_after_a_field_is_added_to_the_source(
    spark, settings
):
    """The source's rows the upsert table has not merged are read in the source table's
    schema, which lacks a field just declared until the refresh adds it: they read it as
    null, as the refresh leaves them, where selecting it by name raised KeyError."""
    spread(settings, price("a", 1))
    run_ingestion(spark, settings)
    refresh_downstream(spark, settings)
    without_upsert = DECLARATION[: DECLARATION.index("  - name: current_prices")]
    settings.event_schema_path.write_text(without_upsert)
    spread(settings, price("b", 1))
    run_ingestion(spark, settings)
    refresh_downstream(spark, settings)  # prices has b; current_prices is behind it
    settings.event_schema_path.write_text(
        DECLARATION.replace(
            "      - {name: op, type: string}\n",
            "      - {name: op, type: string}\n      - {name: note, type: string}\n",
            1,
        )
    )
    spread(settings, {**price("c", 1), "note": "new"})

    fresh = fresh_read(settings, "current_prices")

    notes = {row["sku"]: row["note"] for row in fresh.table.to_pylist()}
    assert notes == {"a": None, "b": None, "c": "new"}
    run_ingestion(spark, settings)
    refresh_downstream(spark, settings)
    assert fresh_rows(fresh) == rows_of(settings, "current_prices")


def test_a_column_the_table_gained_after_its_snapshot_reads_as_null(spark, settings):
    """Derived simulation seed 5301 (fails on 178ecaf too): the table's schema gained a
    column after its current snapshot was written (an evolution that commits no data), and
    reading the committed rows of the tail's keys projected the snapshot's rows onto the
    table's schema by name: KeyError. Columns added later read as null in older rows."""
    from pyiceberg.types import StringType

    from kinesis_lake.pipeline.lake import open_lake

    spread(settings, order("o1"), order("o2"))
    run_ingestion(spark, settings)
    refresh_downstream(spark, settings)
    table = open_lake(settings).load_table(settings.table_identifier("orders"))
    with table.update_schema() as update:
        update.add_column("extra", StringType())
    spread(settings, order("o1", 99), order("o3"))  # o1: a repeat of a committed key

    fresh = fresh_read(settings, "orders")

    rows = {row["id"]: row for row in fresh.table.to_pylist()}
    assert sorted(rows) == ["o1", "o2", "o3"] and rows["o1"]["amount"] == 1
    assert all(row["extra"] is None for row in rows.values())
