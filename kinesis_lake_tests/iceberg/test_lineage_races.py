"""Lineage's rebuild (issue 31 defect 5) against a second refresh of the same table."""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path

import pytest
from pyiceberg.exceptions import ValidationException
from pyiceberg.expressions import GreaterThan
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import LongType, NestedField

from kinesis_lake.iceberg.catalog import ensure_namespace, open_catalog
from kinesis_lake.iceberg.commit import commit_arrow, last_committed_batch
from kinesis_lake.iceberg.incremental import read_files
from kinesis_lake.iceberg.lineage import (
    forget_source,
    rebuild_if_source_moved_back,
    source_moved_back,
    source_properties,
    source_summary,
)
from kinesis_lake.iceberg.maintenance import compact, expire_snapshots
from kinesis_lake.iceberg.summary import derived_writer_id
from kinesis_lake.iceberg.tables import ensure_table
from kinesis_lake.pipeline.refresh import pending_slice
from kinesis_lake_tests.ambiguous_catalog import catalog_environment, pause_commits
from kinesis_lake_tests.iceberg.helpers import id_rows

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))
WRITER = derived_writer_id("src")


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for key, value in catalog_environment(tmp_path / "data", tmp_path / "faults.json").items():
        monkeypatch.setenv(key, value)
    return tmp_path / "data"


def _refresh_from_scratch(source: Table, derived: Table) -> None:
    """What a first refresh commits: the whole source, at its current snapshot."""
    snapshot = source.current_snapshot()
    assert snapshot is not None and snapshot.sequence_number is not None
    commit_arrow(
        derived,
        source.scan().to_arrow(),
        writer_id=WRITER,
        batch_id=snapshot.sequence_number,
        summary=source_summary(source, snapshot.snapshot_id),
        writer_properties=source_properties(source),
    )


def test_a_rebuild_landing_after_another_refresh_rebuilt_leaves_no_rows_without_watermark(
    data_dir: Path,
) -> None:
    """Two refreshes of one derived table (two runs) both find its source re-created.
    One empties the table and refills it from the new source; the other's emptying lands
    after that. It must not leave the refill's rows without the watermark that says they
    are there: the next refresh would read the whole source again and add them twice.
    It holds: pyiceberg's own retry of the delete finds the refill's files and refuses
    (ValidationException), so that run fails and the next one finds nothing moved back."""
    catalog = open_catalog("kinesis_lake", data_dir=data_dir)
    ensure_namespace(catalog, "lake")
    source = ensure_table(catalog, "lake.src", SCHEMA)
    commit_arrow(source, id_rows([1, 2, 3]), writer_id="raw", batch_id=0)
    derived = ensure_table(catalog, "lake.dst", SCHEMA)
    _refresh_from_scratch(source, derived)
    catalog.drop_table("lake.src")  # what SnapshotExpiredError tells operators to do
    source = ensure_table(catalog, "lake.src", SCHEMA)
    commit_arrow(source, id_rows([1, 2, 3]), writer_id="raw", batch_id=0)

    slow = catalog.load_table("lake.dst")
    why = source_moved_back(source, slow, WRITER)
    assert why is not None
    once = threading.Lock()

    def the_other_run_rebuilds_first(_table: str) -> None:
        if once.acquire(blocking=False):
            fast = catalog.load_table("lake.dst")
            forget_source(fast, WRITER, source, why)
            _refresh_from_scratch(source, fast)

    with pause_commits(the_other_run_rebuilds_first), contextlib.suppress(ValidationException):
        forget_source(slow, WRITER, source, why)  # pyiceberg's retry refuses it: it holds

    derived = catalog.load_table("lake.dst")
    rows = derived.scan().to_arrow().num_rows
    if last_committed_batch(derived, WRITER) is None:  # the next refresh is a first one
        _refresh_from_scratch(source, derived)
    assert sorted(derived.scan().to_arrow().column("id").to_pylist()) == [1, 2, 3], (
        f"{rows} rows left without a watermark"
    )


def test_a_rollback_past_a_refresh_that_wrote_no_rows_is_seen_and_rebuilt(
    data_dir: Path,
) -> None:
    """A refresh whose new source rows gave no output (a windowed table's rows without a
    time, a rows table's WHERE matching none) commits only its watermark, so its commit
    records no source snapshot. A rollback of the source past that snapshot, then a new
    append: the recorded (older) snapshot is still an ancestor, the watermark is not
    above the source's numbers, and the next read starts from the snapshot the watermark
    names, which is no longer in the source's history: every refresh failed with
    IncrementalReadError ("rebuild the derived table")."""
    catalog = open_catalog("kinesis_lake", data_dir=data_dir)
    ensure_namespace(catalog, "lake")
    source = ensure_table(catalog, "lake.src", SCHEMA)
    commit_arrow(source, id_rows([1, 2, 3]), writer_id="raw", batch_id=0)
    first = source.current_snapshot()
    assert first is not None
    derived = ensure_table(catalog, "lake.dst", SCHEMA)
    _refresh_from_scratch(source, derived)
    commit_arrow(source, id_rows([4]), writer_id="raw", batch_id=1)
    second = source.current_snapshot()
    assert second is not None and second.sequence_number is not None
    piece = pending_slice(source, derived)
    assert piece.files and piece.to_snapshot_id == second.snapshot_id
    commit_arrow(  # no output: the watermark moves, no snapshot records the source's
        derived,
        id_rows([]),
        writer_id=WRITER,
        batch_id=second.sequence_number,
        summary=source_summary(source, second.snapshot_id),
        writer_properties=source_properties(source),
    )
    source.manage_snapshots().rollback_to_snapshot(first.snapshot_id).commit()
    commit_arrow(source, id_rows([5]), writer_id="raw", batch_id=2)

    derived = catalog.load_table("lake.dst")
    rebuild_if_source_moved_back(source, derived)
    derived = catalog.load_table("lake.dst")
    piece = pending_slice(source, derived)
    assert sorted(read_files(source, piece.files).column("id").to_pylist()) == [1, 2, 3, 5]


def test_a_re_created_source_is_seen_after_the_derived_tables_own_maintenance(
    data_dir: Path,
) -> None:
    """Routine upkeep of the derived table (compaction, then expiry keeping one snapshot)
    leaves no summary with the source's uuid; the source is then re-created and gets past
    the watermark's sequence number before the next refresh. Nothing says it moved back,
    and the read starts after the NEW table's snapshot of that number: its earlier rows
    are skipped for good."""
    catalog = open_catalog("kinesis_lake", data_dir=data_dir)
    ensure_namespace(catalog, "lake")
    source = ensure_table(catalog, "lake.src", SCHEMA)
    commit_arrow(source, id_rows([1]), writer_id="raw", batch_id=0)
    derived = ensure_table(catalog, "lake.dst", SCHEMA)
    _refresh_from_scratch(source, derived)
    commit_arrow(source, id_rows([2]), writer_id="raw", batch_id=1)
    piece = pending_slice(source, derived)
    snapshot = source.current_snapshot()
    assert snapshot is not None and snapshot.sequence_number is not None
    commit_arrow(
        derived,
        read_files(source, piece.files),
        writer_id=WRITER,
        batch_id=snapshot.sequence_number,
        summary=source_summary(source, snapshot.snapshot_id),
        writer_properties=source_properties(source),
    )
    compact(derived, target_file_size_bytes=64 * 1024 * 1024)
    expire_snapshots(derived, older_than_ms=int(time.time() * 1000) + 1000, retain_last=1)
    catalog.drop_table("lake.src")
    source = ensure_table(catalog, "lake.src", SCHEMA)
    for batch in range(5):
        commit_arrow(source, id_rows([10 + batch]), writer_id="raw", batch_id=batch)

    derived = catalog.load_table("lake.dst")
    assert source_moved_back(source, derived, WRITER) is not None
    rebuild_if_source_moved_back(source, derived)
    derived = catalog.load_table("lake.dst")
    assert source_moved_back(source, derived, WRITER) is None  # rebuilt once, not each run
    piece = pending_slice(source, derived)
    assert sorted(read_files(source, piece.files).column("id").to_pylist()) == list(range(10, 15))


def test_a_table_two_sources_feed_is_not_rebuilt_when_the_second_is_first_read(
    data_dir: Path,
) -> None:
    """A quarantine table is fed by every stream's raw table, each under its own writer.
    The first source's commits name its uuid; the second source, read for the first time,
    must not be taken for a re-created first one (CI, test_two_streams: the rebuild then
    failed removing a watermark the table never had)."""
    catalog = open_catalog("kinesis_lake", data_dir=data_dir)
    ensure_namespace(catalog, "lake")
    clicks = ensure_table(catalog, "lake.clicks", SCHEMA)
    orders = ensure_table(catalog, "lake.orders", SCHEMA)
    commit_arrow(clicks, id_rows([1]), writer_id="raw", batch_id=0)
    commit_arrow(orders, id_rows([2]), writer_id="raw", batch_id=0)
    shared = ensure_table(catalog, "lake.shared", SCHEMA)
    snapshot = clicks.current_snapshot()
    assert snapshot is not None and snapshot.sequence_number is not None
    commit_arrow(
        shared,
        clicks.scan().to_arrow(),
        writer_id=f"{derived_writer_id('clicks')}:quarantine",
        batch_id=snapshot.sequence_number,
        summary=source_summary(clicks, snapshot.snapshot_id),
    )
    shared = catalog.load_table("lake.shared")
    orders_writer = derived_writer_id("orders")
    assert source_moved_back(orders, shared, orders_writer) is None
    rebuild_if_source_moved_back(orders, shared)
    assert catalog.load_table("lake.shared").scan().to_arrow().num_rows == 1


def test_forgetting_a_source_the_table_never_read_drops_nothing_and_does_not_fail(
    data_dir: Path,
) -> None:
    catalog = open_catalog("kinesis_lake", data_dir=data_dir)
    ensure_namespace(catalog, "lake")
    source = ensure_table(catalog, "lake.src", SCHEMA)
    derived = ensure_table(catalog, "lake.dst", SCHEMA)
    commit_arrow(derived, id_rows([1]), writer_id="other", batch_id=1)
    forget_source(catalog.load_table("lake.dst"), WRITER, source, "test")
    derived = catalog.load_table("lake.dst")
    assert derived.scan().to_arrow().num_rows == 0
    assert last_committed_batch(derived, "other") == 1


def test_a_rebuild_for_one_source_keeps_the_rows_other_sources_wrote(data_dir: Path) -> None:
    """The quarantine holds every stream's rows: rebuilding it because one stream's raw
    table was re-created must not delete the others', whose watermarks stay (their rows
    would never be derived again)."""
    catalog = open_catalog("kinesis_lake", data_dir=data_dir)
    ensure_namespace(catalog, "lake")
    source = ensure_table(catalog, "lake.src", SCHEMA)
    derived = ensure_table(catalog, "lake.dst", SCHEMA)
    commit_arrow(derived, id_rows([1, 2, 3]), writer_id="other", batch_id=1)
    forget_source(catalog.load_table("lake.dst"), WRITER, source, "test", rows=GreaterThan("id", 1))
    derived = catalog.load_table("lake.dst")
    assert sorted(derived.scan().to_arrow().column("id").to_pylist()) == [1]
