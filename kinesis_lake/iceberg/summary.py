"""Keys kinesis-lake writes into Iceberg snapshot summaries, in one place.

Writers stamp their snapshots with these keys and readers (history, incremental reads)
interpret them, so both sides must agree on the spelling.
"""

from __future__ import annotations

from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot, ancestors_of

# Who committed a snapshot and which of its batches it holds.
WRITER_ID = "kinesis-lake.writer-id"
BATCH_ID = "kinesis-lake.batch-id"

# What maintenance did: a compaction's snapshot rewrites files but holds no new rows.
OPERATION = "kinesis-lake.operation"
COMPACTION = "compaction"

# The last committed sequence number of every shard, as JSON {shard id: sequence number}:
# the table itself says how far the stream has been committed (see the Iceberg sink).
POSITIONS = "kinesis-lake.positions"


def derived_writer_id(source_table_name: str) -> str:
    """The writer id a derived table commits under while it reads ``source_table_name``."""
    return f"derive:{source_table_name}"


def latest_summary_value(table: Table, key: str) -> tuple[str, Snapshot] | None:
    """The newest value of summary ``key`` along the current snapshot's ancestry.

    Maintenance snapshots (compaction) carry no pipeline keys, so the newest snapshot that
    has the key is found by walking back; no data or manifest file is read.
    """
    current = table.current_snapshot()
    if current is None:
        return None
    for snapshot in ancestors_of(current, table.metadata):
        summary = snapshot.summary
        if summary is not None and key in summary.additional_properties:
            return summary.additional_properties[key], snapshot
    return None
