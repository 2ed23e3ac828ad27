"""What the Kinesis source knows about data loss, for the sensor, the check and the CLI.

Two facts live in the source's progress folder (``source_metadata_path``) beside Spark's
checkpoint, in the ``status.json`` the source writes after each epoch:

* **When each shard was last read to its tip** (``tip_ms``, the server's clock). A resume
  record that aged out is no loss only if its shard was read to the tip after the current
  trim horizon; otherwise records that arrived and expired unread cannot be ruled out, and
  the source reports possible loss. On a quiet stream nothing else reads the shards, so
  the backlog sensor launches a run when this proof grows old (:func:`quiet_proof`).
* **How many ranges the source skipped** (``skippedRanges``, with
  ``KINESIS_LAKE_FAIL_ON_DATA_LOSS=false``), over the life of the checkpoint. An operator
  who has dealt with a loss acknowledges it (:func:`acknowledge_loss`, ``kinesis-lake
  acknowledge-loss``); the ``no_data_loss`` check then counts only skips since.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass

import fsspec

from kinesis_lake.config import Settings
from kinesis_lake.pipeline.ingest_query import source_metadata_path
from kinesis_lake.spark.kinesis.progress import ShardProgressStore

KEEP_ALIVE_SHARE = 4
"""A quiet stream is read to its tip at least every 1/KEEP_ALIVE_SHARE of its retention:
the rest of the retention is the margin for failed runs, back-off and a stopped daemon."""

ACKNOWLEDGED_FILE = "acknowledged-loss.json"


@dataclass(frozen=True)
class QuietProof:
    """The oldest of the live shards' last reads to the tip (server clock, epoch ms).

    ``needed`` is False when no shard has a committed position the source resumes after
    (nothing to tell from a loss). ``read_to_tip_ms`` is None when a shard has no read to
    its tip on record (no status yet, or its last read stopped short of the tip).
    """

    needed: bool
    read_to_tip_ms: int | None

    def due(self, server_now_ms: int, retention_hours: int) -> bool:
        """Whether a run should read the shards to their tip again now."""
        if not self.needed:
            return False
        if self.read_to_tip_ms is None:
            return True
        return server_now_ms - self.read_to_tip_ms >= _ms(retention_hours) // KEEP_ALIVE_SHARE


def quiet_proof(settings: Settings, positions: Mapping[str, str]) -> QuietProof:
    """How recently every shard with a committed position, or read to its tip before
    any record, was read to its tip.

    A shard the source read to its tip while it held nothing (a split's child, a shard
    empty when ingestion started) has no committed position, but its next read checks
    the same proof: records that arrived after that read and expired are loss. Once an
    epoch completed, so does every shard still to be read (a split's child waiting for its
    parent inherits the parent's read, any other the deployment's start): with no read to
    the tip on record, a run is due (simulation seed 150052: a split's children were never
    read in 3.7 days, then a second writer reported a loss that did not happen).
    """
    store = _store(settings)
    status = store.latest_status()
    if status is None:
        # No epoch completed yet: a query that read (its progress is there) may have
        # read shards to their tip all the same; nothing ran at all, nothing to prove.
        return QuietProof(needed=bool(positions) or store.has_progress(), read_to_tip_ms=None)
    live = {
        sid: entry
        for sid, entry in status.get("shards", {}).items()
        if sid in positions or entry.get("tip_ms") is not None
    }
    if not live:
        return QuietProof(needed=True, read_to_tip_ms=None)
    tips = [entry.get("tip_ms") for entry in live.values()]
    if any(tip is None for tip in tips):
        return QuietProof(needed=True, read_to_tip_ms=None)
    return QuietProof(needed=True, read_to_tip_ms=min(int(tip) for tip in tips))


@dataclass(frozen=True)
class LossReport:
    """Skipped ranges of the current checkpoint, and how many an operator acknowledged."""

    run_id: str | None
    skipped_ranges: int
    acknowledged: int

    @property
    def unacknowledged(self) -> int:
        return max(0, self.skipped_ranges - self.acknowledged)


def loss_report(settings: Settings) -> LossReport:
    """The source's skip count and the acknowledgment of the same checkpoint (a new
    checkpoint counts from zero, so an older acknowledgment no longer applies)."""
    status = _store(settings).latest_status() or {}
    run_id = status.get("runId")
    skipped = int(status.get("skippedRanges", 0))
    acknowledged = _read_acknowledgment(settings)
    same_run = acknowledged is not None and acknowledged.get("runId") == run_id
    return LossReport(
        run_id=run_id,
        skipped_ranges=skipped,
        acknowledged=int(acknowledged["skippedRanges"]) if same_run and acknowledged else 0,
    )


def acknowledge_loss(settings: Settings) -> LossReport:
    """Record that the skips reported so far are known and dealt with; returns the report
    as it stands after the acknowledgment."""
    report = loss_report(settings)
    record = {
        "runId": report.run_id,
        "skippedRanges": report.skipped_ranges,
        "acknowledgedAtMs": int(time.time() * 1000),
    }
    fs, base = fsspec.core.url_to_fs(source_metadata_path(settings))
    fs.makedirs(base, exist_ok=True)
    with fs.open(f"{base}/{ACKNOWLEDGED_FILE}", "w") as handle:
        json.dump(record, handle)
    return LossReport(report.run_id, report.skipped_ranges, report.skipped_ranges)


def _read_acknowledgment(settings: Settings) -> dict | None:
    fs, base = fsspec.core.url_to_fs(source_metadata_path(settings))
    try:
        with fs.open(f"{base}/{ACKNOWLEDGED_FILE}", "r") as handle:
            return dict(json.load(handle))
    except FileNotFoundError:
        return None


def _store(settings: Settings) -> ShardProgressStore:
    return ShardProgressStore(source_metadata_path(settings))


def _ms(hours: int) -> int:
    return hours * 3_600_000
