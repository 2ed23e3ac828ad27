"""Transactions whose metadata is rebuilt once per staged change, not once per read.

pyiceberg 0.12's ``Transaction.table_metadata`` replays the staged updates onto the
table's metadata and deep-copies the result on EVERY read, and one ``add_files`` reads it
about twenty times. The copy includes every retained snapshot and metadata-log entry, so a
streaming writer's commit got slower as the table's history grew (benchmark 5: the last 20
of 300 commits took 4.8x the first 20). The result only changes when the table's metadata
or the staged updates do; both are replaced, never mutated (``_updates`` is a tuple rebound
on each staged change), so their identities key a one-entry cache.

Upstream: apache/iceberg-python#3302 and #3784 propose the same cache; no release carries
it yet (0.12.0 is the newest). Drop this module when the pinned pyiceberg does.
"""

from __future__ import annotations

from pyiceberg.table import Table, Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import MAIN_BRANCH
from pyiceberg.table.update import AddSnapshotUpdate, AssertRefSnapshotId, TableUpdate


class MetadataReusingTransaction(Transaction):
    """A ``Transaction`` that rebuilds its metadata only when its inputs changed.

    Callers inside pyiceberg treat the metadata they read as immutable (its models are
    frozen pydantic models and every update goes through ``model_copy``), so sharing one
    rebuild between reads of the same state is safe.
    """

    def __init__(self, table: Table) -> None:
        super().__init__(table)
        self._rebuilt: tuple[TableMetadata, tuple[TableUpdate, ...], TableMetadata] | None = None

    @property
    def table_metadata(self) -> TableMetadata:
        base, updates = self._table.metadata, self._updates
        if not updates:
            return base  # nothing staged: the loaded metadata, validated when it was read
        if self._rebuilt is not None and self._rebuilt[0] is base and self._rebuilt[1] is updates:
            return self._rebuilt[2]
        metadata = super().table_metadata
        self._rebuilt = (base, updates, metadata)
        return metadata

    @property
    def adds_snapshot(self) -> bool:
        """Whether the staged changes add a snapshot (and so move ``main`` when committed)."""
        return any(isinstance(update, AddSnapshotUpdate) for update in self._updates)

    def require_base_snapshot(self) -> None:
        """Make the commit apply only while ``main`` is where this transaction's base had it.

        A snapshot update carries that requirement already; a metadata-only commit carries
        none, and whatever it writes from its base (positions computed from a stale table)
        would land over a commit that won the race. Added after staging: the requirement
        is checked against the catalog's table, not the staged metadata.
        """
        if any(
            isinstance(requirement, AssertRefSnapshotId) and requirement.ref == MAIN_BRANCH
            for requirement in self._requirements
        ):
            return
        main = self._table.metadata.refs.get(MAIN_BRANCH)
        # By alias: mypy reads the pydantic model's generated __init__, which wants them.
        requirement = AssertRefSnapshotId.model_validate(
            {"snapshot-id": main.snapshot_id if main is not None else None, "ref": MAIN_BRANCH}
        )
        self._requirements += (requirement,)
