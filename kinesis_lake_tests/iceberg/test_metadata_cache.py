"""Table metadata is parsed once per metadata file: a commit reads back neither the file
it wrote nor the one it loaded moments before, and a commit by another process is still
seen by the next load (the cache is keyed by the immutable file, never by the table)."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadataUtil

from kinesis_lake.iceberg.catalog import open_catalog
from kinesis_lake.iceberg.metadata_cache import CACHE
from kinesis_lake_tests.iceberg.helpers import RAW, ingest, keys_of


def test_the_metadata_a_commit_wrote_is_loaded_without_reading_it_back(
    raw: Table, data_dir: Path
) -> None:
    ingest(raw, "w", 0, range(10))
    hits, misses = CACHE.hits, CACHE.misses

    loaded = open_catalog(data_dir=data_dir).load_table(RAW)

    assert (CACHE.hits, CACHE.misses) == (hits + 1, misses)
    assert loaded.metadata_location == raw.metadata_location
    on_disk = Path(loaded.metadata_location.removeprefix("file://")).read_text()
    assert loaded.metadata == TableMetadataUtil.parse_raw(on_disk)
    assert keys_of(loaded) == list(range(10))


def test_a_commit_by_another_process_is_seen_by_the_next_load(raw: Table, data_dir: Path) -> None:
    ingest(raw, "w", 0, range(10))
    before = open_catalog(data_dir=data_dir).load_table(RAW)
    other_process = (
        "import sys; from pathlib import Path\n"
        "from kinesis_lake.iceberg.catalog import open_catalog\n"
        "from kinesis_lake_tests.iceberg.helpers import RAW, ingest\n"
        "table = open_catalog(data_dir=Path(sys.argv[1])).load_table(RAW)\n"
        "assert ingest(table, 'other', 0, range(100, 105)).committed\n"
    )
    subprocess.run([sys.executable, "-c", other_process, str(data_dir)], check=True, timeout=120)

    after = open_catalog(data_dir=data_dir).load_table(RAW)

    assert after.metadata_location != before.metadata_location
    assert keys_of(after) == [*range(10), *range(100, 105)]
    assert keys_of(before) == [*range(10), *range(100, 105)]  # refresh sees it too


def test_a_busy_table_keeps_only_its_newest_metadata_in_memory(raw: Table) -> None:
    """Every commit writes a new metadata file, and at an hour of 1 s commits each one
    holds thousands of snapshots: a cache counting files would fill with one table's
    superseded versions, megabytes each, that nobody reads again."""
    before = CACHE.entries()
    for batch_id in range(5):
        ingest(raw, "w", batch_id, range(batch_id * 10, batch_id * 10 + 10))

    assert CACHE.entries() - before <= 2
    assert keys_of(raw) == list(range(50))


def test_threads_never_share_a_parsed_metadata(raw: Table, data_dir: Path) -> None:
    """pyiceberg's models fill lazy caches (``cached_property``) in their ``__dict__`` on
    first use, and every update deep-copies the metadata: one parse shared by two threads
    raised "dictionary changed size during iteration" when a backfill thread committed
    beside ingestion (test_iceberg_sink, 2026-12-07 fresh-clone run). Each thread keeps
    its own parses."""
    ingest(raw, "w", 0, range(10))
    here = [open_catalog(data_dir=data_dir).load_table(RAW) for _ in range(2)]
    there: list[Table] = []
    thread = threading.Thread(
        target=lambda: there.append(open_catalog(data_dir=data_dir).load_table(RAW))
    )
    thread.start()
    thread.join()

    assert here[0].metadata is here[1].metadata, "one thread still parses a file once"
    assert there[0].metadata is not here[0].metadata
    assert there[0].metadata == here[0].metadata
