"""Where each executor records how far it read a shard in an epoch.

The driver plans an epoch without knowing where a shard's records end (see
:mod:`kinesis_lake.spark.kinesis_offsets`), so the executor that reads a shard writes one
small JSON record, ``<metadataPath>/<runId>/<epoch>/<shardId>.json``, holding its
:class:`~kinesis_lake.kinesis.shard_reader.ReadOutcome` and who read it (host, process,
Spark task). Two readers use it:

* the driver, when planning epoch N+1, to start each shard after the last record that
  epoch N returned;
* a retried or replayed task of epoch N, which finds the record already there and reads
  exactly up to the recorded last sequence number, so the replayed batch holds the very
  same records (Kinesis records are immutable, so a pinned range always reads the same).

A record is written once, atomically (temporary file, then rename; an S3 PUT is atomic),
after the read finished and before the task's output is complete, so every epoch a sink
committed has a record for each shard it read. Two attempts of one task never run at the
same time unless Spark speculation is on, which the session builder refuses.

The driver also keeps ``<metadataPath>/<runId>/status.json``: the last completed epoch's
numbers and the latest known state of every shard still being read (lag dashboards,
``kinesis_lake.spark.ingest``).

The store is fsspec, so ``metadataPath`` may be a local folder or any fsspec URL (s3://).
On a multi-host cluster it must be storage that the driver and all executors share.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import fsspec

from kinesis_lake.kinesis.shard_reader import ReadOutcome

EPOCHS_RETAINED = 20
"""Epochs of progress kept behind the committed one: Spark only ever replays the last."""


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
        found = {}
        for shard_id in shard_ids:
            record = self.load(run_id, epoch, shard_id)
            if record is not None:
                found[shard_id] = record
        return found

    def save(self, run_id: str, epoch: int, record: ProgressRecord) -> None:
        directory = self._epoch_dir(run_id, epoch)
        final = self._path(run_id, epoch, record.outcome.shard_id)
        self._write_json(directory, final, record.to_dict())

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

    def _read_json(self, path: str) -> dict | None:
        try:
            with self._fs.open(path, "r") as handle:
                return json.load(handle)
        except FileNotFoundError:
            return None

    def _write_json(self, directory: str, final: str, data: Mapping[str, Any]) -> None:
        """Write atomically: readers see the old file or the new one, never a torn one."""
        self._fs.makedirs(directory, exist_ok=True)
        temporary = f"{directory}/.{uuid.uuid4().hex}.tmp"
        with self._fs.open(temporary, "w") as handle:
            json.dump(data, handle)
        self._fs.mv(temporary, final)
