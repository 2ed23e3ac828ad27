"""Commit retries that re-decide before every attempt.

pyiceberg 0.12 retries a failed commit inside ``Transaction.commit_transaction``: it
rebases the new snapshot onto whatever another writer committed and replays the staged
updates unchanged. For kinesis-lake's commits that is wrong twice over: the writer
watermark staged with the data would not be re-checked (two instances of one writer could
both commit batch N), and a compaction would be rebased by rules that reject it anyway.
So our commits run on a :func:`fail_fast` view of the table, and the callers' own loops
refresh, re-check and rebuild the transaction between attempts.

The view also never deletes a file. On ``CommitFailedException`` pyiceberg deletes the
manifests and manifest list it wrote for the commit, trusting the exception to mean
"did not land"; a catalog that applied the commit and lost its answer (a transport
retry of the same request then fails its requirements) raises exactly that, and the
table would point at deleted metadata. Files of commits that truly failed are left to
orphan-file removal, which deletes only what the table does not reference.
"""

from __future__ import annotations

import random
import time

from pyiceberg.io import FileIO, InputFile, OutputFile
from pyiceberg.table import Table, TableProperties

_FIRST_WAIT_SECONDS = 0.05
_MAX_WAIT_SECONDS = 2.0


def fail_fast(table: Table) -> Table:
    """A view of ``table`` whose next commit raises on conflict instead of retrying.

    pyiceberg reads the retry count from the table object's own metadata, so the view
    carries ``commit.retry.num-retries=0`` in memory only. Nothing of it is committed:
    the catalog applies the transaction's updates to its own current metadata. After a
    commit, the view holds the metadata the catalog returned.
    """
    properties = {**table.metadata.properties, TableProperties.COMMIT_NUM_RETRIES: "0"}
    return Table(
        table.name(),
        table.metadata.model_copy(update={"properties": properties}),
        table.metadata_location,
        _KeepFiles(table.io),
        table.catalog,
        table.config,
    )


class _KeepFiles(FileIO):
    """``io`` with deletes turned off: a failed commit's outcome is not proof enough."""

    def __init__(self, io: FileIO) -> None:
        super().__init__(io.properties)
        self._io = io

    def new_input(self, location: str) -> InputFile:
        return self._io.new_input(location)

    def new_output(self, location: str) -> OutputFile:
        return self._io.new_output(location)

    def delete(self, location: str | InputFile | OutputFile) -> None:
        """Keep the file; orphan-file removal deletes it once nothing references it."""


def adopt_commit(table: Table, view: Table) -> None:
    """Give ``table`` the metadata its fail-fast ``view`` just committed.

    Callers keep using their own table object; without this it would not show the
    commit made on their behalf (pyiceberg updates the committing object the same way).
    """
    table.metadata = view.metadata
    table.metadata_location = view.metadata_location


def backoff(attempt: int) -> None:
    """Sleep before retry ``attempt`` (1-based): exponential with full jitter.

    Full jitter spreads writers that collided apart, so they do not collide again.
    """
    ceiling = min(_MAX_WAIT_SECONDS, _FIRST_WAIT_SECONDS * 2 ** (attempt - 1))
    time.sleep(random.uniform(0, ceiling))
