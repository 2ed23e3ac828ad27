"""PolledPages against real endpoints: GetRecords one call ahead of its caller, no call
the caller will not use, and calls spaced across one reader's reads."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Generator
from contextlib import closing

import pytest

from kinesis_lake.kinesis.pages import Page
from kinesis_lake.kinesis.polled_pages import PolledPages
from kinesis_lake.kinesis.retry import RetryPolicy
from kinesis_lake.kinesis.shard_calls import ShardCalls
from kinesis_lake.kinesis.shard_reader import ReadCursor
from kinesis_lake.kinesis.start_positions import StartPosition
from kinesis_lake_tests.kinesis.helpers import Counts, entries, put

SHARD = "shardId-000000000000"
FAST = RetryPolicy(max_retries=3, base_delay_s=0.001, max_delay_s=0.01)


def _polled(
    client,
    stream: str,
    *,
    max_records_per_call: int = 10,
    min_call_interval_s: float = 0,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> PolledPages:
    calls = ShardCalls(client, stream, SHARD, retry=FAST, sleep=sleep)
    return PolledPages(
        calls,
        max_records_per_call=max_records_per_call,
        min_call_interval_s=min_call_interval_s,
        clock=clock,
    )


def _cursor() -> ReadCursor:
    return ReadCursor(StartPosition.trim_horizon(), None, None)


def _every_page(page: Page) -> bool:
    return True


def _stops_at_a_short_page(page: Page) -> bool:
    return not page.may_be_tip


def _to_the_tip(pages: Generator[Page], counts: Counts) -> list[Page]:
    """Take pages as a reader would, counting their records, up to one that may be the
    tip; the pages are left open, so a call made ahead of that one can still be seen."""
    taken = []
    for page in pages:
        taken.append(page)
        counts.records_read += len(page.records)
        if page.may_be_tip:
            return taken
    return taken


class _ClockReadings:
    """The monotonic clock, counting its readings: a GetRecords request reads it once if
    it is the first, twice if not (the wait for the interval, then the call's time)."""

    def __init__(self, signal_at: int = 0) -> None:
        self.count = 0
        self.reached = threading.Event()
        self._signal_at = signal_at

    def __call__(self) -> float:
        self.count += 1
        if self._signal_at and self.count >= self._signal_at:
            self.reached.set()
        return time.monotonic()


def test_the_next_page_is_fetched_while_the_caller_works_on_this_one(client, new_stream) -> None:
    """The shard's server and the caller (decoding, Arrow, Spark's hand-over) work at the
    same time: the second GetRecords starts while the first page is still in the
    caller's hands, and the records come out the same."""
    stream = new_stream(client)
    put(client, stream, entries(25))
    clock = _ClockReadings(signal_at=2)
    counts = Counts()
    pages = _polled(client, stream, clock=clock).pages(_cursor(), counts, 100, _every_page)
    with closing(pages):
        first = next(pages)
        assert clock.reached.wait(10), "no GetRecords was made ahead of the caller"
        counts.records_read += len(first.records)
        taken = [first, *_to_the_tip(pages, counts)]
    assert [r["Data"] for page in taken for r in page.records] == [
        f"r{i}".encode() for i in range(25)
    ]
    assert [len(page.records) for page in taken] == [10, 10, 5]


def test_a_page_the_caller_stops_on_is_followed_by_no_call(client, new_stream) -> None:
    """The caller says which pages it will read past: after the short page it stops on,
    no GetRecords is made for a page it would not take; a caller that reads past every
    page has the next one asked for while it holds the short one. (Closing the pages
    waits for a request made ahead, which reads the clock before anything else.)"""
    stream = new_stream(client)
    put(client, stream, entries(25))
    readings = {}
    for reads_past in (_stops_at_a_short_page, _every_page):
        clock, counts = _ClockReadings(), Counts()
        pages = _polled(client, stream, clock=clock).pages(_cursor(), counts, 100, reads_past)
        with closing(pages):
            assert [len(page.records) for page in _to_the_tip(pages, counts)] == [10, 10, 5]
        readings[reads_past.__name__] = clock.count
    # Three requests read the clock five times; a fourth, made ahead, at least once more.
    assert readings["_stops_at_a_short_page"] == 5
    assert readings["_every_page"] >= 6


def test_no_page_asks_for_more_than_the_read_may_still_take(client, new_stream) -> None:
    stream = new_stream(client)
    put(client, stream, entries(25))
    counts = Counts()
    pages = _polled(client, stream).pages(_cursor(), counts, 13, _every_page)
    with closing(pages):
        first = next(pages)
        counts.records_read += len(first.records)
        second = next(pages)
    assert (len(first.records), len(second.records)) == (10, 3)
    assert counts.calls == 2


class _CountingClient:
    """A real client that counts the GetRecords requests it sends."""

    def __init__(self, client) -> None:
        self._client = client
        self.get_records_calls = 0

    def __getattr__(self, name: str):
        return getattr(self._client, name)

    def get_records(self, **kwargs):
        self.get_records_calls += 1
        return self._client.get_records(**kwargs)


def test_a_call_made_ahead_is_dropped_when_the_caller_stops_before_taking_its_page(
    client, new_stream
) -> None:
    """A caller that stops mid-read (its task failed, say) leaves the call made ahead
    waiting out the shard's call interval: it must not be sent, nor retried, once the
    read is closed, for a page no one will take."""
    stream = new_stream(client)
    put(client, stream, entries(25))
    counting = _CountingClient(client)
    polled = _polled(counting, stream, min_call_interval_s=1.0)
    pages = polled.pages(_cursor(), Counts(), 100, _every_page)
    assert len(next(pages).records) == 10
    pages.close()  # while the second call waits out the interval
    assert counting.get_records_calls == 1


def test_calls_are_spaced_by_the_minimum_interval_across_reads(client, new_stream) -> None:
    """One reader reads a shard batch after batch: the first call of a read waits out
    the interval after the last call of the read before, as every later call does."""
    stream = new_stream(client)
    put(client, stream, entries(3))
    sleeps: list[float] = []
    polled = _polled(
        client,
        stream,
        max_records_per_call=1,
        min_call_interval_s=0.2,
        sleep=sleeps.append,
        clock=lambda: 100.0,  # time stands still, so every call must wait the full interval
    )
    for _ in range(2):
        counts = Counts()
        pages = polled.pages(_cursor(), counts, 2, _every_page)
        with closing(pages):
            for page in pages:
                counts.records_read += len(page.records)
                if counts.records_read == 2:
                    break
        assert counts.calls == 2
    assert sleeps == [pytest.approx(0.2)] * 3
