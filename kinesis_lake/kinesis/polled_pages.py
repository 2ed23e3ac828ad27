"""A shard's pages by polling: GetRecords, one call ahead of the reader, spaced by the
minimum interval, renewing iterators that expire.

Every replay reads this way (asked again from the same start, GetRecords returns the
same pinned range), and so does every read without an enhanced fan-out consumer.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from botocore.exceptions import ClientError

from kinesis_lake.kinesis.pages import (
    Page,
    ReadStart,
    ending_if_gone,
    open_read,
    opener_passthrough,
    reopen_read,
)
from kinesis_lake.kinesis.server_time import server_ms
from kinesis_lake.kinesis.shard_calls import ReadCounts, ShardCalls


class _ReadAbandonedError(RuntimeError):
    """A call made ahead whose page the caller will never ask for."""


class PolledPages:
    """GetRecords pages of one shard, for one reader's reads one after another.

    The interval between calls holds across the reader's reads, as the shard's limit of
    five GetRecords per second does.
    """

    def __init__(
        self,
        calls: ShardCalls,
        *,
        max_records_per_call: int,
        min_call_interval_s: float,
        clock: Callable[[], float],
    ) -> None:
        if not 1 <= max_records_per_call <= 10_000:
            raise ValueError("max_records_per_call must be within 1..10000 (the GetRecords cap)")
        self._calls = calls
        self._max_per_call = max_records_per_call
        self._min_interval_s = min_call_interval_s
        self._clock = clock
        self._last_call_at: float | None = None

    @ending_if_gone
    def pages(
        self,
        cursor: ReadStart,
        counts: ReadCounts,
        max_records: int,
        reads_past: Callable[[Page], bool],
    ) -> Generator[Page]:
        """GetRecords pages from ``cursor.start``, renewing expired iterators, until the
        caller stops asking or the shard ends (then, if it is gone from the stream, on an
        empty end page).

        While the caller works on a page it will read past (``reads_past``), the next
        page is already being fetched: the shard's server works while Spark's worker
        decodes and hands over the previous answer, instead of one waiting for the other.
        One call is in flight at a time, still spaced by the minimum interval, and a
        page the caller stops on is not followed by a call it would not use. Errors of
        the call made ahead surface when the caller asks for its page, so an expired
        iterator is renewed after the records the caller has taken, as without it.
        ``max_records`` less ``counts.records_read`` bounds the size of each page asked for.
        """
        calls = self._calls

        def iterator_at(position: dict[str, Any]) -> str:
            return self._iterator(counts, **position)

        iterator = open_read(calls, cursor, iterator_at, "GetShardIterator")
        expirations_in_a_row = 0
        ahead: tuple[int, Future[Mapping[str, Any]]] | None = None  # (Limit, answer)
        # Set once the caller is gone: a call made ahead then stops before its next
        # attempt, instead of spending the shard's calls and retries on a page no one takes.
        abandoned = threading.Event()
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="read-ahead") as fetcher:

            def fetch(iterator: str, limit: int) -> tuple[int, Future[Mapping[str, Any]]]:
                return limit, fetcher.submit(self._get_records, iterator, limit, counts, abandoned)

            while True:
                if ahead is None:
                    ahead = fetch(
                        iterator, min(self._max_per_call, max_records - counts.records_read)
                    )
                (limit, answer), ahead = ahead, None
                try:
                    response = answer.result()
                except ClientError as error:  # ExpiredIteratorException only (passthrough)
                    expirations_in_a_row += 1
                    if expirations_in_a_row > calls.retry.max_retries:
                        raise calls.error("GetRecords", expirations_in_a_row, str(error)) from error
                    counts.iterator_renewals += 1
                    iterator = reopen_read(calls, cursor, iterator_at, "GetShardIterator")
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
                    self._max_per_call, max_records - counts.records_read - len(page.records)
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

    def _iterator(self, counts: ReadCounts, **position: Any) -> str:
        calls = self._calls
        response = calls.call(
            "GetShardIterator",
            lambda: calls.client.get_shard_iterator(
                StreamName=calls.stream_name, ShardId=calls.shard_id, **position
            ),
            counts,
            passthrough=opener_passthrough(position),
        )
        return str(response["ShardIterator"])

    def _get_records(
        self, iterator: str, limit: int, counts: ReadCounts, abandoned: threading.Event
    ) -> Mapping[str, Any]:
        calls = self._calls

        def request() -> Mapping[str, Any]:
            # Kinesis allows 5 GetRecords calls per second per shard, shared by all readers:
            # spacing our own calls avoids self-inflicted throttling. A reader that is behind
            # keeps to one call per interval (the default 200 ms is the whole 5/s), so a
            # larger minCallIntervalMs is what leaves room for other consumers.
            if self._last_call_at is not None:
                wait = self._last_call_at + self._min_interval_s - self._clock()
                if wait > 0:
                    calls.sleep(wait)
            if abandoned.is_set():  # checked before every attempt, after the wait
                raise _ReadAbandonedError()
            self._last_call_at = self._clock()
            counts.calls += 1
            return calls.client.get_records(ShardIterator=iterator, Limit=limit)

        return calls.call(
            "GetRecords",
            request,
            counts,
            passthrough=frozenset({"ExpiredIteratorException"}),
        )
