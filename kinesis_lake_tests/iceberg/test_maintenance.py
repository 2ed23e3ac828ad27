"""Compaction, snapshot expiry and orphan removal keep every row, even under ingestion."""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table

from kinesis_lake.iceberg.catalog import open_catalog
from kinesis_lake.iceberg.maintenance import compact, expire_snapshots, remove_orphan_files
from kinesis_lake_tests.iceberg.helpers import RAW, ingest, keys_of, racing_raw

TARGET = 64 * 1024 * 1024


def _live_files(table: Table) -> int:
    table.refresh()
    return len(list(table.scan().plan_files()))


def _files_on_disk(table: Table) -> set[Path]:
    root = Path(table.location().removeprefix("file://"))
    return {p for p in root.rglob("*") if p.is_file()}


def _now_ms() -> int:
    return int(time.time() * 1000)


def test_compaction_bin_packs_small_files_per_partition(raw: Table) -> None:
    for batch_id in range(4):
        ingest(raw, "w", batch_id, range(batch_id * 10, batch_id * 10 + 10), day=0)
        ingest(raw, "v", batch_id, range(100 + batch_id * 10, 110 + batch_id * 10), day=1)
    ingest(raw, "u", 0, range(500, 505), day=2)  # a lone small file: nothing to pack it with

    report = compact(raw, target_file_size_bytes=TARGET)

    assert (report.files_before, report.files_after) == (9, 3)
    assert (report.files_rewritten, report.files_written, report.partitions_compacted) == (8, 2, 2)
    assert report.commit_attempts == 2
    assert report.bytes_before > 0 and report.bytes_after > 0
    assert keys_of(raw) == [*range(40), *range(100, 140), *range(500, 505)]
    summary = raw.current_snapshot().summary
    assert summary["kinesis-lake.operation"] == "compaction"
    assert summary["deleted-records"] == summary["added-records"]
    assert compact(raw, target_file_size_bytes=TARGET).files_rewritten == 0


def test_compaction_that_loses_a_race_with_an_append_retries_and_keeps_both(
    raw: Table, data_dir: Path
) -> None:
    for batch_id in range(3):
        ingest(raw, "w", batch_id, range(batch_id * 10, batch_id * 10 + 10))
    racing, table, other = racing_raw(data_dir)
    racing.before_next_commit(lambda: ingest(other, "w", 3, range(30, 40)))

    report = compact(table, target_file_size_bytes=TARGET)

    assert (report.partitions_compacted, report.commit_attempts) == (1, 2)
    assert keys_of(table) == list(range(40))
    assert _live_files(table) == 2  # the compacted file and the racing append


def test_compaction_whose_input_was_compacted_meanwhile_gives_up_cleanly(
    raw: Table, data_dir: Path
) -> None:
    for batch_id in range(3):
        ingest(raw, "w", batch_id, range(batch_id * 10, batch_id * 10 + 10))
    racing, table, other = racing_raw(data_dir)
    racing.before_next_commit(lambda: compact(other, target_file_size_bytes=TARGET))

    report = compact(table, target_file_size_bytes=TARGET)

    assert report.partitions_compacted == 0
    assert keys_of(table) == list(range(30))
    data_files = {p for p in _files_on_disk(table) if p.suffix == ".parquet"}
    assert len(data_files) == 4  # three inputs (still in history) and the winner's output


def test_compaction_while_ingestion_commits_keeps_every_row_exactly_once(
    raw: Table, data_dir: Path
) -> None:
    for batch_id in range(6):
        ingest(raw, "w", batch_id, range(batch_id * 10, batch_id * 10 + 10))
    errors: list[BaseException] = []

    def ingestion() -> None:
        table = open_catalog(data_dir=data_dir).load_table(RAW)
        try:
            for batch_id in range(6, 26):
                ingest(table, "w", batch_id, range(batch_id * 10, batch_id * 10 + 10))
                time.sleep(0.01)  # a micro-batch trigger, not a tight loop
        except BaseException as error:
            errors.append(error)

    ingester = threading.Thread(target=ingestion)
    ingester.start()
    compactor = open_catalog(data_dir=data_dir).load_table(RAW)
    while ingester.is_alive():
        # A round may lose every race to a busy writer and give up; it must never lose
        # or duplicate a row, which is what this test checks.
        with contextlib.suppress(CommitFailedException):
            compact(compactor, target_file_size_bytes=TARGET)
    ingester.join()
    final = compact(compactor, target_file_size_bytes=TARGET)

    assert errors == []
    assert keys_of(raw) == list(range(260))
    assert final.files_after == 1


def test_expiry_and_orphan_removal_report_and_keep_data_readable(raw: Table) -> None:
    for batch_id in range(5):
        ingest(raw, "w", batch_id, range(batch_id * 10, batch_id * 10 + 10))
    originals = {Path(t.file.file_path.removeprefix("file://")) for t in raw.scan().plan_files()}
    compact(raw, target_file_size_bytes=TARGET)
    orphan = Path(raw.location().removeprefix("file://")) / "data" / "stray.parquet"
    orphan.write_bytes(b"left by a task that died before reporting")
    snapshots = len(raw.snapshots())

    expired = expire_snapshots(raw, older_than_ms=_now_ms() + 1, retain_last=1)
    too_young = remove_orphan_files(raw, older_than_ms=0)
    removed = remove_orphan_files(raw, older_than_ms=_now_ms() + 1)

    assert expired.snapshots_expired == snapshots - 1
    assert len(raw.snapshots()) == 1
    assert too_young.orphans_removed == 0
    # The stray file, the five pre-compaction files, and manifests of expired snapshots.
    assert removed.orphans_removed > 1 + len(originals)
    assert removed.orphan_bytes_removed > 0
    assert not orphan.exists()
    assert not any(path.exists() for path in originals)
    assert (removed.files_before, removed.files_after) == (1, 1)
    assert keys_of(raw) == list(range(50))
    assert remove_orphan_files(raw, older_than_ms=_now_ms() + 1).orphans_removed == 0
    ingest(raw, "w", 5, range(50, 60))
    assert keys_of(raw) == list(range(60))


def test_expiry_keeps_the_newest_snapshots_whatever_their_age(raw: Table) -> None:
    for batch_id in range(3):
        ingest(raw, "w", batch_id, range(batch_id, batch_id + 1))

    report = expire_snapshots(raw, older_than_ms=_now_ms() + 1, retain_last=3)
    old_only = expire_snapshots(raw, older_than_ms=0, retain_last=1)

    assert report.snapshots_expired == 0
    assert old_only.snapshots_expired == 0
    assert len(raw.snapshots()) == 3
