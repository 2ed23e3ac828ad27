"""A real SQLite catalog whose quarantine table refuses new snapshots: the crash point
"the parsed commit landed, the quarantine commit did not" of a derive refresh.

Loaded by pyiceberg's ``py-catalog-impl`` in a separate process (see
``test_derive_poison.py``), so the Spark driver and the workers that commit all use it.
"""

from __future__ import annotations

from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import CommitTableResponse, Table
from pyiceberg.table.update import AddSnapshotUpdate, TableRequirement, TableUpdate

from kinesis_lake.config import QUARANTINE_TABLE


class QuarantineCommitFails(SqlCatalog):
    def commit_table(
        self,
        table: Table,
        requirements: tuple[TableRequirement, ...],
        updates: tuple[TableUpdate, ...],
    ) -> CommitTableResponse:
        if table.name()[-1] == QUARANTINE_TABLE and any(
            isinstance(update, AddSnapshotUpdate) for update in updates
        ):
            raise OSError("injected: the process died before the quarantine commit")
        return super().commit_table(table, requirements, updates)
