"""The deployment's lake: its catalog and tables, opened the one way every caller uses.

The CLI, the demo, the pipeline jobs, the checks, benchmarks and scripts all open the
catalog and tables through here, so "which catalog, which data directory" is decided once,
from ``Settings``.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
from pyiceberg.table import Table

from kinesis_lake.config import Settings
from kinesis_lake.errors import TableError
from kinesis_lake.events.declaration import LakeDeclaration
from kinesis_lake.iceberg.catalog import configured_catalog_properties, open_catalog
from kinesis_lake.iceberg.row_deletes import live_records
from kinesis_lake.iceberg.summary import committed_positions, positions_snapshot_id


def open_lake(settings: Settings) -> Catalog:
    """The catalog every table of this deployment lives in."""
    return open_catalog(settings.catalog_name, data_dir=settings.data_dir)


def lake_streams(settings: Settings, declaration: LakeDeclaration) -> list[Settings]:
    """The settings of each stream the lake ingests: the declaration's streams, each with
    its own raw table (so its own checkpoint), or the one the settings name."""
    if not declaration.streams:
        return [settings]
    return [settings.for_stream(s.name, s.raw_table) for s in declaration.streams]


def declared_stream(settings: Settings, declaration: LakeDeclaration) -> str | None:
    """The name the declaration gives the stream of ``settings`` (None: none declared)."""
    return settings.stream_name if declaration.streams else None


def open_existing_lake(settings: Settings) -> Catalog:
    """The catalog, for commands that only read: a local lake that does not exist yet is an
    error (opening it would create an empty one, and the reader would see nothing)."""
    local = configured_catalog_properties(settings.catalog_name) is None
    if local and not (settings.data_dir.expanduser().resolve() / "catalog.db").exists():
        raise TableError(
            f"No lake at KINESIS_LAKE_DATA_DIR={settings.data_dir} yet. make dev keeps its "
            "lake in .data/dev and make demo in .data/demo (set KINESIS_LAKE_DATA_DIR to "
            "read them); kinesis-lake ingest creates one here."
        )
    return open_lake(settings)


def table_names(catalog: Catalog, namespace: str) -> list[str]:
    try:
        return sorted(identifier[-1] for identifier in catalog.list_tables(namespace))
    except NoSuchNamespaceError:
        return []


def load_table(catalog: Catalog, identifier: str) -> Table | None:
    """``identifier``, or None when no run has created it yet (a fresh deployment)."""
    try:
        return catalog.load_table(identifier)
    except NoSuchTableError:
        return None


@dataclass(frozen=True)
class TableStats:
    """A table's size, from its current snapshot summary (metadata only, no scan)."""

    table: str
    snapshot_id: int | None
    rows: int
    data_files: int
    total_bytes: int


def table_stats(table: Table) -> TableStats:
    snapshot = table.current_snapshot()
    summary = snapshot.summary if snapshot is not None else None

    def total(key: str) -> int:
        return int(summary.get(key, 0)) if summary is not None else 0

    return TableStats(
        table=".".join(table.name()),
        snapshot_id=snapshot.snapshot_id if snapshot is not None else None,
        rows=live_records(summary),  # total-records counts deleted rows too
        data_files=total("total-data-files"),
        total_bytes=total("total-files-size"),
    )


@dataclass(frozen=True)
class CommittedPositions:
    """Where the raw table says ingestion has committed each shard to, and the snapshot
    whose rows those positions describe."""

    positions: dict[str, str]
    snapshot_id: int | None


def raw_positions(settings: Settings) -> CommittedPositions:
    """The committed positions of the deployment's raw table; empty before the first run."""
    raw = load_table(open_lake(settings), settings.raw_table)
    if raw is None:
        return CommittedPositions({}, None)
    return CommittedPositions(committed_positions(raw), positions_snapshot_id(raw))
