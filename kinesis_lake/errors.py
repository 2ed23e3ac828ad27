"""Every error kinesis-lake raises on purpose, in one place (as pyiceberg's ``exceptions``).

Callers catch :class:`KinesisLakeError` to tell "the pipeline refused, and says why" from a
bug; the CLI prints such an error as one line and anything else with its trace.
"""

from __future__ import annotations


class KinesisLakeError(Exception):
    """Base of every error kinesis-lake raises on purpose; its message says what to do."""


class SnapshotExpiredError(KinesisLakeError):
    """A snapshot the pipeline still needed was expired, so what it held can no longer be
    counted or followed incrementally."""
