"""Read one shard between two positions, deterministically enough to replay.

This runs on Spark executors. A Spark micro-batch must be replayable after a crash, and
the driver cannot know where a shard will end, so the executor reads from a start position
up to a cap (records, arrival time), reports exactly where it stopped (``ReadOutcome``),
and a replay of that batch passes the reported last sequence number back as
``end_sequence_number`` to get the identical records again.

The reader takes a client rather than building one so the caller decides how (executors
build their own from plain settings; nothing here needs to be pickled).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Generator, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing
from dataclasses import asdict, dataclass, fields
from typing import Any, TypeVar

from botocore.exceptions import ClientError

from kinesis_lake.errors import KinesisError
from kinesis_lake.kinesis.client import KinesisClient
from kinesis_lake.kinesis.kpl import user_records
from kinesis_lake.kinesis.read_stops import BEFORE_RECORD, SHARD_ENDS, page_stop, record_stop
from kinesis_lake.kinesis.records import KinesisRecord
from kinesis_lake.kinesis.retry import (
    DEFAULT_RETRY,
    RetryPolicy,
    call_with_retry,
    error_code,
    is_retryable,
)
from kinesis_lake.kinesis.server_time import epoch_ms, server_ms
from kinesis_lake.kinesis.start_positions import StartPosition
from kinesis_lake.kinesis.streams import could_have_aged_out, list_shards
from kinesis_lake.kinesis.subscription import (
    BUSY_RETRIES,
    BusyWaits,
    Subscription,
    open_when_free,
)

_log = logging.getLogger(__name__)
_T = TypeVar("_T")

# InvalidArgumentException messages that mean "this sequence number belongs to another
# shard or stream" (a caller bug), as opposed to "it is no longer retained".
_FOREIGN_SEQUENCE_MESSAGES = ("It encodes", "did not come from this stream")

# How Kinesis refuses to start at a sequence number it no longer holds.
_REJECTABLE = frozenset({"InvalidArgumentException"})
# Where a replay that read nothing of its pinned range can stop: retention took it all.
_RANGE_GONE_STOPS = ("end_gone", "caught_up", "shard_end", "shard_gone")
# How it answers for a shard it no longer has: a closed shard whose records are all past
# retention, which ListShards stops listing too (or a stream or consumer that is gone).
_NOT_FOUND = frozenset({"ResourceNotFoundException"})
_SUBSCRIBE = "SubscribeToShard"


@dataclass
class ReadOutcome:
    """Where and why a read stopped: the executor's report back to the driver.

    ``records_read`` counts Kinesis records (an aggregate counts once), ``user_records``
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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReadOutcome:
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})


@dataclass(frozen=True)
class Page:
    """One answer's records: a GetRecords response or a SubscribeToShard event.

    ``may_be_tip`` says whether the page could have been the stream's tip: a GetRecords
    page shorter than its limit, or any subscription event (Kinesis pushes what it has).
    """

    records: list[Mapping[str, Any]]
    server_ms: int | None
    shard_ended: bool
    millis_behind: int | None
    may_be_tip: bool
    end_needs_empty_page: bool
    """kinesalite's GetRecords reports a closed shard's end only on an empty page, so a
    page holding nothing but the resume record must not count as the tip there. A
    subscription reports the end in the event itself."""
    gone: str | None = None
    """Why the shard is known to be gone from the stream, on the empty end page that
    stands for it (:class:`_ShardGoneError`)."""


#: Opens a read at a GetShardIterator-shaped position (``StartPosition.iterator_args``):
#: a shard iterator for polling, a subscription for enhanced fan-out.
Opener = Callable[[dict[str, Any]], Any]


class _ReadAbandonedError(RuntimeError):
    """A call made ahead whose page the caller will never ask for."""


class _ShardGoneError(Exception):
    """The shard is no longer in the stream: Kinesis closed it and all its records
    passed retention, so it answers ResourceNotFoundException and ListShards omits it.

    Such a shard will never return another record, exactly like a closed shard read to
    its end: the read ends there (``_ending_if_gone``), and the gap rules of the start
    decide whether anything after it expired unread. Failing instead failed every retry
    and replay of the batch the same way, for ever (issue 31 simulation, seed 20147).
    """

    def __init__(self, detail: str, server_ms: int | None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.server_ms = server_ms

    def end_page(self) -> Page:
        return Page(
            records=[],
            server_ms=self.server_ms,
            shard_ended=True,
            millis_behind=0,
            may_be_tip=True,
            end_needs_empty_page=False,
            gone=self.detail,
        )


def _ending_if_gone(pages: Generator[Page]) -> Generator[Page]:
    """``pages``, ending with an empty end-of-shard page if the shard is found gone."""
    try:
        yield from pages
    except _ShardGoneError as gone:
        yield gone.end_page()


class ShardReadError(KinesisError, RuntimeError):
    """A shard could not be read as asked; names everything needed to find out why."""

    def __init__(
        self, stream_name: str, shard_id: str, operation: str, attempts: int, last_error: str
    ) -> None:
        # Everything goes to args so the exception survives pickling across Spark workers.
        super().__init__(stream_name, shard_id, operation, attempts, last_error)
        self.stream_name = stream_name
        self.shard_id = shard_id
        self.operation = operation
        self.attempts = attempts
        self.last_error = last_error

    def __str__(self) -> str:
        return (
            f"{self.operation} on shard {self.shard_id} of Kinesis stream "
            f"{self.stream_name!r} failed after {self.attempts} attempt(s): {self.last_error}"
        )


class ShardReader:
    """Reads one shard with bounded calls, bounded retries and an exact stop report."""

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
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        if not 1 <= max_records_per_call <= 10_000:
            raise ValueError("max_records_per_call must be within 1..10000 (the GetRecords cap)")
        self._client = client
        self._stream_name = stream_name
        self._shard_id = shard_id
        self._retry = retry
        self._max_per_call = max_records_per_call
        self._min_interval_s = min_call_interval_s
        self._consumer_arn = consumer_arn
        self._sleep = sleep
        self._clock = clock
        self._now_ms = now_ms  # epoch ms: a simulation's virtual clock instead of the wall's
        self._rng = random.Random()
        self._last_call_at: float | None = None
        self.outcome: ReadOutcome | None = None

    # ----------------------------------------------------------------- API calls

    def _error(self, operation: str, attempts: int, detail: str) -> ShardReadError:
        return ShardReadError(self._stream_name, self._shard_id, operation, attempts, detail)

    def _call(
        self,
        operation: str,
        request: Callable[[], _T],
        outcome: ReadOutcome,
        passthrough: frozenset[str] = frozenset(),
    ) -> _T:
        """Call with retries; wrap failures in ShardReadError except ``passthrough`` codes."""
        attempts = 1

        def note_retry(error: BaseException) -> None:
            nonlocal attempts
            attempts += 1
            outcome.retries += 1
            _log.info(
                "retrying %s on %s/%s after %s",
                operation,
                self._stream_name,
                self._shard_id,
                error_code(error),
            )

        try:
            return call_with_retry(
                request,
                self._retry,
                sleep=self._sleep,
                rng=self._rng,
                on_retry=note_retry,
            )
        except ClientError as error:
            if error_code(error) in passthrough:
                raise
            raise self._error(operation, attempts, str(error)) from error
        except Exception as error:
            raise self._error(operation, attempts, f"{type(error).__name__}: {error}") from error

    def _iterator(self, outcome: ReadOutcome, **position: Any) -> str:
        response = self._call(
            "GetShardIterator",
            lambda: self._client.get_shard_iterator(
                StreamName=self._stream_name, ShardId=self._shard_id, **position
            ),
            outcome,
            passthrough=_openers_passthrough(position),
        )
        return str(response["ShardIterator"])

    def _get_records(
        self, iterator: str, limit: int, outcome: ReadOutcome, abandoned: threading.Event
    ) -> Mapping[str, Any]:
        def request() -> Mapping[str, Any]:
            # Kinesis allows 5 GetRecords calls per second per shard, shared by all readers:
            # spacing our own calls avoids self-inflicted throttling. A reader that is behind
            # keeps to one call per interval (the default 200 ms is the whole 5/s), so a
            # larger minCallIntervalMs is what leaves room for other consumers.
            if self._last_call_at is not None:
                wait = self._last_call_at + self._min_interval_s - self._clock()
                if wait > 0:
                    self._sleep(wait)
            if abandoned.is_set():  # checked before every attempt, after the wait
                raise _ReadAbandonedError()
            self._last_call_at = self._clock()
            outcome.calls += 1
            return self._client.get_records(ShardIterator=iterator, Limit=limit)

        return self._call(
            "GetRecords",
            request,
            outcome,
            passthrough=frozenset({"ExpiredIteratorException"}),
        )

    # ----------------------------------------------------------------- reading

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
    ) -> Iterator[list[KinesisRecord]]:
        """Yield de-aggregated records, one non-empty list per GetRecords response.

        Stops at the first of: ``max_records`` Kinesis records ("limit"), the record
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

        ``self.outcome`` is set once the generator is exhausted (not if it is closed early).
        """
        if max_records < 1:
            raise ValueError("max_records must be at least 1")
        self.outcome = None
        outcome = ReadOutcome(
            shard_id=self._shard_id,
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
        if self._consumer_arn is not None and end is None:
            pages = _ending_if_gone(self._subscribed_pages(cursor, outcome))
        else:

            def reads_past(page: Page) -> bool:
                """Whether the loop below will ask for the page after ``page`` (judged
                by its last record): only then is that page fetched ahead."""
                if page.may_be_tip and not page.millis_behind:
                    return False  # caught up, most likely
                if not page.records:
                    return True
                last = page.records[-1]
                if end is not None and int(last["SequenceNumber"]) >= end:
                    return False
                return arrival_cutoff_ms is None or (
                    epoch_ms(last["ApproximateArrivalTimestamp"]) <= arrival_cutoff_ms
                )

            pages = _ending_if_gone(self._polled_pages(cursor, outcome, max_records, reads_past))
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
                    stop = (
                        record_stop(
                            sequence_number,
                            arrival_ms,
                            taken_before=outcome.records_read,
                            end=end,
                            arrival_cutoff_ms=arrival_cutoff_ms,
                            max_records=max_records,
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
            raise self._error(
                "GetRecords",
                outcome.calls,
                f"pinned range ending at {end_sequence_number} cannot be reproduced: the read "
                f"stopped ({stop}) after {outcome.last_sequence_number} without reaching it",
            )
        outcome.data_loss = (
            f"the batch read up to record {end_sequence_number} was never committed, and "
            f"{lost} expired (retention) before it could be read again"
        )

    def _polled_pages(
        self,
        cursor: ReadCursor,
        outcome: ReadOutcome,
        max_records: int,
        reads_past: Callable[[Page], bool],
    ) -> Generator[Page]:
        """GetRecords pages, renewing expired iterators, until the caller stops asking.

        While the caller works on a page it will read past (``reads_past``), the next
        page is already being fetched: the shard's server works while Spark's worker
        decodes and hands over the previous answer, instead of one waiting for the other.
        One call is in flight at a time, still spaced by the minimum interval, and a
        page the caller stops on is not followed by a call it would not use. Errors of
        the call made ahead surface when the caller asks for its page, so an expired
        iterator is renewed after the records the caller has taken, as without it.
        """

        def iterator_at(position: dict[str, Any]) -> str:
            return self._iterator(outcome, **position)

        iterator = self._open(cursor, outcome, iterator_at, "GetShardIterator")
        expirations_in_a_row = 0
        ahead: tuple[int, Future[Mapping[str, Any]]] | None = None  # (Limit, answer)
        # Set once the caller is gone: a call made ahead then stops before its next
        # attempt, instead of spending the shard's calls and retries on a page no one takes.
        abandoned = threading.Event()
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="read-ahead") as fetcher:

            def fetch(iterator: str, limit: int) -> tuple[int, Future[Mapping[str, Any]]]:
                return limit, fetcher.submit(self._get_records, iterator, limit, outcome, abandoned)

            while True:
                if ahead is None:
                    ahead = fetch(
                        iterator, min(self._max_per_call, max_records - outcome.records_read)
                    )
                (limit, answer), ahead = ahead, None
                try:
                    response = answer.result()
                except ClientError as error:  # ExpiredIteratorException only (passthrough)
                    expirations_in_a_row += 1
                    if expirations_in_a_row > self._retry.max_retries:
                        raise self._error("GetRecords", expirations_in_a_row, str(error)) from error
                    outcome.iterator_renewals += 1
                    iterator = self._reopen(cursor, outcome, iterator_at, "GetShardIterator")
                    continue
                expirations_in_a_row = 0
                next_iterator = response.get("NextShardIterator")
                page = Page(
                    records=response["Records"],
                    server_ms=server_ms(response),
                    shard_ended=next_iterator is None,
                    millis_behind=response.get("MillisBehindLatest"),
                    may_be_tip=len(response["Records"]) < limit,
                    end_needs_empty_page=True,
                )
                # What the caller can still take if it takes this whole page: a lower
                # bound, since it may skip records or stop short.
                next_limit = min(
                    self._max_per_call, max_records - outcome.records_read - len(page.records)
                )
                if next_iterator is not None and next_limit > 0 and reads_past(page):
                    ahead = fetch(next_iterator, next_limit)
                try:
                    yield page
                except GeneratorExit:
                    abandoned.set()
                    raise
                if next_iterator is None:
                    return  # the shard ended: the caller stops on this page
                iterator = next_iterator

    def _subscribed_pages(self, cursor: ReadCursor, outcome: ReadOutcome) -> Generator[Page]:
        """Events of SubscribeToShard, subscribing again right after the last record seen
        when a subscription ends (Kinesis ends each after 5 minutes) or breaks.

        Subscribing again without a new record in between counts against ``maxRetries``:
        an endpoint that ends or breaks every subscription early would otherwise keep the
        task subscribing forever.
        """
        waits = BusyWaits()
        subscribe_at = self._subscriptions(outcome, waits)
        subscription: Subscription = self._open(cursor, outcome, subscribe_at, _SUBSCRIBE)
        stalled = 0
        progress_mark = cursor.last_seen
        why = "it ended"
        try:
            while True:
                try:
                    event = subscription.next_event()
                except Exception as error:
                    if not is_retryable(error):
                        detail = f"{type(error).__name__}: {error}"
                        raise self._error(_SUBSCRIBE, stalled + 1, detail) from error
                    outcome.retries += 1
                    event, why = None, f"{type(error).__name__}: {error}"
                if event is not None:
                    millis_behind = event.get("MillisBehindLatest")
                    yield Page(
                        records=event["Records"],
                        server_ms=subscription.server_ms,
                        shard_ended=event.get("ContinuationSequenceNumber") is None,
                        millis_behind=millis_behind,
                        may_be_tip=millis_behind == 0,
                        end_needs_empty_page=False,
                    )
                    continue
                if cursor.last_seen == progress_mark:
                    stalled += 1
                    if stalled > self._retry.max_retries:
                        raise self._error(
                            _SUBSCRIBE,
                            stalled,
                            f"{stalled} subscriptions in a row ended or broke before a new "
                            f"record (the last: {why})",
                        )
                    self._sleep(self._retry.delay(stalled - 1, self._rng))
                else:
                    stalled, waits.left = 0, BUSY_RETRIES
                progress_mark, why = cursor.last_seen, "it ended"
                subscription.close()
                outcome.iterator_renewals += 1
                subscription = self._reopen(cursor, outcome, subscribe_at, _SUBSCRIBE)
        finally:
            subscription.close()

    def _subscriptions(self, outcome: ReadOutcome, waits: BusyWaits) -> Opener:
        """Opens SubscribeToShard at a position, with this reader's retries and errors."""
        assert self._consumer_arn is not None
        consumer_arn = self._consumer_arn

        def subscribe_at(position: dict[str, Any]) -> Subscription:
            def count_call() -> None:
                outcome.calls += 1

            def request() -> Subscription:
                return open_when_free(
                    self._client,
                    consumer_arn,
                    self._shard_id,
                    position,
                    sleep=self._sleep,
                    rng=self._rng,
                    on_call=count_call,
                    waits=waits,
                )

            return self._call(
                _SUBSCRIBE,
                request,
                outcome,
                passthrough=_openers_passthrough(position),
            )

        return subscribe_at

    def _open(
        self, cursor: ReadCursor, outcome: ReadOutcome, opener: Opener, operation: str
    ) -> Any:
        """Open a read at ``cursor.start`` with ``opener``.

        AFTER_SEQUENCE_NUMBER S is requested as AT_SEQUENCE_NUMBER S so that the first
        record proves S is still retained; if S is rejected outright, the read falls back to
        TRIM_HORIZON and the cursor reports the gap. A shard gone from the stream raises
        :class:`_ShardGoneError`.
        """
        start = cursor.start
        try:
            if start.kind in ("AT_SEQUENCE_NUMBER", "AFTER_SEQUENCE_NUMBER"):
                try:
                    return opener(
                        {
                            "ShardIteratorType": "AT_SEQUENCE_NUMBER",
                            "StartingSequenceNumber": start.sequence_number,
                        }
                    )
                except ClientError as error:
                    message = str(error)
                    if error_code(error) in _NOT_FOUND:
                        raise
                    if start.kind == "AT_SEQUENCE_NUMBER" or any(
                        m in message for m in _FOREIGN_SEQUENCE_MESSAGES
                    ):
                        raise self._error(operation, 1, message) from error
                    cursor.rejected(operation, message)
                    return opener({"ShardIteratorType": "TRIM_HORIZON"})
            return opener(start.iterator_args())
        except ClientError as error:  # ResourceNotFoundException only (passthrough)
            raise self._gone(operation, error) from error

    def _gone(self, operation: str, error: ClientError) -> Exception:
        """What ResourceNotFoundException at the start of a read means: the shard is gone
        from the stream if ListShards no longer lists it and it can have aged out (a gone
        stream raises StreamNotFoundError there); else an error of this read (a consumer
        not found, a shard the stream never had)."""
        listed = {s.shard_id for s in list_shards(self._client, self._stream_name)}
        if self._shard_id in listed or not could_have_aged_out(self._shard_id, listed):
            return self._error(operation, 1, str(error))
        _log.warning(
            "shard %s of stream %s is no longer in the stream: read as ended (%s)",
            self._shard_id,
            self._stream_name,
            error,
        )
        return _ShardGoneError(f"{operation}: {error}", server_ms(error.response))

    def _reopen(
        self, cursor: ReadCursor, outcome: ReadOutcome, opener: Opener, operation: str
    ) -> Any:
        """Open again after an iterator expired or a subscription ended: right after the
        last record seen, or at the start.

        A shard gone after this read took records fails the read: what it held after them
        is unknown, and the retry, reading from the start again, judges that gap.
        """
        if cursor.last_seen is None:
            return self._open(cursor, outcome, opener, operation)
        try:
            return opener(
                {
                    "ShardIteratorType": "AFTER_SEQUENCE_NUMBER",
                    "StartingSequenceNumber": cursor.last_seen,
                }
            )
        except ClientError as error:  # ResourceNotFoundException only (passthrough)
            raise self._error(operation, 1, str(error)) from error


def _openers_passthrough(position: Mapping[str, Any]) -> frozenset[str]:
    """Error codes an opener raises as they came, for :meth:`ShardReader._open` to judge."""
    if position["ShardIteratorType"] == "AT_SEQUENCE_NUMBER":
        return _REJECTABLE | _NOT_FOUND
    return _NOT_FOUND


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
            self._settle_start(server_ms, f"before record {sequence_number}")
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
            self._settle_start(server_ms, "and the shard holds none now")
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
            f"({self.start.kind}): records that arrived after that read and {seen} may have "
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
