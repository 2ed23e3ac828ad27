"""Keys kinesis-lake writes into Iceberg snapshot summaries, in one place.

Writers stamp their snapshots with these keys and readers (history, incremental reads)
interpret them, so both sides must agree on the spelling.
"""

from __future__ import annotations

import json

from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot, ancestors_of

# Who committed a snapshot and which of its batches it holds.
WRITER_ID = "kinesis-lake.writer-id"
BATCH_ID = "kinesis-lake.batch-id"

# What maintenance did: a compaction's snapshot rewrites files but holds no new rows.
OPERATION = "kinesis-lake.operation"
COMPACTION = "compaction"

# Live rows a merge-on-read delta moved out of the mostly deleted files it rewrote: counted
# in Iceberg's ``added-records`` but not added (see ``iceberg/dead_rows.py``).
REWRITTEN_RECORDS = "kinesis-lake.rewritten-records"

# The last committed sequence number of every shard, as JSON {shard id: sequence number}:
# the table itself says how far the stream has been committed (see the Iceberg sink).
# Written with each commit's data into the table property of this name, which no expiry
# removes. Tables written before 2026-11 also carry it in snapshot summaries, read only
# when the property is absent.
POSITIONS = "kinesis-lake.positions"


def derived_writer_id(source_table_name: str) -> str:
    """The writer id a derived table commits under while it reads ``source_table_name``."""
    return f"derive:{source_table_name}"


def full_writer_id(table_name: str) -> str:
    """The writer id of a table recomputed whole from several inputs: its batch id counts
    its recomputations (``lineage.full_refresh_batch`` says when one is due)."""
    return f"sql:{table_name}"


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


def committed_positions(table: Table) -> dict[str, str]:
    """The last committed sequence number per shard, without reading any data file.

    The table property is authoritative: every commit of the sink writes it with its data,
    and it survives snapshot expiry, which can leave only maintenance snapshots (that
    carry no positions). Tables last written before the property existed fall back to
    the newest snapshot summary holding positions.
    """
    value = table.properties.get(POSITIONS)
    if value is None:
        found = latest_summary_value(table, POSITIONS)
        value = found[0] if found else None
    return json.loads(value) if value is not None else {}


def positions_snapshot_id(table: Table) -> int | None:
    """The snapshot whose rows :func:`committed_positions` describes: the current one when
    the property holds them (it moves with every commit's data), else the snapshot whose
    summary they were read from; None before any."""
    if POSITIONS in table.properties:
        current = table.current_snapshot()
        return current.snapshot_id if current is not None else None
    found = latest_summary_value(table, POSITIONS)
    return found[1].snapshot_id if found else None
