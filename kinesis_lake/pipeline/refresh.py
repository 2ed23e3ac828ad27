"""What every incremental refresh of a derived table shares: its result (and how a caller
hears of it as its commit lands), where it resumes in its source, and how it appends
through the Iceberg sink."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from pyiceberg.table import Table
from pyspark.sql import DataFrame, Observation
from pyspark.sql import functions as F

from kinesis_lake.config import Settings
from kinesis_lake.iceberg.incremental import IncrementalSlice, appended_since, caught_up_snapshot_id
from kinesis_lake.spark.iceberg.sink import SINK_NAME

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
APPEND_THREADS = 4
"""Spark jobs a refresh submits side by side, for a cluster whose executors one small job
leaves idle. On two local cores it bought nothing measurable (nine tables of 1,000 records:
10-16 s in-process either way; a warm 200-row append alone takes 0.15 s): the refresh is
compute, not waiting."""


@dataclass
class TableRefresh:
    """What one derived table's refresh read and wrote."""

    table: str
    source_files_read: int
    source_rows_read: int
    rows_written: int
    source_snapshot_id: int | None
    committed: bool
    seconds: float = 0.0
    """This table's own work, to its commit: for a routed table, from the start of the
    routing pass that fed it. Tables are refreshed side by side, so these overlap and the
    time since the commit before would be another table's share."""

    @property
    def up_to_date(self) -> bool:
        return self.source_files_read == 0


OnCommit = Callable[[str, TableRefresh, dict[str, int]], None]
"""Told each table's refresh (by the table's short name, with numbers of its own such as
the aggregate's ``windows_recomputed``) as soon as its commit has landed: a caller shows
each table fresh when it is, not when the slowest table of the refresh is. Tables are
refreshed side by side, so it is called from several threads, one call at a time."""


def no_report(name: str, refresh: TableRefresh, numbers: dict[str, int]) -> None:
    """The default ``OnCommit``: nobody is watching."""


def timed(refresh: TableRefresh, started: float) -> TableRefresh:
    """``refresh`` with its ``seconds``: from ``started`` (``time.monotonic``) to now."""
    return replace(refresh, seconds=time.monotonic() - started)


def one_at_a_time(on_commit: OnCommit) -> OnCommit:
    """``on_commit`` called by one thread at a time (a Dagster log, a list being filled)."""
    held = threading.Lock()

    def report(name: str, refresh: TableRefresh, numbers: dict[str, int]) -> None:
        with held:
            on_commit(name, refresh, numbers)

    return report


def combined(identifier: str, refreshes: list[TableRefresh]) -> TableRefresh:
    """One table's refreshes from several raw tables, as one."""
    return TableRefresh(
        identifier,
        sum(r.source_files_read for r in refreshes),
        sum(r.source_rows_read for r in refreshes),
        sum(r.rows_written for r in refreshes),
        refreshes[-1].source_snapshot_id if refreshes else None,
        any(r.committed for r in refreshes),
        sum(r.seconds for r in refreshes),
    )


def pending_slice(source: Table, derived: Table | None) -> IncrementalSlice:
    """The source's data files appended since ``derived`` last caught up with it (all of
    them when ``derived`` does not exist yet)."""
    done = caught_up_snapshot_id(source, derived) if derived is not None else None
    return appended_since(source, done)


def sequence_number(table: Table, snapshot_id: int | None) -> int:
    """The sequence number of a slice's end snapshot; a slice with files always has one."""
    snapshot = table.snapshot_by_id(snapshot_id) if snapshot_id is not None else None
    assert snapshot is not None and snapshot.sequence_number is not None
    return snapshot.sequence_number


def append_rows(
    rows: DataFrame,
    settings: Settings,
    identifier: str,
    *,
    writer_id: str,
    batch_id: int,
    summary: dict[str, str],
    writer_properties: dict[str, str] | None = None,
) -> int:
    """Append ``rows`` through the Iceberg sink as ``writer_id``'s batch ``batch_id`` (a
    batch it already committed is skipped), with ``summary`` in its snapshot and
    ``writer_properties`` next to its watermark; the number of rows."""
    observation = Observation(f"rows of {identifier} batch {batch_id}")
    writer = (
        rows.observe(observation, F.count(F.lit(1)).alias("rows"))
        .write.format(SINK_NAME)
        .mode("append")
        .option("table", identifier)
        .option("catalog", settings.catalog_name)
        .option("dataDir", str(settings.data_dir))
        .option("writerId", writer_id)
        .option("batchId", str(batch_id))
    )
    for key, value in summary.items():
        writer = writer.option(f"summary.{key}", value)
    for name, value in (writer_properties or {}).items():
        writer = writer.option(f"writerProperty.{name}", value)
    writer.save()
    return int(observation.get["rows"])


def from_micros(micros: int) -> datetime:
    """Exact (no float rounding) and valid for every year Spark can hold."""
    return _EPOCH + timedelta(microseconds=micros)


def iso(moment: datetime) -> str:
    return moment.isoformat()
