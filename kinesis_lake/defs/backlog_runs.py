"""Which ingestion runs were launched for a backlog, and when the next one may start.

A backlog is named by the raw table's committed positions (``backlog_run_key``): the
same positions, the same backlog. Every run the backlog sensor launches for it carries
that name in its run key (``<base>``, ``<base>:retry1``, ...), so the runs' history
answers two questions without any state of our own:

* Is ingestion stalled? A run for this backlog finished, yet the positions did not
  move and the stream still holds records past them. A failed run is the obvious case;
  a *successful* run that committed nothing is the dangerous one (a shard whose start
  cannot be read, a source that stops early), because nothing else reports it.
* When may the next attempt start? Failed runs are retried at once a few times (a
  transient fault), then with a back-off that doubles per run up to an hour; a run
  that succeeded without moving the positions is retried with back-off only. The
  sensor never gives up for good: an outage that ends must not need an operator.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import dagster as dg

BACKLOG_SENSOR_NAME = "kinesis_backlog_sensor"
MAX_IMMEDIATE_ATTEMPTS = 3
"""Runs of one backlog started without waiting (the first plus two quick retries)."""
FIRST_BACK_OFF_SECONDS = 60.0
MAX_BACK_OFF_SECONDS = 3600.0

_RUN_KEY_TAG = "dagster/run_key"
_SENSOR_NAME_TAG = "dagster/sensor_name"
_FINISHED = (
    dg.DagsterRunStatus.SUCCESS,
    dg.DagsterRunStatus.FAILURE,
    dg.DagsterRunStatus.CANCELED,
)
_RUNS_LOOKED_AT = 200


def backlog_run_key(stream_name: str, positions: dict[str, str]) -> str:
    """Same stream and committed positions, same key: a backlog is requested once."""
    canonical = json.dumps({"stream": stream_name, "positions": positions}, sort_keys=True)
    return f"backlog-{hashlib.sha256(canonical.encode()).hexdigest()[:20]}"


def quiet_run_key(stream_name: str, positions: dict[str, str], read_to_tip_ms: int | None) -> str:
    """The run that reads a quiet stream to its tip again: one per stale proof of quiet
    (the positions and the last read to the tip), so a run that refreshed it is not
    requested again, and one that failed is retried with the backlog's back-off."""
    canonical = json.dumps(
        {"stream": stream_name, "positions": positions, "readToTipMs": read_to_tip_ms},
        sort_keys=True,
    )
    return f"quiet-{hashlib.sha256(canonical.encode()).hexdigest()[:20]}"


def attempt_run_key(base: str, attempt: int) -> str:
    return base if attempt == 0 else f"{base}:retry{attempt}"


@dataclass(frozen=True)
class BacklogHistory:
    """The finished runs launched for one backlog, newest first."""

    base: str
    finished: list[dg.RunRecord]

    @property
    def attempts(self) -> int:
        return len(self.finished)

    @property
    def last(self) -> dg.RunRecord | None:
        return self.finished[0] if self.finished else None

    def wait_seconds(self) -> float:
        """How long after the last run ended the next attempt may start."""
        last = self.last
        if last is None:
            return 0.0
        failed = last.dagster_run.status != dg.DagsterRunStatus.SUCCESS
        if failed and self.attempts < MAX_IMMEDIATE_ATTEMPTS:
            return 0.0
        delayed = self.attempts - (MAX_IMMEDIATE_ATTEMPTS - 1 if failed else 0)
        return min(FIRST_BACK_OFF_SECONDS * 2 ** (delayed - 1), MAX_BACK_OFF_SECONDS)

    def next_attempt_at_ms(self) -> int:
        last = self.last
        if last is None:
            return 0
        ended = last.end_time or last.update_timestamp.timestamp()
        return int((ended + self.wait_seconds()) * 1000)

    def stall(self, shards_with_backlog: list[str]) -> str | None:
        """Why ingestion is not moving past this backlog, or None while it may be."""
        last = self.last
        if last is None or not shards_with_backlog:
            return None
        run = last.dagster_run
        shards = ", ".join(shards_with_backlog)
        if run.status == dg.DagsterRunStatus.SUCCESS:
            return (
                f"Run {run.run_id} succeeded but the raw table's committed positions did not "
                f"move while shards {shards} still hold records past them ({self.attempts} "
                "run(s) for this backlog): read that run's logs for a data-loss or "
                "start-position error; retrying with back-off."
            )
        if self.attempts < MAX_IMMEDIATE_ATTEMPTS:
            return None
        return (
            f"Ingestion of the backlog on shards {shards} failed {self.attempts} times "
            f"(last run {run.run_id}, {run.status.value}): open its logs and fix the cause; "
            "retrying with back-off."
        )


def backlog_history(
    instance: dg.DagsterInstance, base: str, sensor_name: str = BACKLOG_SENSOR_NAME
) -> BacklogHistory:
    """The backlog sensor's finished runs whose key names ``base`` (one query)."""
    records = instance.get_run_records(
        dg.RunsFilter(tags={_SENSOR_NAME_TAG: sensor_name}, statuses=list(_FINISHED)),
        limit=_RUNS_LOOKED_AT,
    )
    ours = [
        record
        for record in records
        if _names_backlog(record.dagster_run.tags.get(_RUN_KEY_TAG, ""), base)
    ]
    return BacklogHistory(base, ours)


def _names_backlog(run_key: str, base: str) -> bool:
    return run_key == base or run_key.startswith(f"{base}:retry")
