"""Read one shard between two positions, deterministically enough to replay.

This runs on Spark executors. A Spark micro-batch must be replayable after a crash, and
the driver cannot know where a shard will end, so the executor reads from a start position
up to a cap (records, bytes, arrival time), reports exactly where it stopped (``ReadOutcome``),
and a replay of that batch passes the reported last sequence number back as
``end_sequence_number`` to get the identical records again.

The reader takes a client rather than building one so the caller decides how (executors
build their own from plain settings; nothing here needs to be pickled).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import closing
from dataclasses import asdict, dataclass, fields
from typing import Any

from kinesis_lake.kinesis.client import KinesisClient
from kinesis_lake.kinesis.kpl import user_records
from kinesis_lake.kinesis.pages import Page
from kinesis_lake.kinesis.polled_pages import PolledPages
from kinesis_lake.kinesis.read_stops import (
    BEFORE_RECORD,
    SHARD_ENDS,
    page_stop,
    record_bytes,
    record_stop,
)
from kinesis_lake.kinesis.records import KinesisRecord
from kinesis_lake.kinesis.retry import DEFAULT_RETRY, RetryPolicy
from kinesis_lake.kinesis.server_time import epoch_ms
from kinesis_lake.kinesis.shard_calls import ShardCalls
from kinesis_lake.kinesis.start_positions import StartPosition
from kinesis_lake.kinesis.subscribed_pages import SubscribedPages

_log = logging.getLogger(__name__)

# Where a replay that read nothing of its pinned range can stop: retention took it all.
_RANGE_GONE_STOPS = ("end_gone", "caught_up", "shard_end", "shard_gone")


@dataclass
class ReadOutcome:
    """Where and why a read stopped: the executor's report back to the driver.

    ``records_read`` counts Kinesis records (an aggregate counts once), ``bytes_read``
    their size (:func:`~kinesis_lake.kinesis.read_stops.record_bytes`), ``user_records``
    the records yielded after de-aggregation. ``calls`` counts GetRecords (or, for enhanced
    fan-out, SubscribeToShard) requests sent,
    failed ones included; ``retries`` counts retried requests of any operation.
    ``data_loss`` is set when the records right after an AFTER_SEQUENCE_NUMBER start are no
    longer retained; the caller decides whether that is fatal. ``tip_ms`` is the server's
    time (the response's Date header) when this read found the shard caught up: every
    record that arrived before it has been returned, by this read or an earlier one.
    """

    shard_id: str
    records_read: int
    user_records: int
    last_sequence_number: str | None
    last_arrival_ms: int | None
    shard_ended: bool
    caught_up: bool
    millis_behind_latest: int | None
    stopped_by: str
    calls: int
    retries: int
    iterator_renewals: int
    data_loss: str | None
    read_started_ms: int
    tip_ms: int | None = None
    bytes_read: int = 0  # absent from progress records written before byte budgets

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReadOutcome:
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})


class ShardReader:
    """Reads one shard with bounded calls, bounded retries and an exact stop report.

    Its pages come from a page source: polling (:class:`PolledPages`), or enhanced
    fan-out (:class:`SubscribedPages`) for a read that is not a replay when a consumer is
    given. The read loop here takes their records, decides where to stop, and reports it.
    ``wait_if_held=False``: a subscription still held by the consumer (Kinesis allows one
    per consumer and shard every 5 s) is not waited for but raised,
    :func:`~kinesis_lake.kinesis.subscription.subscription_held` telling it; it may come
    after records were yielded (another reader took the subscription over), so a caller
    that reads the shard another way discards them and starts again.
    """

    def __init__(
        self,
        client: KinesisClient,
        stream_name: str,
        shard_id: str,
        *,
        retry: RetryPolicy = DEFAULT_RETRY,
        max_records_per_call: int = 10_000,
        min_call_interval_s: float = 0.2,
        consumer_arn: str | None = None,
        wait_if_held: bool = True,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self._calls = ShardCalls(client, stream_name, shard_id, retry=retry, sleep=sleep)
        self._polled = PolledPages(
            self._calls,
            max_records_per_call=max_records_per_call,
            min_call_interval_s=min_call_interval_s,
            clock=clock,
        )
        self._subscribed = (
            SubscribedPages(self._calls, consumer_arn, wait_if_held=wait_if_held)
            if consumer_arn is not None
            else None
        )
        self._now_ms = now_ms  # epoch ms: a simulation's virtual clock instead of the wall's
        self.outcome: ReadOutcome | None = None

    def read(
        self,
        start: StartPosition,
        *,
        max_records: int,
        end_sequence_number: str | None = None,
        arrival_cutoff_ms: int | None = None,
        quiet_since_ms: int | None = None,
        retention_ms: int | None = None,
        pinned_records: int | None = None,
        max_bytes: int | None = None,
        listed_open: bool = False,
    ) -> Iterator[list[KinesisRecord]]:
        """Yield de-aggregated records, one non-empty list per GetRecords response.

        Stops at the first of: ``max_records`` Kinesis records ("limit"), ``max_bytes``
        of them reached ("bytes") or about to be passed ("over_bytes": that record is not
        included, unless it is the read's first, which is read alone), the record
        ``end_sequence_number`` read, inclusive ("end_sequence"), a record that arrived
        after ``arrival_cutoff_ms``, which is not included ("cutoff"), the end of a closed
        shard ("shard_end"), a short page at the tip of the stream ("caught_up"), or the
        shard found gone from the stream ("shard_gone": closed and past retention, it
        ends like a closed shard with nothing after the start, ``shard_ended`` set).

        With ``end_sequence_number`` (a replay of a pinned range) any other stop raises
        ``ShardReadError``: the range can no longer be reproduced exactly, and silently
        returning a different set of records would break exactly-once.

        ``quiet_since_ms`` (a previous read's ``tip_ms``) and the stream's ``retention_ms``
        tell an empty gap from a loss when the resume record of an AFTER_SEQUENCE_NUMBER
        start has aged out: records lost after it would have arrived after
        ``quiet_since_ms`` (everything before was read) and before the trim horizon
        (server time - retention). If the shard was read to its tip after the current
        trim horizon, no such record can exist: the shard was simply quiet. Otherwise the
        gap is reported as ``data_loss``, since nothing can prove it empty.

        ``listed_open``: the caller listed the shard open just before, so a GetRecords page
        at the tip holding nothing but the resume record ends the read ("caught_up"): only
        a closed shard's end needs kinesalite's empty page, and waiting for it costs a
        second call, at the shard's pace 200 ms later. A shard closed since reads as
        caught up, and the next read finds its end.

        ``self.outcome`` is set once the generator is exhausted (not if it is closed early).
        """
        if max_records < 1:
            raise ValueError("max_records must be at least 1")
        if max_bytes is not None and max_bytes < 1:
            raise ValueError("max_bytes must be at least 1 (or None: no byte budget)")
        self.outcome = None
        outcome = ReadOutcome(
            shard_id=self._calls.shard_id,
            records_read=0,
            user_records=0,
            last_sequence_number=None,
            last_arrival_ms=None,
            shard_ended=False,
            caught_up=False,
            millis_behind_latest=None,
            stopped_by="",
            calls=0,
            retries=0,
            iterator_renewals=0,
            data_loss=None,
            read_started_ms=self._now_ms(),
        )
        end = int(end_sequence_number) if end_sequence_number is not None else None
        # A replay is judged by the range it must reproduce, not by its resume record:
        # the first attempt found that record (or reported its gap), and it may have aged
        # out since without anything of the range being lost (issue 31).
        cursor = ReadCursor(start, quiet_since_ms, retention_ms, check_gap=end is None)
        gone_at: tuple[str, int] | None = None  # a replay's first record past its end
        last_server_ms: int | None = None
        # A replay must return exactly the pinned range: GetRecords, asked again from the
        # same start, does; a subscription is only for reading ahead.
        if self._subscribed is not None and end is None:
            pages = self._subscribed.pages(cursor, outcome)
        else:

            def reads_past(page: Page) -> bool:
                """Whether the loop below will ask for the page after ``page`` (judged
                by its last record): only then is that page fetched ahead."""
                if page.may_be_tip and not page.millis_behind:
                    return False  # caught up, most likely
                if not page.records:
                    return True
                if (
                    max_bytes is not None
                    and outcome.bytes_read + sum(record_bytes(record) for record in page.records)
                    >= max_bytes
                ):
                    return False  # the byte budget ends the read on this page
                last = page.records[-1]
                if end is not None and int(last["SequenceNumber"]) >= end:
                    return False
                return arrival_cutoff_ms is None or (
                    epoch_ms(last["ApproximateArrivalTimestamp"]) <= arrival_cutoff_ms
                )

            pages = self._polled.pages(cursor, outcome, max_records, reads_past)
        stop = ""
        with closing(pages):
            for page in pages:
                batch: list[KinesisRecord] = []
                consumed_all = True
                skipped = 0
                for position, record in enumerate(page.records):
                    sequence_number = record["SequenceNumber"]
                    if cursor.skip(sequence_number, page.server_ms):
                        skipped += 1
                        continue
                    arrival_ms = epoch_ms(record["ApproximateArrivalTimestamp"])
                    size = record_bytes(record)
                    stop = (
                        record_stop(
                            sequence_number,
                            arrival_ms,
                            taken_before=outcome.records_read,
                            end=end,
                            arrival_cutoff_ms=arrival_cutoff_ms,
                            max_records=max_records,
                            size=size,
                            bytes_before=outcome.bytes_read,
                            max_bytes=max_bytes,
                        )
                        or ""
                    )
                    if stop in BEFORE_RECORD:
                        if stop == "end_gone":
                            # Records are immutable: only retention takes the end record
                            # (and, being older, every record of the range before it).
                            gone_at = (sequence_number, arrival_ms)
                        consumed_all = False
                        break
                    batch.extend(
                        user_records(
                            sequence_number, record["PartitionKey"], arrival_ms, record["Data"]
                        )
                    )
                    cursor.consumed(sequence_number)
                    outcome.records_read += 1
                    outcome.bytes_read += size
                    outcome.last_sequence_number = sequence_number
                    outcome.last_arrival_ms = arrival_ms
                    if stop:
                        consumed_all = position == len(page.records) - 1
                        break
                if page.millis_behind is not None:
                    outcome.millis_behind_latest = int(page.millis_behind)
                last_server_ms = page.server_ms or last_server_ms
                if batch:
                    outcome.user_records += len(batch)
                    yield batch

                ending = page_stop(
                    shard_ended=page.shard_ended,
                    gone=bool(page.gone),
                    read_whole_page=consumed_all,
                    may_be_tip=page.may_be_tip,
                    millis_behind=page.millis_behind,
                    resume_record_only=page.end_needs_empty_page
                    and not listed_open
                    and bool(page.records)
                    and skipped == len(page.records),
                )
                if ending in SHARD_ENDS:
                    cursor.nothing_after(page.server_ms)
                    outcome.shard_ended = True
                    stop = stop or ending
                elif ending == "caught_up" and not stop:
                    # The tip time is recorded only once the gap check is settled:
                    # an unresolved resume point would otherwise let the next read take
                    # records that expired unread for a quiet shard (issue 31 defect 2).
                    cursor.nothing_after(page.server_ms)
                    outcome.caught_up = True
                    outcome.tip_ms = page.server_ms
                    stop = "caught_up"
                if stop:
                    break

        outcome.data_loss = cursor.data_loss
        if end_sequence_number is not None:
            self._settle_replay(
                outcome, stop, end_sequence_number, pinned_records, gone_at, last_server_ms
            )
        if stop == "shard_gone" and outcome.data_loss:
            outcome.data_loss += (
                "; the shard is no longer in the stream (closed, and every record it held "
                "is past retention)"
            )
        outcome.stopped_by = stop
        self.outcome = outcome

    def _settle_replay(
        self,
        outcome: ReadOutcome,
        stop: str,
        end_sequence_number: str,
        pinned_records: int | None,
        gone_at: tuple[str, int] | None,
        server_now_ms: int | None,
    ) -> None:
        """Judge a replay of a pinned range by what it read again.

        All of it (as many records as the first attempt, up to the end record): no loss,
        whether or not the record it resumes after is still retained. Fewer, because
        retention took the oldest ones (the batch was read, then died uncommitted, and an
        outage outlasted retention): those are lost, and reported as such
        (``data_loss``), instead of failing every restart with the same
        ``ShardReadError``. Retention takes a shard's records oldest first, so an end
        record gone leaves none of the range: a read of some of it that misses its end
        is a range that cannot be reproduced (``ShardReadError``, as before). A range
        gone up to its end leaves the shard unread after the end record as well: the
        records after it, up to the first one still retained, are part of the reported
        gap, and ``tip_ms`` says from when on everything is accounted for, so the next
        read does not report them again.
        """
        if stop == "end_sequence":
            if pinned_records is None or outcome.records_read >= pinned_records:
                return
            lost = f"{pinned_records - outcome.records_read} of its {pinned_records} records"
        elif stop in _RANGE_GONE_STOPS and outcome.records_read == 0:
            counted = f" {pinned_records}" if pinned_records is not None else ""
            lost = f"all{counted} of its records"
            if gone_at is not None:
                lost += f" and any that arrived after them before record {gone_at[0]}"
                outcome.tip_ms = gone_at[1] - 1
            else:
                lost += " and any that arrived after them"
                outcome.tip_ms = server_now_ms
        else:
            raise self._calls.error(
                "GetRecords",
                outcome.calls,
                f"pinned range ending at {end_sequence_number} cannot be reproduced: the read "
                f"stopped ({stop}) after {outcome.last_sequence_number} without reaching it",
            )
        outcome.data_loss = (
            f"the batch read up to record {end_sequence_number} was never committed, and "
            f"{lost} expired (retention) before it could be read again"
        )


class ReadCursor:
    """Tracks the position within a read and the AFTER_SEQUENCE_NUMBER resume check."""

    def __init__(
        self,
        start: StartPosition,
        quiet_since_ms: int | None,
        retention_ms: int | None,
        *,
        check_gap: bool = True,
    ) -> None:
        self.start = start
        self._quiet_since_ms = quiet_since_ms
        self._retention_ms = retention_ms
        self._check_gap = check_gap
        # A start that is not after a known record (TRIM_HORIZON, a timestamp), on a shard
        # read to its tip before without a record: what arrived after that read and
        # expired before this one is lost as surely as after a resume record (issue 31).
        self._unread_since_tip = (
            check_gap
            and start.kind != "AFTER_SEQUENCE_NUMBER"
            and quiet_since_ms is not None
            and retention_ms is not None
        )
        self.last_seen: str | None = None
        self.data_loss: str | None = None
        self._rejection: str | None = None
        # When resuming after S, every record up to and including S must be skipped.
        self._resume_after = (
            int(start.sequence_number)
            if start.kind == "AFTER_SEQUENCE_NUMBER" and start.sequence_number is not None
            else None
        )
        self._found_resume_record = False

    def rejected(self, operation: str, message: str) -> None:
        """AT_SEQUENCE_NUMBER S was refused (presumably past retention); the read goes on
        from TRIM_HORIZON. Whether anything was lost is decided by the records that follow:
        finding S there proves nothing was."""
        self._rejection = f"{operation} rejected it: {message}"
        _log.warning(
            "resume sequence number %s rejected, reading from TRIM_HORIZON: %s",
            self.start.sequence_number,
            message,
        )

    def skip(self, sequence_number: str, server_ms: int | None) -> bool:
        """True for records at or before the resume point; detects a gap after it."""
        if self._resume_after is None:
            self._settle_start(server_ms, f" and before record {sequence_number}")
            return False
        value = int(sequence_number)
        if value <= self._resume_after:
            self._found_resume_record = value == self._resume_after
            self.last_seen = sequence_number
            return True
        if not self._check_gap:
            pass  # a replay: judged by the range it reads again (ShardReader._settle_replay)
        elif not self._found_resume_record and self._quiet_past(server_ms):
            _log.info(
                "resume record %s aged out of a shard that was quiet since %s: no gap",
                self.start.sequence_number,
                self._quiet_since_ms,
            )
        elif not self._found_resume_record:
            reason = f" ({self._rejection})" if self._rejection else ""
            self.data_loss = (
                f"records after {self.start.sequence_number} and before {sequence_number} "
                f"are no longer retained: the resume record {self.start.sequence_number} "
                f"was not found{reason}"
            )
        self._resume_after = None
        return False

    def nothing_after(self, server_ms: int | None) -> None:
        """The read reached the tip (or the end of a closed shard) at server time
        ``server_ms`` without seeing a record after the resume point.

        If the resume record itself was not seen either, it aged out, and so did every
        record that arrived between it and the trim horizon: an empty shard now proves
        nothing about them. Unless the shard was read to its tip after the current trim
        horizon (``quiet_since_ms``), the gap is reported as possible loss; staying
        silent here would let this read record a tip time, and the next read would take
        the lost records for a quiet shard.
        """
        if self._resume_after is None:
            self._settle_start(server_ms, " (the shard holds none now)")
            return
        if self._found_resume_record or not self._check_gap:
            self._resume_after = None
            return
        if self._quiet_past(server_ms):
            _log.info(
                "resume record %s aged out of a shard that was quiet since %s: no gap",
                self.start.sequence_number,
                self._quiet_since_ms,
            )
        else:
            reason = f" ({self._rejection})" if self._rejection else ""
            since = (
                f"since it was last read to its tip at {self._quiet_since_ms} ms (server time)"
                if self._quiet_since_ms is not None
                else "and no read to its tip is on record"
            )
            self.data_loss = (
                f"the resume record {self.start.sequence_number} is no longer retained and the "
                f"shard holds nothing after it{reason}: records that arrived after it {since} "
                "may have expired unread"
            )
        self._resume_after = None

    def _settle_start(self, server_ms: int | None, seen: str) -> None:
        """The gap check of a start that is not after a known record, at the first record
        read (or the tip): once per read."""
        if not self._unread_since_tip:
            return
        self._unread_since_tip = False
        if self._quiet_past(server_ms):
            return
        self.data_loss = (
            f"the shard was last read to its tip at {self._quiet_since_ms} ms (server time), "
            f"before the current trim horizon, holding no record after its start "
            f"({self.start.kind}): records that arrived after that read{seen} may have "
            "expired unread"
        )

    def _quiet_past(self, server_ms: int | None) -> bool:
        """True when the shard was read to its tip after the current trim horizon."""
        quiet_since, retention = self._quiet_since_ms, self._retention_ms
        if quiet_since is None or retention is None or server_ms is None:
            return False
        return quiet_since >= server_ms - retention

    def consumed(self, sequence_number: str) -> None:
        self.last_seen = sequence_number
