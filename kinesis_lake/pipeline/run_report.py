"""What a run changed in the lake, read from the lake itself.

A job launched on a cluster (``kinesis_lake.submit``) reports back to Dagster what the
in-process assets report from their results: rows added, commits, row counts, snapshot,
the stream's committed positions and its data-loss count. It runs the CLI's own commands,
which print their results rather than return them, so it compares the tables' state
before and after the run instead: the numbers come from the tables' snapshots and the
source's status file, the same records the checks and sensors read.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyiceberg.table import Table

from kinesis_lake.config import Settings
from kinesis_lake.pipeline.data_loss import loss_report
from kinesis_lake.pipeline.lake import load_table, open_lake, raw_positions, table_stats


@dataclass(frozen=True)
class TableState:
    """One table's current snapshot, row count and files (None: not created yet)."""

    identifier: str
    snapshot_id: int | None
    rows: int
    data_files: int


@dataclass(frozen=True)
class TableChange:
    """A table before and after a run; ``commits`` counts the snapshots the run added."""

    before: TableState
    after: TableState
    commits: int

    @property
    def rows_added(self) -> int:
        return self.after.rows - self.before.rows


@dataclass(frozen=True)
class StreamState:
    """Where ingestion of one stream stands: committed positions and skipped ranges."""

    positions: dict[str, str]
    skipped_ranges: int
    unacknowledged_skips: int


def table_state(settings: Settings, identifier: str) -> TableState:
    table = load_table(open_lake(settings), identifier)
    if table is None:
        return TableState(identifier, None, 0, 0)
    stats = table_stats(table)
    return TableState(identifier, stats.snapshot_id, stats.rows, stats.data_files)


def table_change(settings: Settings, before: TableState) -> TableChange:
    """``before``'s table now, and how many snapshots were committed since ``before``."""
    table = load_table(open_lake(settings), before.identifier)
    after = table_state(settings, before.identifier)
    commits = 0 if table is None else _snapshots_since(table, before.snapshot_id)
    return TableChange(before=before, after=after, commits=commits)


def _snapshots_since(table: Table, snapshot_id: int | None) -> int:
    """Ancestors of the current snapshot newer than ``snapshot_id`` (all, for None)."""
    by_id = {snapshot.snapshot_id: snapshot for snapshot in table.snapshots()}
    current = table.current_snapshot()
    count = 0
    while current is not None and current.snapshot_id != snapshot_id:
        count += 1
        parent = current.parent_snapshot_id
        current = by_id.get(parent) if parent is not None else None
    return count


def stream_state(stream: Settings) -> StreamState:
    """The raw table's committed positions and the source's skip count for ``stream``."""
    loss = loss_report(stream)
    return StreamState(
        positions=dict(raw_positions(stream).positions),
        skipped_ranges=loss.skipped_ranges,
        unacknowledged_skips=loss.unacknowledged,
    )
