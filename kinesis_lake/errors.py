"""The kinds of error kinesis-lake raises on purpose (as pyiceberg's ``exceptions``).

Each library defines its precise errors on one of these kinds, so a caller can catch
:class:`KinesisLakeError` to tell "the pipeline refused, and says why" from a bug: the CLI
prints such an error as one line (the trace only with ``--debug``) and anything else with
its trace. The builtin bases (``ValueError``, ``RuntimeError``, ``LookupError``) stay where
callers and Spark's error wrapping relied on them.
"""

from __future__ import annotations


class KinesisLakeError(Exception):
    """Base of every error kinesis-lake raises on purpose; its message says what to do."""


class ConfigurationError(KinesisLakeError, ValueError):
    """A setting, option or declaration the pipeline cannot run with; the message names it
    and the fix."""


class KinesisError(KinesisLakeError):
    """Kinesis refused or failed a call the pipeline needed, after its retries."""


class TableError(KinesisLakeError):
    """An Iceberg table is not in the state the pipeline needs."""


class SnapshotExpiredError(TableError):
    """A snapshot the pipeline still needed was expired, so what it held can no longer be
    counted or followed incrementally."""


class IngestionError(KinesisLakeError):
    """Ingestion stopped rather than lose, duplicate or invent records."""
