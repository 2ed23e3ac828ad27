"""The raw table: every Kinesis user record exactly once, bytes untouched.

The raw table is the lake's system of record. It keeps the payload as bytes so a bad
event-schema change never loses data (derived tables can always be rebuilt from it),
and it keys every row by the Kinesis record identity so "exactly once" is checkable.
"""

from __future__ import annotations

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.sorting import SortField, SortOrder
from pyiceberg.transforms import DayTransform, IdentityTransform
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    LongType,
    NestedField,
    StringType,
    TimestamptzType,
)

from kinesis_lake.iceberg.tables import ensure_table
from kinesis_lake.record_rows import RECORD_ARROW_SCHEMA, UTC_MICROS

RAW_SCHEMA = Schema(
    NestedField(1, "stream_name", StringType(), required=True),
    NestedField(2, "shard_id", StringType(), required=True),
    # Kinesis sequence numbers are decimal strings of up to 128 bits: compare as integers.
    NestedField(3, "sequence_number", StringType(), required=True),
    # Position of a user record inside a KPL aggregate; 0 for a plain record.
    NestedField(4, "sub_sequence_number", LongType(), required=True),
    NestedField(5, "partition_key", StringType(), required=True),
    NestedField(6, "approximate_arrival_timestamp", TimestamptzType(), required=True),
    NestedField(7, "data", BinaryType(), required=True),
    NestedField(8, "aggregated", BooleanType(), required=True),
    # Set when a corrupt KPL aggregate was kept whole instead of being split.
    NestedField(9, "source_error", StringType(), required=False),
    NestedField(10, "ingested_at", TimestamptzType(), required=True),
    NestedField(11, "batch_id", LongType(), required=True),
    identifier_field_ids=[1, 2, 3, 4],
)


# What executors build their Arrow batches with; mirrors RAW_SCHEMA field for field.
RAW_ARROW_SCHEMA = pa.schema(
    [
        *RECORD_ARROW_SCHEMA,
        pa.field("ingested_at", UTC_MICROS, nullable=False),
        pa.field("batch_id", pa.int64(), nullable=False),
    ]
)

# Arrival day: the time filter every consumer uses, and few enough partitions per day.
RAW_PARTITION_SPEC = PartitionSpec(
    PartitionField(source_id=6, field_id=1000, transform=DayTransform(), name="arrival_day")
)

# Rows of one shard in Kinesis order: range-prunable lookups by record identity.
RAW_SORT_ORDER = SortOrder(
    SortField(source_id=2, transform=IdentityTransform()),
    SortField(source_id=3, transform=IdentityTransform()),
    SortField(source_id=4, transform=IdentityTransform()),
)

MERGED_MANIFESTS: dict[str, str] = {
    # One manifest per commit (a streaming commit, an upsert refresh) would grow scan
    # planning without bound: merge them.
    "commit.manifest-merge.enabled": "true",
    # Merge early and small (Iceberg's defaults: at 100 manifests, into 8 MB ones): each
    # commit lists every manifest, and a merge rewrites every entry of the manifests it
    # merges, the merged one included, until that one passes the target size. At 1 MB
    # that was every data file up to ~2,600 of them, every ninth commit, up to 1 s each
    # (benchmark 5); at 256 KB a merge rewrites at most ~700 entries, and a table gets
    # one more manifest per ~700 files until maintenance compacts them (a commit of more
    # files than that writes a manifest above the target, which is never merged again).
    "commit.manifest.min-count-to-merge": "10",
    "commit.manifest.target-size-bytes": str(256 * 1024),
}
"""Manifest merging of the tables written by a commit every few seconds or minutes."""


RAW_TABLE_PROPERTIES: dict[str, str] = {
    # 128 MiB: big enough for cheap scans, small enough that compaction reaches it daily.
    "write.target-file-size-bytes": str(128 * 1024 * 1024),
    # Stated explicitly so every engine writing this table uses the same codec.
    "write.parquet.compression-codec": "zstd",
    # For other writers (Java engines, pyiceberg itself); our commits retry in our own loop.
    "commit.retry.num-retries": "10",
    # A floor for tables that commit rarely. Every commit rewrites the metadata listing
    # each retained snapshot, so this floor is also what a commit costs right after
    # maintenance (benchmark 5). Incremental readers do not need it: the snapshots a
    # derived table has not processed are kept whatever this says.
    "history.expire.min-snapshots-to-keep": "10",
    # An hour of history, not maintenance's 24 h default: a writer committing every second
    # would carry 86,400 snapshots in the metadata each commit rewrites. Raw rows carry
    # their own ingestion time, and the snapshots a derived table has not processed yet
    # are never expired whatever their age.
    "history.expire.max-snapshot-age-ms": str(60 * 60 * 1000),
    # A streaming writer commits every few seconds: drop superseded metadata.json files.
    "write.metadata.delete-after-commit.enabled": "true",
    # A short metadata log for debugging recent commits: each commit rewrites it too.
    "write.metadata.previous-versions-max": "10",
    **MERGED_MANIFESTS,
}


def ensure_raw_table(catalog: Catalog, identifier: str) -> Table:
    """Create or evolve the raw table ``identifier`` (its namespace must exist)."""
    return ensure_table(
        catalog,
        identifier,
        RAW_SCHEMA,
        partition_spec=RAW_PARTITION_SPEC,
        sort_order=RAW_SORT_ORDER,
        properties=RAW_TABLE_PROPERTIES,
    )
