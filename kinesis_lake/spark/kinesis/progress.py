"""Where each executor records how far it read a shard in an epoch.

The driver plans an epoch without knowing where a shard's records end (see
:mod:`kinesis_lake.spark.kinesis.planning`), so the executor that reads a shard writes one
small JSON record, ``<metadataPath>/<runId>/<epoch>/<shardId>.json``, holding its
:class:`~kinesis_lake.kinesis.shard_reader.ReadOutcome` and who read it (host, process,
Spark task). Two readers use it:

* the driver, when planning epoch N+1, to start each shard after the last record that
  epoch N returned;
* a retried or replayed task of epoch N, which finds the record already there and reads
  exactly up to the recorded last sequence number, so the replayed batch holds the very
  same records (Kinesis records are immutable, so a pinned range always reads the same).

A record is written once, after the read finished and before the task's output is
complete, so every epoch a sink committed has a record for each shard it read. It is
created only if none exists (:meth:`ShardProgressStore.save`): locally a hard link of a
fully written temporary file, which fails if the name exists; on S3 a conditional PUT
(``If-None-Match: *``). Two attempts of one task can run at the same time even without
speculation: an executor declared lost keeps running (a zombie) while Spark retries its
task elsewhere. Last-writer-wins would let the zombie overwrite the record of the attempt
whose rows were committed, and the next epoch would start at the wrong place. So the
first record stands, and an attempt that finds a record of a *different* range raises
:class:`ProgressConflictError`: its task fails, its rows are never committed, and its
retry reads exactly the recorded range. An attempt that read the very same range as the
record agrees with it and goes on.

The driver also keeps ``<metadataPath>/<runId>/status.json``: the last completed epoch's
numbers and the latest known state of every shard still being read (lag dashboards,
``kinesis_lake.pipeline.ingest_report``).

The store is fsspec, so ``metadataPath`` may be a local folder or any fsspec URL (s3://).
On a multi-host cluster it must be storage that the driver and all executors share.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem

from kinesis_lake.errors import IngestionError
from kinesis_lake.kinesis.shard_reader import ReadOutcome
from kinesis_lake.spark.kinesis.offsets import SourceOffset

EPOCHS_RETAINED = 20
"""Epochs of progress kept behind the committed one: Spark only ever replays the last."""


class ProgressConflictError(IngestionError, RuntimeError):
    """Another attempt of the same task recorded a different read of the shard first."""


def _range(outcome: ReadOutcome) -> tuple:
    """What a record pins: the records read, and where they end."""
    return (outcome.last_sequence_number, outcome.records_read, outcome.user_records)


@dataclass(frozen=True)
class ProgressRecord:
    """One shard's read in one epoch: where it stopped, and which process read it."""

    outcome: ReadOutcome
    reader: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {**self.outcome.to_dict(), "reader": self.reader}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProgressRecord:
        return cls(ReadOutcome.from_dict(data), dict(data.get("reader", {})))


def _with_replay_loss(record: ProgressRecord, note: Mapping[str, Any]) -> ProgressRecord:
    """The first attempt's record, with the loss its replay found (see
    :meth:`ShardProgressStore.save_replay_loss`)."""
    outcome = record.outcome
    tips = [tip for tip in (outcome.tip_ms, note.get("tip_ms")) if tip is not None]
    changed = replace(
        outcome,
        data_loss=outcome.data_loss or note.get("data_loss"),
        tip_ms=max(tips, default=None),
    )
    return ProgressRecord(changed, record.reader)


class ShardProgressStore:
    """Per-run, per-epoch, per-shard read records under one root URL."""

    def __init__(self, root: str) -> None:
        self.root = root.rstrip("/")
        self._fs, self._base = fsspec.core.url_to_fs(self.root)

    def _epoch_dir(self, run_id: str, epoch: int) -> str:
        return f"{self._base}/{run_id}/{epoch:012d}"

    def _path(self, run_id: str, epoch: int, shard_id: str) -> str:
        return f"{self._epoch_dir(run_id, epoch)}/{shard_id}.json"

    def load(self, run_id: str, epoch: int, shard_id: str) -> ProgressRecord | None:
        data = self._read_json(self._path(run_id, epoch, shard_id))
        return None if data is None else ProgressRecord.from_dict(data)

    def load_epoch(
        self, run_id: str, epoch: int, shard_ids: Iterable[str]
    ) -> dict[str, ProgressRecord]:
        """The epoch's records of ``shard_ids`` (a shard that read nothing has none).

        One ``cat`` of every path: s3fs fetches them concurrently, where reading one after
        another cost the driver a round trip per shard in every micro-batch's planning.
        """
        shard_ids = list(shard_ids)
        paths = {self._path(run_id, epoch, shard_id): shard_id for shard_id in shard_ids}
        if not paths:
            return {}
        losses = {self._loss_path(run_id, epoch, shard_id): shard_id for shard_id in shard_ids}
        contents = self._fs.cat([*paths, *losses], on_error="omit")
        records = {
            paths[path]: ProgressRecord.from_dict(json.loads(data))
            for path, data in contents.items()
            if path in paths
        }
        for path, data in contents.items():
            if path in losses and losses[path] in records:
                shard_id = losses[path]
                records[shard_id] = _with_replay_loss(records[shard_id], json.loads(data))
        return records

    def save_replay_loss(self, run_id: str, epoch: int, outcome: ReadOutcome) -> None:
        """Record that a replay of this epoch's shard could not read all of its pinned
        range again (retention took part of it), beside the first attempt's record, which
        stands: :meth:`load_epoch` then reports the loss (``data_loss``, counted once by
        the planner) and the replay's ``tip_ms``. The first replay to record it wins."""
        note = {"data_loss": outcome.data_loss, "tip_ms": outcome.tip_ms}
        self._create_json(
            self._epoch_dir(run_id, epoch), self._loss_path(run_id, epoch, outcome.shard_id), note
        )

    def _loss_path(self, run_id: str, epoch: int, shard_id: str) -> str:
        return f"{self._epoch_dir(run_id, epoch)}/{shard_id}.replay-loss.json"

    def save(self, run_id: str, epoch: int, record: ProgressRecord) -> None:
        """Create the record of this epoch and shard, unless another attempt did first.

        Raises :class:`ProgressConflictError` when the existing record holds a different
        range than ``record``; the attempt that wrote first wins (see the module doc).
        """
        directory = self._epoch_dir(run_id, epoch)
        final = self._path(run_id, epoch, record.outcome.shard_id)
        if self._create_json(directory, final, record.to_dict()):
            return
        existing = self.load(run_id, epoch, record.outcome.shard_id)
        if existing is None or _range(existing.outcome) != _range(record.outcome):
            raise ProgressConflictError(
                f"Another attempt already recorded its read of shard {record.outcome.shard_id} "
                f"in epoch {epoch} (run {run_id}): {existing.to_dict() if existing else None}; "
                f"this attempt read {_range(record.outcome)}, so it fails and Spark's retry "
                "reads the recorded range. Nothing to do unless this repeats."
            )

    def forget_before(self, run_id: str, epoch: int) -> None:
        """Drop progress older than the retained window behind ``epoch``."""
        run_dir = f"{self._base}/{run_id}"
        if not self._fs.exists(run_dir):
            return
        for entry in self._fs.ls(run_dir, detail=False):
            name = entry.rstrip("/").rsplit("/", 1)[-1]
            if name.isdigit() and int(name) < epoch - EPOCHS_RETAINED:
                self._fs.rm(entry, recursive=True)

    def write_status(self, run_id: str, status: Mapping[str, Any]) -> None:
        """The latest completed epoch's numbers, for lag dashboards."""
        directory = f"{self._base}/{run_id}"
        self._write_json(directory, f"{directory}/status.json", status)

    def read_status(self, run_id: str) -> dict | None:
        return self._read_json(f"{self._base}/{run_id}/status.json")

    def latest_status(self) -> dict | None:
        """The status of the query that wrote last, for readers that know no run id (a
        sensor, a check): a deleted checkpoint leaves its run's folder behind, and the
        query started after it writes a newer status."""
        try:
            entries = self._fs.ls(self._base, detail=True)
        except FileNotFoundError:
            return None
        runs = [entry["name"].rstrip("/") for entry in entries if entry["type"] == "directory"]
        statuses = [
            status for run in runs if (status := self._read_json(f"{run}/status.json")) is not None
        ]
        return max(statuses, key=lambda status: int(status.get("writtenAtMs", 0)), default=None)

    def unpublished_status(self, committed: Mapping[str, str] | None = None) -> dict | None:
        """A status for readers of ``latest_status`` when no query ever wrote one: the
        reads to the tip of queries that never published an epoch (their first batch
        failed, or they stopped right after it), the earliest of each shard.

        A query started without checkpoint takes the time each shard was last read to its
        tip from the latest status; with none, such a first batch was all that read the
        shards, and records that expired since went unreported (issue 31 simulation,
        seed 40299). A read counts if it returned nothing, or nothing past the shard's
        ``committed`` sequence number (the table's): the records of a batch that never
        committed must not fall before a read-to-tip time, or their loss would pass for
        a quiet shard. The earliest, since a later empty read may be empty because such
        records expired.
        """
        committed = committed or {}
        try:
            entries = self._fs.ls(self._base, detail=True)
        except FileNotFoundError:
            return None
        shards: dict[str, dict[str, Any]] = {}
        for entry in entries:
            run = entry["name"].rstrip("/")
            if entry["type"] != "directory" or self._fs.exists(f"{run}/status.json"):
                continue
            for path in sorted(self._fs.glob(f"{run}/*/*.json")):
                data = None if path.endswith(".replay-loss.json") else self._read_json(path)
                if data is None:
                    continue
                outcome = ProgressRecord.from_dict(data).outcome
                if not outcome.caught_up or outcome.tip_ms is None:
                    continue
                through = committed.get(outcome.shard_id)
                last = outcome.last_sequence_number
                if last is not None and (through is None or int(through) < int(last)):
                    continue
                known = shards.get(outcome.shard_id)
                if known is None or outcome.tip_ms < known["tip_ms"]:
                    shards[outcome.shard_id] = outcome.to_dict()
        return {"shards": shards} if shards else None

    def has_progress(self) -> bool:
        """Whether any query recorded a read here (an epoch's folder exists)."""
        try:
            entries = self._fs.ls(self._base, detail=True)
        except FileNotFoundError:
            return False
        return any(
            entry["type"] == "directory" and self._fs.glob(f"{entry['name'].rstrip('/')}/*/")
            for entry in entries
        )

    def write_plan(self, run_id: str, plan: Mapping[str, Any]) -> None:
        """The run's latest read plan (its offset), for a start that lost the checkpoint
        holding it (:mod:`kinesis_lake.spark.kinesis.earlier_runs`)."""
        directory = f"{self._base}/{run_id}"
        self._write_json(directory, f"{directory}/plan.json", plan)

    def latest_plan(self) -> SourceOffset | None:
        """The plan written last, by whichever run: a run carries the start of the one
        before, so the latest holds what every earlier one knew that still matters."""
        try:
            entries = self._fs.ls(self._base, detail=True)
        except FileNotFoundError:
            return None
        plans = [
            plan
            for entry in entries
            if entry["type"] == "directory"
            and (plan := self._read_json(f"{entry['name'].rstrip('/')}/plan.json")) is not None
        ]
        if not plans:
            return None
        return SourceOffset.from_dict(max(plans, key=_planned_at))

    def _read_json(self, path: str) -> dict | None:
        try:
            with self._fs.open(path, "r") as handle:
                return json.load(handle)
        except FileNotFoundError:
            return None

    def _create_json(self, directory: str, final: str, data: Mapping[str, Any]) -> bool:
        """Write ``final`` only if it does not exist, atomically; False if it existed."""
        self._fs.makedirs(directory, exist_ok=True)
        if isinstance(self._fs, LocalFileSystem):
            temporary = f"{directory}/.{uuid.uuid4().hex}.tmp"
            with open(temporary, "w") as handle:
                json.dump(data, handle)
            try:
                os.link(temporary, final)  # fails if final exists; never half-written
            except FileExistsError:
                return False
            finally:
                os.unlink(temporary)
            return True
        try:
            # s3fs sends mode "x" as a conditional PUT (If-None-Match: *); a PUT is atomic.
            with self._fs.open(final, "xb") as handle:
                handle.write(json.dumps(data).encode())
        except FileExistsError:
            return False
        return True

    def _write_json(self, directory: str, final: str, data: Mapping[str, Any]) -> None:
        """Write atomically: readers see the old file or the new one, never a torn one."""
        self._fs.makedirs(directory, exist_ok=True)
        temporary = f"{directory}/.{uuid.uuid4().hex}.tmp"
        with self._fs.open(temporary, "w") as handle:
            json.dump(data, handle)
        self._fs.mv(temporary, final)


def _planned_at(plan: Mapping[str, Any]) -> int:
    """When a plan was made: an initial offset has no planning time, only its listing's."""
    return max(int(plan.get("plannedMs", 0)), int(plan.get("listedMs") or 0))


SKIPPED_GAPS_KEPT = 100
"""Skipped gaps a status keeps by name. Each run reports those of its own epochs
(:mod:`kinesis_lake.pipeline.ingest_report`), so a gap's name only has to outlive the run that
skipped it; the count, ``skippedRanges``, is kept whole for the no_data_loss check."""


GONE_UNREAD = (
    "no longer in the stream before it was read to its end: whatever records it "
    "still held (Kinesis does not say whether any) expired (retention) unread"
)
"""The cause of a gap the plan skipped (a shard gone, not a read's finding)."""


def source_status(
    done: SourceOffset, records: Mapping[str, ProgressRecord], previous: Mapping | None
) -> dict:
    """What dashboards plot after epoch ``done``: its numbers and every live shard's lag.

    ``recordsRead`` / ``userRecords`` / ``shardsRead`` are this epoch's (Kinesis records,
    records after de-aggregation). ``shards`` holds, per shard still being read, the
    latest read's outcome (``millis_behind_latest`` included) with its epoch and reader:
    shards that sat this epoch out keep their last known state, finished shards drop out.
    ``skippedRanges`` counts data-loss gaps so far (failOnDataLoss=false), and
    ``skippedGaps`` names the latest of the gaps reads skipped (shard, epoch, cause). The
    error of a run that fails on data loss names only the shard whose task failed first,
    at random when several lost records in one batch; the run that skips the gaps is the
    one that can name each, and an operator has to know every shard to re-send its
    records.
    """
    ended = {sid for sid, r in records.items() if r.outcome.shard_ended}
    shards = {
        sid: entry
        for sid, entry in (previous or {}).get("shards", {}).items()
        if sid in done.shards and sid not in ended
    }
    shards.update(
        {
            sid: {**r.outcome.to_dict(), "epoch": done.epoch, "reader": r.reader}
            for sid, r in records.items()
            if sid not in ended
        }
    )
    lags = [int(e["millis_behind_latest"] or 0) for e in shards.values()]
    gaps = [
        *(previous or {}).get("skippedGaps", []),
        *(
            {"shard": sid, "epoch": done.epoch, "detail": GONE_UNREAD}
            for sid in sorted(done.gone_unread)
        ),
        *(
            {"shard": sid, "epoch": done.epoch, "detail": r.outcome.data_loss}
            for sid, r in sorted(records.items())
            if r.outcome.data_loss
        ),
    ]
    return {
        "runId": done.run_id,
        "epoch": done.epoch,
        "writtenAtMs": int(time.time() * 1000),
        "recordsRead": sum(r.outcome.records_read for r in records.values()),
        "userRecords": sum(r.outcome.user_records for r in records.values()),
        "bytesRead": sum(r.outcome.bytes_read for r in records.values()),
        "shardsRead": sorted(records),
        "maxMillisBehindLatest": max(lags, default=0),
        "skippedRanges": done.skipped_ranges
        + sum(1 for r in records.values() if r.outcome.data_loss),
        "skippedGaps": gaps[-SKIPPED_GAPS_KEPT:],
        "startedMs": done.started_ms,
        "shards": dict(sorted(shards.items())),
        "finishedShards": sorted(done.finished | ended),
    }
