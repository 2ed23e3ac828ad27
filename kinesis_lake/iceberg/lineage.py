"""Which state of its inputs a derived table holds, told by identities that never repeat.

Numbers cannot say it: a table dropped and re-created (what an expired-snapshot error tells
operators to do) starts its sequence numbers at 1 again, and a rollback makes an older
snapshot current while new commits still get higher numbers. A table's uuid with a
snapshot id names one state for good, and a table's ``last-sequence-number`` never goes
down in its life, so a watermark above it was taken on another table.

* A ``full`` table records, right after each recomputation's commit, its batch id and the
  ``uuid/snapshot`` of every input it was computed from: it is up to date exactly when
  that batch is its watermark and those are the inputs' current states.
* An incremental table's commits record its source's uuid next to the watermark, in a
  table property of the same commit (:func:`source_uuid_property`, which snapshot expiry
  cannot remove), and in their summaries (:data:`SOURCE_TABLE_UUID`, next to the source
  snapshot ``kinesis-lake.source-snapshot-id``): :func:`source_moved_back` says when that
  history is no longer the source's, and
  :func:`rebuild_if_source_moved_back` then empties the table and its watermark in one
  commit, so the refresh that follows is a first one.
"""

from __future__ import annotations

import json
import logging
import warnings

from pyiceberg.expressions import AlwaysTrue, BooleanExpression
from pyiceberg.table import Table
from pyiceberg.table.snapshots import ancestors_of

from kinesis_lake.iceberg.commit import (
    WRITER_PROPERTY_PREFIX,
    last_committed_batch,
    watermark_property,
)
from kinesis_lake.iceberg.incremental import SOURCE_SNAPSHOT_PROPERTY
from kinesis_lake.iceberg.summary import WRITER_ID, derived_writer_id

logger = logging.getLogger(__name__)

SOURCE_TABLE_UUID = "kinesis-lake.source-table-uuid"
"""Summary key of a derived table's snapshot: the uuid of the source table it read."""

SOURCE_UUID = "source-uuid"
"""Name of the writer property (:func:`source_uuid_property`) naming the source table."""

ALL_ROWS: BooleanExpression = AlwaysTrue()

REBUILT = "kinesis-lake.rebuilt"
"""Summary key of the snapshot that emptied a derived table for a rebuild (why): its own
incremental readers cannot follow a delete, so they rebuild in turn."""


def table_state(table: Table) -> str:
    """``uuid/snapshot id`` of ``table`` as it is now (``uuid/empty`` before any data)."""
    current = table.current_snapshot()
    return f"{table.metadata.table_uuid}/{current.snapshot_id if current else 'empty'}"


def inputs_property(writer_id: str) -> str:
    """Table property: the batch ``writer_id`` committed last and the inputs it read."""
    return f"kinesis-lake.writer.{writer_id}.inputs"


def full_refresh_batch(table: Table | None, writer_id: str, inputs: dict[str, str]) -> int | None:
    """The batch id a full recomputation from ``inputs`` (name -> :func:`table_state`)
    commits under; None when ``table`` already holds that recomputation.

    The one rule for the refresh and for its check. Batch ids only grow (the commit
    protocol skips a batch at or below the watermark), whatever the inputs did.
    """
    done = last_committed_batch(table, writer_id) if table is not None else None
    if done is None:
        return 1
    assert table is not None
    recorded = table.properties.get(inputs_property(writer_id))
    if recorded is not None and json.loads(recorded) == {"batch": done, "inputs": inputs}:
        return None
    return done + 1


def record_inputs(table: Table, writer_id: str, batch_id: int, inputs: dict[str, str]) -> None:
    """Say that ``writer_id``'s batch ``batch_id`` was computed from ``inputs``.

    A commit of its own, after the batch's: a crash in between leaves the record naming an
    older batch, which only makes the next refresh recompute (a full refresh replaces the
    whole table, so recomputing is always safe).
    """
    value = json.dumps({"batch": batch_id, "inputs": inputs}, sort_keys=True)
    with table.transaction() as tx:  # properties only: applied to whatever landed since
        tx.set_properties({inputs_property(writer_id): value})


def source_summary(source: Table, snapshot_id: int | None) -> dict[str, str]:
    """What an incremental refresh's commit records of its source: the snapshot it read up
    to, and which table that snapshot belongs to (ids alone cannot tell a re-created one)."""
    return {
        SOURCE_SNAPSHOT_PROPERTY: str(snapshot_id),
        SOURCE_TABLE_UUID: str(source.metadata.table_uuid),
    }


def source_properties(source: Table) -> dict[str, str]:
    """What an incremental refresh's commit records of its source next to its watermark
    (``writer_properties`` of the commit protocol): which table its batch ids count in.

    Summaries say it too, but the derived table's own upkeep (compaction, then expiry)
    can leave none that does: a source re-created and past the watermark's number before
    the next refresh would then go unseen, and the read start partway into it."""
    return {SOURCE_UUID: str(source.metadata.table_uuid)}


def source_uuid_property(writer_id: str) -> str:
    """Table property: the uuid of the source table ``writer_id``'s watermark counts in."""
    return f"{WRITER_PROPERTY_PREFIX}{writer_id}.{SOURCE_UUID}"


def recorded_source_uuid(derived: Table, writer_id: str) -> str | None:
    """The uuid of the source ``derived``'s rows were read from: the property written with
    the watermark, else (tables last written before it) the newest summary of a commit of
    ``writer_id`` (or of its parts) naming one. Only its own: the quarantine is written by
    every stream's writer, and another source's uuid is no sign that this one moved."""
    recorded = derived.properties.get(source_uuid_property(writer_id))
    if recorded is not None:
        return recorded
    return _own_summary_value(derived, writer_id, SOURCE_TABLE_UUID)


def _own_summary_value(derived: Table, writer_id: str, key: str) -> str | None:
    """The newest value of summary ``key`` in a commit of ``writer_id`` or of its parts."""
    current = derived.current_snapshot()
    if current is None:
        return None
    for snapshot in ancestors_of(current, derived.metadata):
        summary = snapshot.summary.additional_properties if snapshot.summary else {}
        writer = summary.get(WRITER_ID, "")
        if key in summary and (writer == writer_id or writer.startswith(f"{writer_id}:")):
            return summary[key]
    return None


def source_moved_back(source: Table, derived: Table, writer_id: str) -> str | None:
    """Why ``derived``'s rows no longer come from ``source``'s history (the source was
    re-created or rolled back); None when they do, or when nothing recorded says."""
    name = ".".join(source.name())
    recorded_uuid = recorded_source_uuid(derived, writer_id)
    if recorded_uuid is not None and recorded_uuid != str(source.metadata.table_uuid):
        return f"{name} was re-created since {'.'.join(derived.name())} last read it"
    done = last_committed_batch(derived, writer_id)
    last = getattr(source.metadata, "last_sequence_number", None)  # v1 tables have none
    if done is not None and last is not None and done > last:
        return f"{name} was re-created since {'.'.join(derived.name())} last read it"
    # Checked: the snapshot the watermark names, where the next read starts. A refresh that
    # wrote no rows moves the watermark in a commit without a snapshot, so the summary's
    # record can name an older one, still an ancestor after a rollback past the newer.
    read = next(
        (s for s in source.metadata.snapshots if done is not None and s.sequence_number == done),
        None,
    )
    recorded_snapshot = _own_summary_value(derived, writer_id, SOURCE_SNAPSHOT_PROPERTY)
    current = source.current_snapshot()
    if current is None:
        return None
    if read is not None:
        snapshot_id = read.snapshot_id
    elif recorded_snapshot is not None:
        snapshot_id = int(recorded_snapshot)
    else:
        return None
    if source.snapshot_by_id(snapshot_id) is None:
        return None  # expired: the refresh's own error says what to do
    newer = []
    for snapshot in ancestors_of(current, source.metadata):
        if snapshot.snapshot_id == snapshot_id:
            break
        newer.append(snapshot)
    else:
        return (
            f"{name} was rolled back past snapshot {snapshot_id}, which {derived.name()[-1]} read"
        )
    for snapshot in reversed(newer):
        summary = snapshot.summary
        if summary is not None and REBUILT in summary.additional_properties:
            return f"{name} was rebuilt since {'.'.join(derived.name())} last read it"
    return None


def rebuild_if_source_moved_back(
    source: Table, derived: Table | None, *more: Table, rows: BooleanExpression = ALL_ROWS
) -> None:
    """Empty ``derived`` (and ``more``, the tables refreshed with it, emptied first) of
    ``rows`` (all of them unless the table holds other sources' rows too) and drop their
    watermarks when ``source`` was re-created or rolled back since ``derived`` last read
    it: those rows came from a history the source no longer has, and the watermark would
    skip its new rows. The refresh that follows is then a first one."""
    writer_id = derived_writer_id(source.name()[-1])
    why = source_moved_back(source, derived, writer_id) if derived is not None else None
    if derived is None or why is None:
        return
    for table in (*more, derived):  # derived last: its record is what says "moved back"
        forget_source(table, writer_id, source, why, rows=rows)


def forget_source(
    derived: Table,
    writer_id: str,
    source: Table,
    why: str,
    *,
    rows: BooleanExpression = ALL_ROWS,
) -> None:
    """Delete ``rows`` (the ones read from ``source``) from ``derived`` and drop the
    watermarks of ``writer_id`` and of its parts (``writer_id:...``, writers of the same
    source) in one commit, so its next refresh rebuilds them from the whole of ``source``
    as it is now. Other writers' rows and watermarks stay: they are still true. The commit
    says so (:data:`REBUILT`), so that tables reading ``derived`` incrementally rebuild
    too, and records ``source``'s uuid as the one ``writer_id`` reads now (the parts' go)."""
    logger.warning("%s: rebuilding %s from it", why, ".".join(derived.name()))
    uuid = str(source.metadata.table_uuid)
    summary = {SOURCE_TABLE_UUID: uuid, REBUILT: why}
    own = watermark_property(writer_id)
    parts = watermark_property(f"{writer_id}:").removesuffix(".last-batch-id")
    forgotten = [
        key
        for key in derived.properties
        if key == own
        or (key.startswith(parts) and key.endswith((".last-batch-id", f".{SOURCE_UUID}")))
    ]
    with derived.transaction() as tx, warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Delete operation did not match any records")
        tx.delete(rows, snapshot_properties=summary)
        if forgotten:  # pyiceberg fails removing a property the table does not have
            tx.remove_properties(*forgotten)
        tx.set_properties({source_uuid_property(writer_id): uuid})
