"""Table upkeep as one pass: compact, expire snapshots, remove orphan files.

The order matters: files compaction replaces stay referenced by older snapshots until
those expire, and only then can orphan removal (past its age window) delete them. Expiry
never removes a snapshot a downstream table has not processed yet, nor any before a
declared downstream table's first refresh, so every incremental reader finds where it
left off.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from pyiceberg.table import Table

from kinesis_lake.config import Settings
from kinesis_lake.errors import TableError
from kinesis_lake.events.declaration import (
    AGGREGATE_TABLE,
    QUARANTINE_TABLE,
    RAW_TABLE,
    LakeDeclaration,
)
from kinesis_lake.events.declaration_file import load_declaration
from kinesis_lake.iceberg import maintenance
from kinesis_lake.iceberg.incremental import caught_up_snapshot_id
from kinesis_lake.pipeline.lake import load_table, open_lake

DEFAULT_TARGET_FILE_SIZE = 128 * 1024 * 1024
DEFAULT_RETAIN_LAST = 100
DEFAULT_SNAPSHOT_MAX_AGE_HOURS = 24.0
MAX_AGE_PROPERTY = "history.expire.max-snapshot-age-ms"


def consumers(
    declaration: LakeDeclaration, raw_table: str = RAW_TABLE
) -> dict[str, tuple[str, ...]]:
    """Every table of the lake, each with the tables that read it incrementally: their
    last-processed source snapshot must survive expiry or their next refresh cannot run.
    ``raw_table`` is the raw table when the declaration names no streams."""
    raws = {
        stream.raw_table: tuple(t.name for t in declaration.tables if t.stream == stream.name)
        for stream in declaration.streams
    } or {raw_table: tuple(declaration.names)}
    readers = {
        **{raw: (*tables, QUARANTINE_TABLE) for raw, tables in raws.items()},
        **{
            name: (AGGREGATE_TABLE,) if name == declaration.aggregate_source else ()
            for name in declaration.names
        },
        QUARANTINE_TABLE: (),
        AGGREGATE_TABLE: (),
    }
    for spec in declaration.derived:
        readers[spec.name] = ()
        if spec.upsert is not None:
            readers[spec.tombstones] = ()
        if spec.incremental:
            readers[spec.source] = (*readers[spec.source], spec.name)
    return readers


@dataclass(frozen=True)
class MaintenancePolicy:
    """How hard one pass cleans; None takes the table's own property or the default."""

    snapshot_max_age_hours: float | None = None
    retain_last_snapshots: int | None = None
    orphan_min_age_hours: float = 72.0
    target_file_size_bytes: int | None = None
    min_input_files: int = 2


@dataclass(frozen=True)
class MaintenancePass:
    """What one pass did, in numbers (the Dagster asset plots them)."""

    table: str
    files_before: int
    files_after: int
    bytes_before: int
    bytes_after: int
    files_rewritten: int
    files_written: int
    partitions_compacted: int
    snapshots_before: int
    snapshots_after: int
    snapshots_expired: int
    orphans_removed: int
    orphan_bytes_removed: int
    commit_attempts: int
    seconds: float


def expiry_cutoff_ms(table: Table, consumers: list[Table | None], max_age_hours: float) -> int:
    """Expire before this time: ``max_age_hours`` ago, but no later than the oldest
    snapshot of ``table`` a consumer last caught up to (so its next incremental read
    still finds where it left off).

    A consumer that has not caught up yet (None: declared, not created) holds back all
    expiry: its first refresh reads ``table`` at whatever snapshot is current when it
    starts and names that snapshot only when it commits, so any snapshot may be the one it
    will record (the soak found a pass expiring it mid-refresh: the table was stuck).
    """
    cutoff = int((time.time() - max_age_hours * 3600) * 1000)
    for consumer in consumers:
        source = caught_up_snapshot_id(table, consumer) if consumer is not None else None
        snapshot = table.snapshot_by_id(source) if source is not None else None
        if snapshot is None:
            return 0
        cutoff = min(cutoff, snapshot.timestamp_ms)
    return cutoff


def _int_property(identifier: str, table: Table, name: str, default: int) -> int:
    """Table property ``name`` as an integer, else ``default``. Operators set these by
    hand, so a typo fails the pass in one line naming the table, the property and the fix."""
    raw = table.properties.get(name)
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise TableError(
            f"{identifier}: {name}={raw!r} is not a whole number: set the table property to "
            f"one, or remove it for the default ({default})."
        ) from None


def run_maintenance(settings: Settings, name: str, policy: MaintenancePolicy) -> MaintenancePass:
    """One pass over the lake's table ``name`` (e.g. ``"raw_events"``)."""
    catalog = open_lake(settings)
    identifier = settings.table_identifier(name)
    table = catalog.load_table(identifier)
    declaration = load_declaration(settings.event_schema_path)
    readers = consumers(declaration, settings.raw_table_name)[name]
    downstream = [load_table(catalog, settings.table_identifier(reader)) for reader in readers]
    started = time.monotonic()
    snapshots_before = len(table.metadata.snapshots)
    target = policy.target_file_size_bytes or _int_property(
        identifier, table, "write.target-file-size-bytes", DEFAULT_TARGET_FILE_SIZE
    )
    max_age_hours = policy.snapshot_max_age_hours
    if max_age_hours is None:
        max_age_ms = _int_property(
            identifier, table, MAX_AGE_PROPERTY, int(DEFAULT_SNAPSHOT_MAX_AGE_HOURS * 3_600_000)
        )
        max_age_hours = max_age_ms / 3_600_000
    retain_last = policy.retain_last_snapshots or _int_property(
        identifier, table, "history.expire.min-snapshots-to-keep", DEFAULT_RETAIN_LAST
    )
    compacted = maintenance.compact(
        table, target_file_size_bytes=target, min_input_files=policy.min_input_files
    )
    expired = maintenance.expire_snapshots(
        table,
        older_than_ms=expiry_cutoff_ms(table, downstream, max_age_hours),
        retain_last=retain_last,
    )
    orphans = maintenance.remove_orphan_files(
        table, older_than_ms=int((time.time() - policy.orphan_min_age_hours * 3600) * 1000)
    )
    table.refresh()
    return MaintenancePass(
        table=identifier,
        files_before=compacted.files_before,
        files_after=orphans.files_after,
        bytes_before=compacted.bytes_before,
        bytes_after=orphans.bytes_after,
        files_rewritten=compacted.files_rewritten,
        files_written=compacted.files_written,
        partitions_compacted=compacted.partitions_compacted,
        snapshots_before=snapshots_before,
        snapshots_after=len(table.metadata.snapshots),
        snapshots_expired=expired.snapshots_expired,
        orphans_removed=orphans.orphans_removed,
        orphan_bytes_removed=orphans.orphan_bytes_removed,
        commit_attempts=(
            compacted.commit_attempts + expired.commit_attempts + orphans.commit_attempts
        ),
        seconds=round(time.monotonic() - started, 3),
    )
