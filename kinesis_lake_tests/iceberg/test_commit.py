"""The exactly-once commit protocol: replays skipped, races retried, nothing lost."""

from __future__ import annotations

import threading
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import LongType, NestedField, StringType

from kinesis_lake.iceberg.catalog import open_catalog
from kinesis_lake.iceberg.commit import (
    commit_arrow,
    commit_files,
    last_committed_batch,
    watermark_property,
)
from kinesis_lake.iceberg.data_files import TableWriteTarget, WrittenFile, write_data_files
from kinesis_lake.iceberg.retry import fail_fast
from kinesis_lake.iceberg.tables import ensure_table
from kinesis_lake_tests.iceberg.helpers import RAW, ingest, keys_of, racing_raw, raw_batch


def _write(table: Table, keys: range, prefix: str) -> list[WrittenFile]:
    return write_data_files(
        TableWriteTarget.from_table(table), [raw_batch(keys)], file_prefix=prefix
    )


def test_commit_then_replay_of_the_same_batch_is_skipped(raw: Table) -> None:
    first = commit_files(
        raw, _write(raw, range(10), "a"), writer_id="w", batch_id=0, summary={"pos": "42"}
    )
    replay = commit_files(raw, _write(raw, range(10), "b"), writer_id="w", batch_id=0)
    older = commit_files(raw, _write(raw, range(10), "c"), writer_id="w", batch_id=-1)

    assert (first.committed, first.skipped_duplicate, first.files, first.rows) == (
        True,
        False,
        1,
        10,
    )
    assert (replay.committed, replay.skipped_duplicate, replay.rows) == (False, True, None)
    assert older.skipped_duplicate
    assert keys_of(raw) == list(range(10))
    assert last_committed_batch(raw, "w") == 0
    summary = raw.snapshot_by_id(first.snapshot_id).summary
    assert (summary["kinesis-lake.writer-id"], summary["kinesis-lake.batch-id"]) == ("w", "0")
    assert summary["pos"] == "42"


def test_watermark_survives_snapshot_expiry(raw: Table) -> None:
    ingest(raw, "w", 0, range(5))
    ingest(raw, "other", 0, range(5, 10))
    current = raw.current_snapshot().snapshot_id
    with raw.maintenance.expire_snapshots() as expiry:
        expiry.by_ids([s.snapshot_id for s in raw.snapshots() if s.snapshot_id != current])

    assert ingest(raw, "w", 0, range(5)).skipped_duplicate
    assert keys_of(raw) == list(range(10))


def test_empty_batch_still_records_that_it_is_done(raw: Table) -> None:
    ingest(raw, "w", 0, range(3))
    before = raw.current_snapshot().snapshot_id

    outcome = commit_files(raw, [], writer_id="w", batch_id=1)

    assert (outcome.committed, outcome.snapshot_id, outcome.files, outcome.rows) == (
        True,
        None,
        0,
        0,
    )
    assert raw.current_snapshot().snapshot_id == before
    assert raw.properties[watermark_property("w")] == "1"
    assert ingest(raw, "w", 1, range(100, 103)).skipped_duplicate


def test_writer_properties_move_with_the_watermark_and_only_with_it(raw: Table) -> None:
    """What a caller keeps next to its watermark (lineage: which source table its batch ids
    count in) is written by the watermark's own commits, empty ones too, survives expiry,
    and is left alone by a skipped replay. The watermark itself is not one of them."""
    uuid = "kinesis-lake.writer.w.source-uuid"
    commit_files(
        raw,
        _write(raw, range(3), "a"),
        writer_id="w",
        batch_id=0,
        writer_properties={"source-uuid": "A"},
    )
    commit_files(raw, [], writer_id="w", batch_id=1, writer_properties={"source-uuid": "B"})
    assert (raw.properties[uuid], last_committed_batch(raw, "w")) == ("B", 1)
    snapshot = raw.current_snapshot()
    assert snapshot is not None
    current = snapshot.snapshot_id
    with raw.maintenance.expire_snapshots() as expiry:
        expiry.by_ids([s.snapshot_id for s in raw.snapshots() if s.snapshot_id != current])
    skipped = commit_files(
        raw, [], writer_id="w", batch_id=1, writer_properties={"source-uuid": "C"}
    )
    raw.refresh()

    assert skipped.skipped_duplicate
    assert raw.properties[uuid] == "B"
    for wrong in ({"last-batch-id": "9"}, {"a.b": "x"}, {"": "x"}):
        with pytest.raises(ValueError, match="writer_properties"):
            commit_files(raw, [], writer_id="w", batch_id=2, writer_properties=wrong)
    assert last_committed_batch(raw, "w") == 1


def test_fail_fast_view_does_not_let_pyiceberg_rebase_silently(
    raw: Table, catalog: Catalog
) -> None:
    view = fail_fast(raw)
    ingest(catalog.load_table(RAW), "other", 0, range(3))

    with pytest.raises(CommitFailedException):
        view.append(pa.Table.from_batches([raw_batch(range(10, 13))]))
    assert keys_of(raw) == [0, 1, 2]
    # The zero-retry override lived in memory only.
    assert raw.properties["commit.retry.num-retries"] == "10"


def test_a_second_writer_committing_first_is_retried_without_loss(
    raw: Table, data_dir: Path
) -> None:
    racing, table, other = racing_raw(data_dir)
    racing.before_next_commit(lambda: ingest(other, "w2", 0, range(100, 110)))

    outcome = commit_files(table, _write(table, range(10), "w1"), writer_id="w1", batch_id=0)

    assert outcome.committed
    assert outcome.attempts == 2
    assert keys_of(table) == [*range(10), *range(100, 110)]
    assert table.properties[watermark_property("w1")] == "0"
    assert table.properties[watermark_property("w2")] == "0"
    assert table.current_snapshot().snapshot_id == outcome.snapshot_id


def test_a_zombie_of_the_same_writer_committing_first_makes_the_retry_a_skip(
    raw: Table, data_dir: Path
) -> None:
    racing, table, zombie = racing_raw(data_dir)
    racing.before_next_commit(lambda: ingest(zombie, "w", 0, range(10)))

    outcome = commit_files(table, _write(table, range(10), "w-again"), writer_id="w", batch_id=0)

    assert (outcome.committed, outcome.skipped_duplicate, outcome.attempts) == (False, True, 2)
    assert keys_of(table) == list(range(10))


def test_running_out_of_attempts_raises(raw: Table, data_dir: Path) -> None:
    racing, table, other = racing_raw(data_dir)
    for batch_id in range(2):
        racing.before_next_commit(
            lambda b=batch_id: ingest(other, "w2", b, range(100 * (b + 1), 100 * (b + 1) + 3))
        )

    with pytest.raises(CommitFailedException):
        commit_files(
            table, _write(table, range(3), "w1"), writer_id="w1", batch_id=0, max_attempts=2
        )
    assert last_committed_batch(table, "w1") is None


def test_concurrent_writers_lose_and_duplicate_nothing(raw: Table, data_dir: Path) -> None:
    errors: list[BaseException] = []

    def writer(name: str, offset: int) -> None:
        try:
            table = open_catalog(data_dir=data_dir).load_table(RAW)
            for batch_id in range(6):
                start = offset + batch_id * 10
                assert ingest(table, name, batch_id, range(start, start + 10)).committed
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=writer, args=(f"w{i}", i * 1000)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    assert keys_of(raw) == sorted(i * 1000 + k for i in range(3) for k in range(60))


WINDOWS = Schema(
    NestedField(1, "window", StringType(), required=True),
    NestedField(2, "events", LongType(), required=True),
)
WINDOWS_ARROW = pa.schema(
    [
        pa.field("window", pa.string(), nullable=False),
        pa.field("events", pa.int64(), nullable=False),
    ]
)


def _counts(table: Table) -> dict[str, int]:
    table.refresh()
    return {r["window"]: r["events"] for r in table.scan().to_arrow().to_pylist()}


def test_commit_arrow_overwrites_a_filter_atomically_and_once(catalog: Catalog) -> None:
    table = ensure_table(catalog, "lake.windows", WINDOWS)
    first = pa.table({"window": ["a", "b"], "events": [1, 2]}, schema=WINDOWS_ARROW)
    second = pa.table({"window": ["b", "c"], "events": [20, 30]}, schema=WINDOWS_ARROW)

    appended = commit_arrow(table, first, writer_id="agg", batch_id=1)
    replaced = commit_arrow(
        table, second, writer_id="agg", batch_id=2, overwrite_filter="window in ('b', 'c')"
    )
    replay = commit_arrow(
        table, second, writer_id="agg", batch_id=2, overwrite_filter="window in ('b', 'c')"
    )

    assert (appended.committed, appended.rows, appended.files) == (True, 2, 1)
    assert (replaced.committed, replaced.rows) == (True, 2)
    assert replay.skipped_duplicate
    assert _counts(table) == {"a": 1, "b": 20, "c": 30}
    assert table.current_snapshot().summary["kinesis-lake.batch-id"] == "2"
    assert last_committed_batch(table, "agg") == 2


def test_commit_arrow_with_nothing_to_write_moves_only_the_watermark(catalog: Catalog) -> None:
    table = ensure_table(catalog, "lake.windows", WINDOWS)
    empty = WINDOWS_ARROW.empty_table()

    outcome = commit_arrow(
        table, empty, writer_id="agg", batch_id=7, overwrite_filter="window = 'x'"
    )

    assert (outcome.committed, outcome.snapshot_id, outcome.rows) == (True, None, 0)
    assert table.current_snapshot() is None
    assert last_committed_batch(table, "agg") == 7


def test_commit_arrow_that_only_deletes_rows_reports_none_added(catalog: Catalog) -> None:
    """An upsert whose every touched key was deleted commits a delete snapshot, whose
    summary has no added-records key (the outcome read it as an integer and crashed)."""
    table = ensure_table(catalog, "lake.windows", WINDOWS)
    rows = pa.table({"window": ["a", "b"], "events": [1, 2]}, schema=WINDOWS_ARROW)
    commit_arrow(table, rows, writer_id="agg", batch_id=1)

    outcome = commit_arrow(
        table,
        WINDOWS_ARROW.empty_table(),
        writer_id="agg",
        batch_id=2,
        overwrite_filter="window = 'a'",
    )

    assert (outcome.committed, outcome.rows) == (True, 0)
    assert _counts(table) == {"b": 2}


def test_a_commit_replays_the_table_metadata_once_per_staged_change(
    raw: Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pyiceberg 0.12 rebuilds (and deep-copies) the whole table metadata, every retained
    snapshot included, on each read of a transaction's metadata; ``add_files`` reads it
    about twenty times. Over a table's life that made a commit's cost grow with its history
    (benchmark 5: 4.8x over 300 commits). The commit path must reuse one rebuild per state
    of the transaction: one before anything is staged, one per staged change."""
    import pyiceberg.table

    for batch_id in range(3):
        ingest(raw, "w", batch_id, range(batch_id * 10, batch_id * 10 + 10))
    rebuilds: list[int] = []
    replay = pyiceberg.table.update_table_metadata

    def counted(base, updates, *args, **kwargs):  # type: ignore[no-untyped-def]
        rebuilds.append(len(updates))
        return replay(base, updates, *args, **kwargs)

    monkeypatch.setattr(pyiceberg.table, "update_table_metadata", counted)
    outcome = commit_files(raw, _write(raw, range(30, 40), "d"), writer_id="w", batch_id=3)

    assert outcome.committed
    # One rebuild per distinct number of staged updates (a staged change only grows them).
    assert len(rebuilds) == len(set(rebuilds)), rebuilds
    assert keys_of(raw) == list(range(40))


def test_a_commit_never_opens_the_data_files_it_adds(raw: Table) -> None:
    """Executors describe the files they wrote (size, Parquet footer, partition); the
    driver commits those descriptions. Reading every footer back made the commit of a
    500-shard micro-batch 1.4 s of 1.7 (benchmark 9), and on S3 it is a GET per file on
    the driver. The files are made unreadable while the commit runs to prove it."""
    written = _write(raw, range(10), "a") + _write(raw, range(10, 25), "b")
    paths = [Path(file.path.removeprefix("file://")) for file in written]
    contents = {path: path.read_bytes() for path in paths}
    for path in paths:
        path.write_bytes(b"not parquet")

    outcome = commit_files(raw, written, writer_id="w", batch_id=0)

    for path, content in contents.items():
        path.write_bytes(content)
    assert (outcome.committed, outcome.files, outcome.rows) == (True, 2, 25)
    assert keys_of(raw) == list(range(25))
    entries = {task.file.file_path: task.file for task in raw.scan().plan_files()}
    assert {f.path: f.size_bytes for f in written} == {
        p: e.file_size_in_bytes for p, e in entries.items()
    }


def test_positions_of_a_table_written_before_the_property_existed_are_still_read(
    raw: Table,
) -> None:
    """Tables ingested by older versions hold the positions only in snapshot summaries;
    the first commit of this version writes the property, which is read from then on."""
    import json

    from kinesis_lake.iceberg.summary import POSITIONS, committed_positions

    old = {"shardId-000000000000": "41"}
    raw.append(
        pa.Table.from_batches([raw_batch(range(3))]),
        snapshot_properties={POSITIONS: json.dumps(old)},
    )
    assert POSITIONS not in raw.properties
    assert committed_positions(raw) == old

    newer = {"shardId-000000000000": "42", "shardId-000000000001": "7"}
    commit_files(
        raw,
        _write(raw, range(3, 6), "n"),
        writer_id="w",
        batch_id=0,
        summary={POSITIONS: json.dumps(newer)},
    )
    assert committed_positions(raw) == newer
    assert POSITIONS not in raw.current_snapshot().summary.additional_properties


def test_a_table_said_to_be_just_loaded_but_stale_still_commits_exactly_once(
    raw: Table, data_dir: Path
) -> None:
    """The sink loads the table right before it commits and skips the refresh that would
    parse the same metadata again (``just_loaded``). If a zombie of the same writer lands
    the batch in between, the commit must fail against the catalog and retry into a skip,
    not add the batch twice."""
    table = open_catalog(data_dir=data_dir).load_table(RAW)
    zombie = open_catalog(data_dir=data_dir).load_table(RAW)
    ingest(zombie, "w", 0, range(10))

    outcome = commit_files(
        table, _write(table, range(10), "again"), writer_id="w", batch_id=0, just_loaded=True
    )

    assert (outcome.committed, outcome.skipped_duplicate, outcome.attempts) == (False, True, 2)
    assert keys_of(table) == list(range(10))


def test_a_manifest_merge_on_the_raw_table_rewrites_a_bounded_number_of_entries(
    raw: Table,
) -> None:
    """A merge rewrites every entry of the manifests it merges, and a merged manifest is
    merged again at each merge until it reaches the table's manifest target size. With a
    1 MB target that was every data file up to about 2,600 of them, every ninth commit, up
    to a second each (benchmark 5): commits grew costlier as files accumulated."""
    target = TableWriteTarget.from_table(raw)
    days = 30  # one data file per day partition: 30 per commit
    for batch_id in range(100):
        batches = [
            raw_batch([batch_id * days + day], day=day, batch_id=batch_id) for day in range(days)
        ]
        written = write_data_files(target, batches, file_prefix=f"w-{batch_id}")
        assert len(written) == days
        commit_files(raw, written, writer_id="w", batch_id=batch_id)

    rewritten_per_commit = [
        sum(
            manifest.existing_files_count or 0
            for manifest in snapshot.manifests(raw.io)
            if manifest.added_snapshot_id == snapshot.snapshot_id
        )
        for snapshot in raw.snapshots()
    ]
    assert len(rewritten_per_commit) == 100
    assert max(rewritten_per_commit) > 0, "merges ran"
    # 256 KB of manifest holds about 700 of these entries; 1 MB about 2,700.
    assert max(rewritten_per_commit) <= 1_000, [n for n in rewritten_per_commit if n]
    # Issue 34: manifests do not pile up one per commit (pyiceberg's fast append), but
    # grow with the files the table holds: a full manifest per ~700 entries, plus fewer
    # than commit.manifest.min-count-to-merge (10) waiting for the next merge.
    manifests = [len(snapshot.manifests(raw.io)) for snapshot in raw.snapshots()]
    assert all(
        count < 10 + -(-days * commit // 600) for commit, count in enumerate(manifests, 1)
    ), manifests


def test_positions_never_move_backwards_whatever_commit_carries_them(
    raw: Table, data_dir: Path
) -> None:
    """A commit whose ``prepare`` proposes positions below what another writer committed
    for one shard while it raced: positions end as the per-shard maximum of both, never
    as either alone. Positions cannot move without data: a commit without files that
    would change them is refused, since two such commits from one base could each
    overwrite the other's advance (no catalog requirement sees a property change)."""
    import json

    from kinesis_lake.iceberg.summary import POSITIONS, committed_positions

    racing, table, other = racing_raw(data_dir)
    racing.before_next_commit(
        lambda: commit_files(
            other,
            _write(other, range(5), "o"),
            writer_id="other",
            batch_id=0,
            summary={POSITIONS: json.dumps({"s": "50", "t": "5"})},
        )
    )

    outcome = commit_files(
        table,
        _write(table, range(5, 10), "w"),
        writer_id="w",
        batch_id=0,
        prepare=lambda _base: {POSITIONS: json.dumps({"s": "20", "u": "3"})},
    )

    assert (outcome.committed, outcome.attempts) == (True, 2)
    assert committed_positions(open_catalog(data_dir=data_dir).load_table(RAW)) == {
        "s": "50",
        "t": "5",
        "u": "3",
    }
    with pytest.raises(ValueError, match="positions move only with data"):
        commit_files(
            table,
            [],
            writer_id="w",
            batch_id=1,
            prepare=lambda _base: {POSITIONS: json.dumps({"v": "1"})},
        )
    unchanged = commit_files(
        table, [], writer_id="w", batch_id=1, prepare=lambda _base: {POSITIONS: "{}"}
    )
    assert unchanged.committed and committed_positions(table)["s"] == "50"
