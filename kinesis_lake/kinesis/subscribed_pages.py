"""A shard's pages by enhanced fan-out: the events of SubscribeToShard, subscription after
subscription.

Kinesis ends each subscription after five minutes, and one can break at any time: the
read subscribes again right after the last record it saw, and gives up only when
subscriptions keep ending without a new record. Only a read ahead comes this way; a
replay of a pinned range polls (:mod:`~kinesis_lake.kinesis.polled_pages`).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from kinesis_lake.kinesis.pages import (
    Opener,
    Page,
    ReadStart,
    ending_if_gone,
    open_read,
    opener_passthrough,
    reopen_read,
)
from kinesis_lake.kinesis.retry import is_retryable
from kinesis_lake.kinesis.shard_calls import ReadCounts, ShardCalls
from kinesis_lake.kinesis.subscription import (
    BUSY_RETRIES,
    BusyWaits,
    Subscription,
    open_when_free,
)

_SUBSCRIBE = "SubscribeToShard"


class SubscribedPages:
    """SubscribeToShard events of one shard for one consumer, as pages."""

    def __init__(self, calls: ShardCalls, consumer_arn: str, *, wait_if_held: bool = True) -> None:
        self._calls = calls
        self._consumer_arn = consumer_arn
        self._wait_if_held = wait_if_held

    @ending_if_gone
    def pages(self, cursor: ReadStart, counts: ReadCounts) -> Generator[Page]:
        """Events of SubscribeToShard from ``cursor.start``, subscribing again right after
        the last record seen when a subscription ends (Kinesis ends each after 5 minutes)
        or breaks, until the caller stops asking (or, if the shard is gone from the
        stream, on an empty end page).

        Subscribing again without a new record in between counts against ``maxRetries``:
        an endpoint that ends or breaks every subscription early would otherwise keep the
        task subscribing forever.
        """
        calls = self._calls
        # Without waiting, a refusal is raised (``subscription_held`` tells it) until a
        # record came: the caller reads the shard another way, from its start. After a
        # record, a resubscription waits as any does.
        waits = BusyWaits() if self._wait_if_held else BusyWaits(left=0)
        subscribe_at = self._subscriptions(counts, waits)
        subscription: Subscription = open_read(calls, cursor, subscribe_at, _SUBSCRIBE)
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
                        raise calls.error(_SUBSCRIBE, stalled + 1, detail) from error
                    counts.retries += 1
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
                    if stalled > calls.retry.max_retries:
                        raise calls.error(
                            _SUBSCRIBE,
                            stalled,
                            f"{stalled} subscriptions in a row ended or broke before a new "
                            f"record (the last: {why})",
                        )
                    calls.sleep(calls.retry.delay(stalled - 1, calls.rng))
                else:
                    stalled, waits.left = 0, BUSY_RETRIES
                progress_mark, why = cursor.last_seen, "it ended"
                subscription.close()
                counts.iterator_renewals += 1
                subscription = reopen_read(calls, cursor, subscribe_at, _SUBSCRIBE)
        finally:
            subscription.close()

    def _subscriptions(self, counts: ReadCounts, waits: BusyWaits) -> Opener:
        """Opens SubscribeToShard at a position, with this reader's retries and errors."""
        calls = self._calls
        consumer_arn = self._consumer_arn

        def subscribe_at(position: dict[str, Any]) -> Subscription:
            def count_call() -> None:
                counts.calls += 1

            def request() -> Subscription:
                return open_when_free(
                    calls.client,
                    consumer_arn,
                    calls.shard_id,
                    position,
                    sleep=calls.sleep,
                    rng=calls.rng,
                    on_call=count_call,
                    waits=waits,
                )

            return calls.call(
                _SUBSCRIBE,
                request,
                counts,
                passthrough=opener_passthrough(position),
            )

        return subscribe_at
