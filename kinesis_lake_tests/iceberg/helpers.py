"""Builders shared by the iceberg tests: raw rows, one-call ingestion, a racing catalog and
the raw table seen through it, a table of nested lists."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import ListType, LongType, NestedField, StringType, StructType

from kinesis_lake.iceberg.catalog import local_catalog_properties, open_catalog
from kinesis_lake.iceberg.commit import CommitOutcome, commit_files
from kinesis_lake.iceberg.data_files import TableWriteTarget, write_data_files
from kinesis_lake.iceberg.raw_table import RAW_ARROW_SCHEMA

DAY0 = datetime(2024, 5, 1, tzinfo=UTC)
NAMESPACE = "lake"
RAW = f"{NAMESPACE}.raw"

ORDERS = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(
        2,
        "items",
        ListType(3, StructType(NestedField(4, "sku", StringType(), required=False)), False),
        required=False,
    ),
)
ORDER_ITEMS = [None, [], [{"sku": "a"}], [None]]
"""A null list, an empty one, one with a value, one holding a null struct: all different."""


def id_rows(ids: list[int]) -> pa.Table:
    """Rows of a one-column table (``id``, a long): what the race tests commit."""
    return pa.table({"id": pa.array(ids, pa.int64())})


def raw_batch(
    keys: Sequence[int],
    *,
    shard: str = "shardId-000000000000",
    day: int = 0,
    batch_id: int = 0,
) -> pa.RecordBatch:
    """Raw rows of ``shard`` whose sequence numbers are ``keys``, arriving on ``DAY0 + day``:
    the one builder of raw rows for the iceberg, sink and commit tests."""
    size = len(keys)
    arrivals = [DAY0 + timedelta(days=day, seconds=key % 86_000) for key in keys]
    return pa.RecordBatch.from_pydict(
        {
            "stream_name": ["events"] * size,
            "shard_id": [shard] * size,
            "sequence_number": [str(key) for key in keys],
            "sub_sequence_number": [0] * size,
            "partition_key": [f"pk-{key % 7}" for key in keys],
            "approximate_arrival_timestamp": arrivals,
            "data": [f'{{"n": {key}}}'.encode() for key in keys],
            "aggregated": [False] * size,
            "source_error": [None] * size,
            "ingested_at": [DAY0 + timedelta(days=day, hours=1)] * size,
            "batch_id": [batch_id] * size,
        },
        schema=RAW_ARROW_SCHEMA,
    )


def ingest(
    table: Table,
    writer_id: str,
    batch_id: int,
    keys: Sequence[int],
    *,
    day: int = 0,
    summary: dict[str, str] | None = None,
) -> CommitOutcome:
    """What the Spark sink does for one micro-batch: write files, then commit them."""
    target = TableWriteTarget.from_table(table)
    written = write_data_files(
        target,
        [raw_batch(keys, day=day, batch_id=batch_id)],
        file_prefix=f"{writer_id}-{batch_id}-{uuid.uuid4().hex[:8]}",
    )
    return commit_files(table, written, writer_id=writer_id, batch_id=batch_id, summary=summary)


def keys_of(table: Table) -> list[int]:
    """Sorted sequence numbers of every row (duplicates kept, so they show)."""
    table.refresh()
    values = table.scan(selected_fields=("sequence_number",)).to_arrow().column(0).to_pylist()
    return sorted(int(value) for value in values)


class RacingCatalog(SqlCatalog):
    """A real SQL catalog that lets another writer commit right before its next commit.

    The other writer's commit is real (its own catalog connection, its own metadata),
    so the commit that follows genuinely loses the race: a deterministic conflict.
    """

    def __init__(self, name: str, **properties: str) -> None:
        super().__init__(name, **properties)
        self._hooks: list[Callable[[], Any]] = []

    def before_next_commit(self, hook: Callable[[], Any]) -> None:
        self._hooks.append(hook)

    def commit_table(self, table: Table, requirements: Any, updates: Any) -> Any:
        if self._hooks:
            self._hooks.pop(0)()
        return super().commit_table(table, requirements, updates)


def racing_raw(data_dir: Path) -> tuple[RacingCatalog, Table, Table]:
    """The raw table through a ``RacingCatalog`` (the writer under test) and through a
    catalog of its own (the other writer, whose commit a hook lets land first)."""
    racing = RacingCatalog("kinesis_lake", **local_catalog_properties(data_dir))
    return racing, racing.load_table(RAW), open_catalog(data_dir=data_dir).load_table(RAW)
