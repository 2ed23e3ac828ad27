"""The exactly-once commit protocol: one batch of one writer lands once, or not at all.

Spark may replay a micro-batch after a crash between the Iceberg commit and its own
checkpoint, and a retried driver may repeat a commit whose outcome it never learned.
Each commit therefore sets a table property
``kinesis-lake.writer.<writer id>.last-batch-id`` IN THE SAME TRANSACTION as its data, and
a batch id at or below that watermark is skipped. Table properties survive snapshot
expiry, unlike snapshot summaries, so the answer to "did writer W commit batch N" never
ages out. Snapshot summaries still carry writer id, batch id and the caller's keys as
history. What the caller needs to know of the watermark for as long as it holds (which
source table its batch ids count in) goes with it the same way: ``writer_properties``
become ``kinesis-lake.writer.<writer id>.<name>`` properties of the same transaction, so
they change only when the watermark moves.

Conflicts with other writers are retried here, by rebuilding the transaction on fresh
metadata after re-checking the watermark (see :mod:`kinesis_lake.iceberg.retry`). Any
other failure is raised unchanged; its outcome may be unknown (a lost response), and the
replay of the batch resolves it: the watermark tells whether the commit landed.

Whatever the caller derives from the table it commits to (the merged source positions,
the stale-checkpoint guard of the Iceberg sink) is computed by its ``prepare`` callback
on the refreshed base of EVERY attempt: decided once on a table loaded before the loop,
it would not see a commit that won the race, and two writers could both pass the guard.
Source positions (every shard's, merged) go to a table property written in the same
transaction, and only there: they survive snapshot expiry whatever snapshots maintenance
writes, and the metadata holds them once. Copied into every snapshot's summary too, they
made a 500-shard table's metadata 4.7 MB at 100 retained snapshots, written and read back
by every commit (50 MB at 5,000 shards).

Invariant: POSITIONS AND WATERMARKS NEVER MOVE BACKWARDS, whatever commit carries them.
``prepare`` computes positions from the attempt's base, and a commit applies its
property updates to the catalog's CURRENT metadata, so a commit that did not require its
base would overwrite what landed in between (issue 31: a stale query's empty batch rolled
the positions back, and its next batch re-committed rows another query had committed;
an empty batch's commit that the catalog applied late rolled its writer's watermark
back). So EVERY commit requires ``AssertRefSnapshotId(main = base)``: a data commit
through its snapshot update, a metadata-only one explicitly (a metadata-only commit that
loses a race retries on fresh metadata like any other). Positions are merged into the
base's shard by shard and written only when that changes them, so an empty batch (no
record read) moves only its writer's watermark; a commit without files that would change
them is refused. Positions thus change only in commits that move ``main``, so the base a
commit merged them from holds the latest positions.

Precondition: batch ids of one writer grow, and one live process commits per writer id
at a time (Spark's checkpoint guarantees both for a streaming query).
"""

from __future__ import annotations

import json
import logging
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.expressions import BooleanExpression
from pyiceberg.table import Table, TableProperties, Transaction
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.utils.properties import property_as_bool

from kinesis_lake.iceberg import summary as keys
from kinesis_lake.iceberg.data_files import WrittenFile, data_files_of
from kinesis_lake.iceberg.dead_rows import plan_rewrite
from kinesis_lake.iceberg.retry import adopt_commit, backoff, fail_fast
from kinesis_lake.iceberg.row_deletes import stage_row_delta
from kinesis_lake.iceberg.summary import committed_positions
from kinesis_lake.iceberg.transaction import MetadataReusingTransaction

logger = logging.getLogger(__name__)

WRITER_PROPERTY_PREFIX = "kinesis-lake.writer."
DEFAULT_MAX_ATTEMPTS = 10


@dataclass
class CommitOutcome:
    """What a commit call did.

    ``committed``: this call made the batch durable. ``skipped_duplicate``: the writer had
    already committed this batch id (or a later one); nothing was written and files the
    caller wrote for the batch are now orphans for it to delete. ``snapshot_id`` is None
    when the commit carried no data (only the watermark moved). ``rows`` is None when
    skipped.
    """

    committed: bool
    skipped_duplicate: bool
    snapshot_id: int | None
    attempts: int
    files: int
    rows: int | None


def watermark_property(writer_id: str) -> str:
    """The table property holding ``writer_id``'s last committed batch id."""
    return f"{WRITER_PROPERTY_PREFIX}{writer_id}.last-batch-id"


def last_committed_batch(table: Table, writer_id: str) -> int | None:
    """The last batch id ``writer_id`` committed, as of ``table``'s loaded metadata."""
    value = table.properties.get(watermark_property(writer_id))
    return int(value) if value is not None else None


def commit_files(
    table: Table,
    files: list[WrittenFile],
    *,
    writer_id: str,
    batch_id: int,
    summary: dict[str, str] | None = None,
    prepare: Callable[[Table], dict[str, str]] | None = None,
    writer_properties: dict[str, str] | None = None,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    just_loaded: bool = False,
) -> CommitOutcome:
    """Add Parquet data files written elsewhere (Spark executors) as batch ``batch_id``.

    ``files`` are what :func:`kinesis_lake.iceberg.data_files.write_data_files` returned:
    their footers and partition values travel with them, so the commit opens none of them.

    An empty ``files`` still moves the watermark, in a metadata-only commit with no
    snapshot: "batch N is done, with no rows" must be durable too, or a replay of batch N
    that happens to read rows (Kinesis reads are capped by time, so a replay may see
    records the first run did not) would commit them while the next batch, which started
    where the first run stopped, reads them again. ``summary`` is not recorded then;
    ``writer_properties`` are, as they go with the watermark (see the module docstring).

    ``prepare(table)`` runs before every attempt, on the freshly refreshed table, once the
    watermark said the batch is new: it returns summary entries derived from that base
    (merged with ``summary``) or raises to refuse the batch.

    No duplicate-file check (pyiceberg's ``add_files`` reads every manifest of the table
    for it): the watermark already makes a batch idempotent, and callers name files
    uniquely per task attempt (``write_data_files`` refuses to overwrite a file).

    ``just_loaded``: the caller loaded ``table`` from the catalog moments ago, so the
    refresh that guards against a stale object is skipped. It would parse the same
    metadata file again, at a cost that grows with the retained snapshots (benchmark 5);
    a commit landing in between is a race like any other, which the retry loop handles.
    """

    def stage(tx: Transaction, snapshot_properties: dict[str, str]) -> None:
        if not files:
            return
        metadata = tx.table_metadata
        if metadata.name_mapping() is None:
            # What add_files records too: readers of files without field ids need it.
            mapping = metadata.schema().name_mapping.model_dump_json()
            tx.set_properties({TableProperties.DEFAULT_NAME_MAPPING: mapping})
        update = tx.update_snapshot(snapshot_properties=snapshot_properties)
        merge = property_as_bool(
            metadata.properties,
            TableProperties.MANIFEST_MERGE_ENABLED,
            TableProperties.MANIFEST_MERGE_ENABLED_DEFAULT,
        )
        with update.merge_append() if merge else update.fast_append() as append:
            for data_file in data_files_of(metadata, files):
                append.append_data_file(data_file)

    outcome = _commit_batch(
        table,
        stage,
        writer_id=writer_id,
        batch_id=batch_id,
        summary=summary,
        prepare=prepare,
        writer_properties=writer_properties,
        max_attempts=max_attempts,
        just_loaded=just_loaded,
    )
    if outcome.committed:
        outcome.files = len(files)
    return outcome


def commit_arrow(
    table: Table,
    data: pa.Table,
    *,
    writer_id: str,
    batch_id: int,
    summary: dict[str, str] | None = None,
    overwrite_filter: BooleanExpression | str | None = None,
    writer_properties: dict[str, str] | None = None,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
) -> CommitOutcome:
    """Write a small driver-side Arrow table as batch ``batch_id`` under the same protocol.

    With ``overwrite_filter``, rows matching it are deleted and ``data`` appended in the
    same transaction (copy-on-write: files partly matching are rewritten), so readers
    never see the gap. Data files of an attempt that lost a conflict are left behind for
    orphan-file removal; the next attempt writes its own.
    """

    def stage(tx: Transaction, snapshot_properties: dict[str, str]) -> None:
        if overwrite_filter is not None:
            with warnings.catch_warnings():
                # Replacing rows that do not exist yet (a new window) is routine, not news.
                warnings.filterwarnings("ignore", "Delete operation did not match any records")
                tx.delete(overwrite_filter, snapshot_properties=snapshot_properties)
        if data.num_rows:
            tx.append(data, snapshot_properties=snapshot_properties)

    return _commit_driver_rows(
        table,
        stage,
        data.num_rows,
        writer_id=writer_id,
        batch_id=batch_id,
        summary=summary,
        writer_properties=writer_properties,
        max_attempts=max_attempts,
    )


def commit_row_delta(
    table: Table,
    data: pa.Table,
    deletes: pa.Table,
    *,
    planned_on: int | None,
    writer_id: str,
    batch_id: int,
    summary: dict[str, str] | None = None,
    writer_properties: dict[str, str] | None = None,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
) -> CommitOutcome:
    """Merge-on-read under the same protocol: ``data`` appended and the rows ``deletes``
    (``file_path``, ``pos``) names deleted through one position delete file, in one
    snapshot (:func:`kinesis_lake.iceberg.row_deletes.stage_row_delta`), which also rewrites
    the files a fifth deleted or more by then (:mod:`kinesis_lake.iceberg.dead_rows`).

    ``planned_on`` is the snapshot the positions were found in; an attempt on a base where
    a file they point into was rewritten raises ``RowsMovedError`` and commits nothing.
    """

    def stage(tx: Transaction, snapshot_properties: dict[str, str]) -> None:
        if data.num_rows or deletes.num_rows:
            rewrite = plan_rewrite(tx, deletes)  # on each attempt's own base
            if rewrite.rows is not None:
                moved = {keys.REWRITTEN_RECORDS: str(rewrite.rows.num_rows)}
                snapshot_properties = {**snapshot_properties, **moved}
            stage_row_delta(
                tx,
                snapshot_properties,
                data=rewrite.appended_to(data),
                deletes=deletes,
                removed=rewrite.paths,
                deletes_planned_on=planned_on,
            )

    return _commit_driver_rows(
        table,
        stage,
        data.num_rows,
        writer_id=writer_id,
        batch_id=batch_id,
        summary=summary,
        writer_properties=writer_properties,
        max_attempts=max_attempts,
    )


def _commit_driver_rows(
    table: Table,
    stage: Callable[[Transaction, dict[str, str]], None],
    rows: int,
    *,
    writer_id: str,
    batch_id: int,
    summary: dict[str, str] | None,
    writer_properties: dict[str, str] | None,
    max_attempts: int,
) -> CommitOutcome:
    """``_commit_batch`` of rows written on the driver: their count and the files the
    snapshot added are the outcome's."""
    outcome = _commit_batch(
        table,
        stage,
        writer_id=writer_id,
        batch_id=batch_id,
        summary=summary,
        prepare=None,
        writer_properties=writer_properties,
        max_attempts=max_attempts,
    )
    if outcome.committed:
        snapshot = table.snapshot_by_id(outcome.snapshot_id) if outcome.snapshot_id else None
        outcome.files = _summary_int(snapshot, "added-data-files")
        outcome.rows = rows
    return outcome


def _commit_batch(
    table: Table,
    stage: Callable[[Transaction, dict[str, str]], None],
    *,
    writer_id: str,
    batch_id: int,
    summary: dict[str, str] | None,
    prepare: Callable[[Table], dict[str, str]] | None,
    writer_properties: dict[str, str] | None,
    max_attempts: int,
    just_loaded: bool = False,
) -> CommitOutcome:
    """The retry loop shared by both entry points; ``stage`` adds the batch's data."""
    if not writer_id:
        raise ValueError("writer_id must be a non-empty string")
    own = _own_properties(writer_id, writer_properties or {})
    if max_attempts < 1:
        raise ValueError(f"max_attempts must be at least 1, got {max_attempts}")
    if not just_loaded:
        # The caller's table object may be minutes old; deciding on it would waste an attempt.
        table.refresh()
    attempt = 0
    while True:
        attempt += 1
        last = last_committed_batch(table, writer_id)
        if last is not None and batch_id <= last:
            logger.info(
                "Batch %d of writer %r is already committed (watermark %d): skipped",
                batch_id,
                writer_id,
                last,
            )
            return CommitOutcome(False, True, None, attempt, 0, None)
        snapshot_properties = {
            **(summary or {}),
            **(prepare(table) if prepare is not None else {}),
            keys.WRITER_ID: writer_id,
            keys.BATCH_ID: str(batch_id),
        }
        positions = snapshot_properties.pop(keys.POSITIONS, None)
        view = fail_fast(table)
        tx = MetadataReusingTransaction(view)
        stage(tx, snapshot_properties)
        tx.require_base_snapshot()  # a snapshot update has it; a metadata-only commit not
        properties = {**own, watermark_property(writer_id): str(batch_id)}
        tx.set_properties({**properties, **_positions_update(table, tx, positions)})
        try:
            tx.commit_transaction()
        except CommitFailedException:
            if attempt >= max_attempts:
                raise
            logger.warning(
                "Commit of batch %d by writer %r lost a race with another commit "
                "(attempt %d of %d); retrying on fresh metadata",
                batch_id,
                writer_id,
                attempt,
                max_attempts,
            )
            backoff(attempt)
            table.refresh()
            continue
        adopt_commit(table, view)
        snapshot = _own_snapshot(table, writer_id, batch_id)
        return CommitOutcome(
            committed=True,
            skipped_duplicate=False,
            snapshot_id=snapshot.snapshot_id if snapshot else None,
            attempts=attempt,
            files=0,
            rows=_summary_int(snapshot, "added-records"),
        )


def _own_properties(writer_id: str, names: dict[str, str]) -> dict[str, str]:
    """``writer_properties`` as the table properties they become; the watermark is not
    one of them (only the protocol moves it)."""
    watermark = watermark_property(writer_id)
    properties = {f"{WRITER_PROPERTY_PREFIX}{writer_id}.{name}": v for name, v in names.items()}
    if watermark in properties or any(not name or "." in name for name in names):
        raise ValueError(
            f"writer_properties of {writer_id!r} must be dot-free names other "
            f"than the watermark's, got {sorted(names)}"
        )
    return properties


def _positions_update(
    base: Table, tx: MetadataReusingTransaction, positions: str | None
) -> dict[str, str]:
    """The positions property to write with this attempt, if any: see the module docstring.

    The proposal is merged into the base's positions shard by shard, so no caller can
    lower one. Positions equal to the base's are not written: an empty batch read no
    record to advance them, and writing the base's value back could only undo a commit
    that won the race. Positions that change must come with data: only a commit that
    moves ``main`` makes the next one's requirement fail, so two metadata-only commits
    from one base could each overwrite the other's advance.
    """
    if positions is None:
        return {}
    current = committed_positions(base)
    merged = merge_positions(current, json.loads(positions))
    if merged == current:
        return {}
    if not tx.adds_snapshot:
        raise ValueError(
            "positions move only with data: a commit without files proposed "
            f"{positions} over {json.dumps(current, sort_keys=True)}"
        )
    return {keys.POSITIONS: json.dumps(merged, sort_keys=True)}


def later_sequence(a: str | None, b: str) -> str:
    """The later of two Kinesis sequence numbers: decimal strings, compared as integers."""
    return b if a is None or int(b) > int(a) else a


def merge_positions(old: dict[str, str], new: dict[str, str]) -> dict[str, str]:
    """``old`` with every shard of ``new`` moved forward to ``new``'s position, never back."""
    merged = dict(old)
    for shard, sequence in new.items():
        merged[shard] = later_sequence(merged.get(shard), sequence)
    return merged


def _own_snapshot(table: Table, writer_id: str, batch_id: int) -> Snapshot | None:
    """The current snapshot if this batch's commit produced it (None for metadata-only).

    Checked through the summary because after a metadata-only commit the current snapshot
    is whatever another writer committed last.
    """
    snapshot = table.current_snapshot()
    if snapshot is None or snapshot.summary is None:
        return None
    summary = snapshot.summary
    ours = (summary.get(keys.WRITER_ID), summary.get(keys.BATCH_ID)) == (writer_id, str(batch_id))
    return snapshot if ours else None


def _summary_int(snapshot: Snapshot | None, key: str) -> int:
    if snapshot is None or snapshot.summary is None:
        return 0
    value = snapshot.summary.get(key)  # a delete-only snapshot adds no files or records
    return int(value) if value is not None else 0
