"""Commits whose outcome the client gets wrong: files of a landed commit must survive.

The sink and compaction run against :class:`AmbiguousCatalog`, which applies a commit and
then raises (a lost answer) or raises before applying it. After every failure and the
replay that follows, every row must be readable (no data file missing) and there once.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException

from kinesis_lake.iceberg.catalog import ensure_namespace, open_catalog
from kinesis_lake.iceberg.commit import DEFAULT_MAX_ATTEMPTS, last_committed_batch
from kinesis_lake.iceberg.data_files import TableWriteTarget
from kinesis_lake.iceberg.maintenance import compact, expire_snapshots, remove_orphan_files
from kinesis_lake.iceberg.raw_table import ensure_raw_table
from kinesis_lake.iceberg.summary import committed_positions
from kinesis_lake.spark.iceberg.options import SinkOptions
from kinesis_lake.spark.iceberg.writer import IcebergStreamWriter, OverlappingPositionsError
from kinesis_lake_tests.ambiguous_catalog import (
    LANDS_LATE,
    LANDS_THEN_RAISES,
    RAISES_BEFORE,
    AmbiguousCatalog,
    apply_late_commits,
    arm,
    catalog_environment,
    pause_commits,
    pending,
)
from kinesis_lake_tests.iceberg.helpers import raw_batch


@pytest.fixture
def faults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Make catalog ``kinesis_lake`` under tmp_path/data an AmbiguousCatalog."""
    fault_file = tmp_path / "faults.json"
    for key, value in catalog_environment(tmp_path / "data", fault_file).items():
        monkeypatch.setenv(key, value)
    return fault_file


def sink(data_dir: Path, writer_id: str = "query-1") -> IcebergStreamWriter:
    catalog = open_catalog("kinesis_lake", data_dir=data_dir)
    assert isinstance(catalog, AmbiguousCatalog)
    ensure_namespace(catalog, "lake")
    table = ensure_raw_table(catalog, "lake.raw")
    options = SinkOptions.parse(
        {
            "table": "lake.raw",
            "dataDir": str(data_dir),
            "writerId": writer_id,
            "positionColumns": "shard_id,sequence_number",
        }
    )
    return IcebergStreamWriter(options, TableWriteTarget.from_table(table))


def sequences(data_dir: Path) -> Counter:
    """Every (shard, sequence number) of the table, read from its data files."""
    table = open_catalog("kinesis_lake", data_dir=data_dir).load_table("lake.raw")
    rows = table.scan(selected_fields=("shard_id", "sequence_number")).to_arrow()
    return Counter(
        zip(
            rows.column("shard_id").to_pylist(),
            rows.column("sequence_number").to_pylist(),
            strict=True,
        )
    )


def expected(shard: str, first: int, rows: int) -> Counter:
    return Counter((shard, str(first + i)) for i in range(rows))


def exists(path: str) -> bool:
    return Path(path.removeprefix("file://")).exists()


@pytest.mark.parametrize("error", ["unknown", "generic"])
def test_abort_after_a_commit_that_landed_then_raised_keeps_its_files(faults, tmp_path, error):
    data_dir = tmp_path / "data"
    writer = sink(data_dir)
    arm(faults, LANDS_THEN_RAISES, error=error)
    first = writer.write(iter([raw_batch(range(100, 150), shard="a")]))
    with pytest.raises((CommitStateUnknownException, ConnectionError)):
        writer.commit([first], batchId=0)
    assert pending(faults) == 0
    writer.abort([first], batchId=0)  # what Spark does for any exception of commit
    assert all(exists(p) for p in first.paths), "abort deleted files the table references"

    replay = writer.write(iter([raw_batch(range(100, 150), shard="a")]))
    writer.commit([replay], batchId=0)
    assert not any(exists(p) for p in replay.paths), "the replay's own files are orphans"
    assert sequences(data_dir) == expected("a", 100, 50)


def test_a_landed_commit_reported_as_a_conflict_is_skipped_without_deleting_its_files(
    faults, tmp_path
):
    data_dir = tmp_path / "data"
    writer = sink(data_dir)
    arm(faults, LANDS_THEN_RAISES, error="conflict")
    message = writer.write(iter([raw_batch(range(100, 150), shard="a")]))
    outcome = writer._commit([message], 0, "query-1")
    assert outcome is not None and outcome.skipped_duplicate
    assert all(exists(p) for p in message.paths)
    assert sequences(data_dir) == expected("a", 100, 50)
    assert committed_positions(writer.options.load_table()) == {"a": "149"}


def test_a_commit_that_failed_before_landing_is_replayed_once_and_its_files_reclaimed_later(
    faults, tmp_path
):
    """The client cannot tell this failure from a commit still landing (see the next
    test), so the abort keeps the files; orphan-file removal reclaims them, and only them."""
    data_dir = tmp_path / "data"
    writer = sink(data_dir)
    arm(faults, RAISES_BEFORE, error="generic")
    first = writer.write(iter([raw_batch(range(100, 150), shard="a")]))
    with pytest.raises(ConnectionError):
        writer.commit([first], batchId=0)
    writer.abort([first], batchId=0)
    assert all(exists(p) for p in first.paths), "an exception proved nothing, yet files went"
    replay = writer.write(iter([raw_batch(range(100, 150), shard="a")]))
    writer.commit([replay], batchId=0)
    assert sequences(data_dir) == expected("a", 100, 50)

    table = writer.options.load_table()
    remove_orphan_files(table, older_than_ms=int(time.time() * 1000) + 60_000)
    assert not any(exists(p) for p in first.paths)
    assert all(exists(p) for p in replay.paths)
    assert sequences(data_dir) == expected("a", 100, 50)


def test_compaction_whose_commit_landed_then_raised_loses_no_rows(faults, tmp_path):
    data_dir = tmp_path / "data"
    writer = sink(data_dir)
    for batch in range(4):
        writer.commit(
            [writer.write(iter([raw_batch(range(100 + batch * 10, 110 + batch * 10), shard="a")]))],
            batchId=batch,
        )
    table = writer.options.load_table()
    arm(faults, LANDS_THEN_RAISES, error="conflict", table="lake.raw")
    report = compact(table, target_file_size_bytes=64 * 1024 * 1024)
    assert pending(faults) == 0
    assert sequences(data_dir) == expected("a", 100, 40)
    table.refresh()
    live = [task.file.file_path for task in table.scan().plan_files()]
    assert len(live) < 4 and all(exists(p) for p in live), report


def test_positions_survive_compaction_and_expiry_and_still_guard_the_table(faults, tmp_path):
    data_dir = tmp_path / "data"
    writer = sink(data_dir)
    writer.commit(
        [
            writer.write(
                iter([raw_batch(range(100, 110), shard="a"), raw_batch(range(7, 10), shard="b")])
            )
        ],
        0,
    )
    writer.commit([writer.write(iter([raw_batch(range(110, 120), shard="a")]))], 1)
    table = writer.options.load_table()
    compact(table, target_file_size_bytes=64 * 1024 * 1024, min_input_files=2)
    table.refresh()
    current = table.current_snapshot()
    assert current is not None and current.summary.get("kinesis-lake.operation") == "compaction"
    expire_snapshots(table, older_than_ms=current.timestamp_ms + 1, retain_last=1)
    table.refresh()
    assert [s.snapshot_id for s in table.metadata.snapshots] == [current.snapshot_id]

    assert committed_positions(table) == {"a": "119", "b": "9"}
    # What a restart resumes after, and what a stale checkpoint is refused against:
    stale = sink(data_dir, writer_id="stale-query")
    with pytest.raises(OverlappingPositionsError):
        stale.commit([stale.write(iter([raw_batch(range(115, 125), shard="a")]))], batchId=0)
    stale.commit([stale.write(iter([raw_batch(range(120, 125), shard="a")]))], batchId=1)
    assert sequences(data_dir) == expected("a", 100, 25) + expected("b", 7, 3)
    assert committed_positions(writer.options.load_table()) == {"a": "124", "b": "9"}


def test_conflicts_raised_before_landing_are_retried_by_the_sink(faults, tmp_path):
    data_dir = tmp_path / "data"
    writer = sink(data_dir)
    arm(faults, RAISES_BEFORE, error="conflict", times=2)
    outcome = writer._commit(
        [writer.write(iter([raw_batch(range(1, 6), shard="a")]))], 0, "query-1"
    )
    assert outcome is not None and outcome.committed and outcome.attempts == 3
    assert sequences(data_dir) == expected("a", 1, 5)


def test_two_writers_racing_between_load_and_commit_never_both_commit_a_range(faults, tmp_path):
    """A stale checkpoint's query and the live one commit the same records at once.

    The first writer is held inside the catalog's commit (its table loaded, guard passed,
    transaction staged) until the second has committed: its commit then conflicts, and
    its retry must see the other's positions and refuse, not commit the rows again.
    """
    data_dir = tmp_path / "data"
    live, stale = sink(data_dir, "live-query"), sink(data_dir, "stale-query")
    live.commit([live.write(iter([raw_batch(range(1, 11), shard="a")]))], batchId=0)
    held, other_done = threading.Event(), threading.Event()
    first_in = threading.Lock()
    results: dict[str, object] = {}

    def hold_first(_table: str) -> None:
        if first_in.acquire(blocking=False):
            held.set()
            assert other_done.wait(timeout=120)

    def commit(writer: IcebergStreamWriter, batch_id: int) -> None:
        message = writer.write(iter([raw_batch(range(11, 21), shard="a")]))
        try:
            writer.commit([message], batchId=batch_id)
            results[writer.options.writer_id] = "committed"
        except OverlappingPositionsError as error:
            writer.abort([message], batchId=batch_id)
            results[writer.options.writer_id] = error

    with pause_commits(hold_first):
        first = threading.Thread(target=commit, args=(stale, 5))
        first.start()
        assert held.wait(timeout=120)
        commit(live, 1)
        other_done.set()
        first.join()

    assert results["live-query"] == "committed"
    assert isinstance(results["stale-query"], OverlappingPositionsError)
    assert sequences(data_dir) == expected("a", 1, 20)
    assert committed_positions(live.options.load_table()) == {"a": "20"}


def test_an_empty_batch_racing_a_commit_never_moves_positions_back(faults, tmp_path):
    """Issue 31, defect 1: two queries on one table, the stale one with an empty batch.

    The stale writer loads the table (positions up to 10) for its empty batch; the live
    writer commits records 11-20 before the stale writer's commit reaches the catalog.
    The empty batch carries no data, so no snapshot requirement: had it written the
    positions it loaded, they would fall back to 10, the stale writer's next batch
    (records 11-20 again) would pass the overlap guard, and a checkpoint-less restart
    would read 11-20 again.
    """
    data_dir = tmp_path / "data"
    live, stale = sink(data_dir, "live-query"), sink(data_dir, "stale-query")
    live.commit([live.write(iter([raw_batch(range(1, 11), shard="a")]))], batchId=0)
    raced = threading.Lock()

    def live_commits_first(_table: str) -> None:
        if raced.acquire(blocking=False):  # inside the stale writer's commit: once
            live.commit([live.write(iter([raw_batch(range(11, 21), shard="a")]))], batchId=1)

    with pause_commits(live_commits_first):
        stale.commit([stale.write(iter([]))], batchId=1)

    table = stale.options.load_table()
    assert committed_positions(table) == {"a": "20"}, "positions moved backwards"
    assert table.properties["kinesis-lake.writer.stale-query.last-batch-id"] == "1"
    with pytest.raises(OverlappingPositionsError):
        stale.commit([stale.write(iter([raw_batch(range(11, 21), shard="a")]))], batchId=2)
    assert sequences(data_dir) == expected("a", 1, 20)


def test_a_commit_the_catalog_applies_after_the_abort_finds_its_files_in_place(faults, tmp_path):
    """Issue 31, suspected d: the catalog applies the commit after the abort's reload.

    The abort reads a table that does not reference the batch's files yet (the catalog
    is still processing the commit whose answer was lost); whatever it deletes on that
    evidence, the table references once the commit lands.
    """
    data_dir = tmp_path / "data"
    writer = sink(data_dir)
    arm(faults, LANDS_LATE)
    first = writer.write(iter([raw_batch(range(100, 150), shard="a")]))
    with pytest.raises(CommitStateUnknownException):
        writer.commit([first], batchId=0)
    writer.abort([first], batchId=0)  # what Spark does for any exception of commit

    catalog = open_catalog("kinesis_lake", data_dir=data_dir)
    assert isinstance(catalog, AmbiguousCatalog)
    assert apply_late_commits(catalog) == [True], "the late commit should have landed"
    assert all(exists(p) for p in first.paths), "the table references files the abort deleted"
    replay = writer.write(iter([raw_batch(range(100, 150), shard="a")]))
    writer.commit([replay], batchId=0)  # skipped: the watermark says batch 0 landed
    assert sequences(data_dir) == expected("a", 100, 50)


def test_an_empty_batch_whose_commit_lands_late_never_moves_the_watermark_back(faults, tmp_path):
    """The catalog applies an empty batch's commit only after the writer went on.

    Batch 1 read nothing; its commit's answer is lost while the catalog still holds it;
    the replay commits batch 1, batch 2 commits rows, and only then the held commit is
    applied. Carrying no snapshot, it would have no requirement: the watermark would fall
    back to 1, and the replay of batch 2 (a crash before Spark's checkpoint) would be
    refused as a stale checkpoint instead of skipped, stopping ingestion.
    """
    data_dir = tmp_path / "data"
    writer = sink(data_dir)
    writer.commit([writer.write(iter([raw_batch(range(1, 11), shard="a")]))], batchId=0)
    arm(faults, LANDS_LATE, at_next_commit=False)
    with pytest.raises(CommitStateUnknownException):
        writer.commit([writer.write(iter([]))], batchId=1)
    writer.commit([writer.write(iter([]))], batchId=1)  # its replay, after the restart
    writer.commit([writer.write(iter([raw_batch(range(11, 21), shard="a")]))], batchId=2)

    catalog = open_catalog("kinesis_lake", data_dir=data_dir)
    assert isinstance(catalog, AmbiguousCatalog)
    assert apply_late_commits(catalog) == [False], "the late commit landed over batch 2"
    assert last_committed_batch(writer.options.load_table(), "query-1") == 2
    replay = writer._commit(
        [writer.write(iter([raw_batch(range(11, 21), shard="a")]))], 2, "query-1"
    )
    assert replay is not None and replay.skipped_duplicate
    assert sequences(data_dir) == expected("a", 1, 20)


def test_compaction_giving_up_on_conflicts_keeps_the_files_a_commit_in_flight_may_add(
    faults, tmp_path
):
    """Every compaction attempt hears "conflict" while the catalog still holds it (a
    retrying client's lie); compaction gives up, and then the first held attempt lands
    (its base is still current; the others are refused). A read before giving up proved
    nothing: the files it deleted would be the table's."""
    data_dir = tmp_path / "data"
    writer = sink(data_dir)
    for batch in range(4):
        keys = range(100 + batch * 10, 110 + batch * 10)
        writer.commit([writer.write(iter([raw_batch(keys, shard="a")]))], batchId=batch)
    table = writer.options.load_table()
    arm(
        faults,
        LANDS_LATE,
        error="conflict",
        table="lake.raw",
        times=DEFAULT_MAX_ATTEMPTS,
        at_next_commit=False,
    )
    with pytest.raises(CommitFailedException):
        compact(table, target_file_size_bytes=64 * 1024 * 1024)
    landed = apply_late_commits(open_catalog("kinesis_lake", data_dir=data_dir))
    assert landed.count(True) == 1
    assert sequences(data_dir) == expected("a", 100, 40)


def test_a_replay_skipped_after_its_own_attempt_was_lost_keeps_that_attempts_files(
    faults, tmp_path
):
    """The skip of a replay is no proof that the replay's own earlier attempt never lands.

    Batch 1 read nothing and its answer was lost while the catalog held it; its replay
    (after the restart) read records 11-20. The catalog applies the empty commit at the
    replay's first attempt, then holds that attempt and answers "conflict". The retry
    sees watermark 1 and skips the batch; the held attempt still lands afterwards (an
    empty commit does not move ``main``, so its requirement holds), and the table must
    not reference files the skip deleted.
    """
    data_dir = tmp_path / "data"
    writer = sink(data_dir)
    writer.commit([writer.write(iter([raw_batch(range(1, 11), shard="a")]))], batchId=0)
    arm(faults, LANDS_LATE)  # the empty batch: applied at the next commit of the table
    arm(faults, LANDS_LATE, error="conflict", at_next_commit=False)  # the replay's attempt
    with pytest.raises(CommitStateUnknownException):
        writer.commit([writer.write(iter([]))], batchId=1)
    writer.abort([writer.write(iter([]))], batchId=1)
    replay = writer.write(iter([raw_batch(range(11, 21), shard="a")]))
    outcome = writer._commit([replay], 1, "query-1")
    assert outcome is not None and outcome.skipped_duplicate

    catalog = open_catalog("kinesis_lake", data_dir=data_dir)
    assert isinstance(catalog, AmbiguousCatalog)
    assert apply_late_commits(catalog) == [True], "the replay's held attempt should land"
    assert all(exists(p) for p in replay.paths), "the table references files the skip deleted"
    assert sequences(data_dir) == expected("a", 1, 20)


_RACED: list[tuple[str, int]] = []


def record_the_race(argument: str) -> None:
    """A raced writer: notes how many snapshots lake.src holds while the commit waits."""
    table = open_catalog("kinesis_lake", data_dir=Path(argument)).load_table("lake.src")
    _RACED.append((argument, len(table.metadata.snapshots)))


def test_a_raced_commit_runs_the_other_writer_before_it_lands_once(faults, tmp_path):
    """The derived simulator's race step relies on this: the armed call runs inside the
    next commit of the named table only, before that commit is applied, then it lands."""
    from kinesis_lake_tests.ambiguous_catalog import arm_race

    catalog = open_catalog("kinesis_lake", data_dir=tmp_path / "data")
    ensure_namespace(catalog, "lake")
    schema = pa.schema([pa.field("id", pa.int64())])
    other = catalog.create_table("lake.other", schema)
    source = catalog.create_table("lake.src", schema)
    _RACED.clear()
    call = f"{__name__}:{record_the_race.__name__}"
    arm_race(faults, call, str(tmp_path / "data"), table="lake.src")

    other.append(pa.table({"id": [1]}, schema=schema))  # another table: not raced
    assert _RACED == []
    source.append(pa.table({"id": [1]}, schema=schema))
    source.append(pa.table({"id": [2]}, schema=schema))  # the fault was taken: not again

    assert [(str(tmp_path / "data"), 0)] == _RACED, "ran once, before the first commit landed"
    assert len(catalog.load_table("lake.src").metadata.snapshots) == 2
    assert pending(faults) == 0
