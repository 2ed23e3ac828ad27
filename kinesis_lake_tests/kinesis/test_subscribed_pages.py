"""SubscribedPages, and what an enhanced fan-out read does with what AWS sends and
kinesis-mock never does, against a scripted SubscribeToShard endpoint
(``scripted_subscriptions``)."""

from __future__ import annotations

from contextlib import closing

import pytest

from kinesis_lake.kinesis.client import kinesis_client
from kinesis_lake.kinesis.retry import RetryPolicy
from kinesis_lake.kinesis.shard_calls import ShardCalls
from kinesis_lake.kinesis.shard_reader import ReadCursor, ShardReader
from kinesis_lake.kinesis.start_positions import StartPosition
from kinesis_lake.kinesis.subscribed_pages import SubscribedPages
from kinesis_lake_tests.kinesis.helpers import Counts
from kinesis_lake_tests.kinesis.scripted_subscriptions import (
    Answer,
    Script,
    event,
    failure,
    record,
    scripted_endpoint,
)

SHARD = "shardId-000000000000"
CONSUMER = "arn:aws:kinesis:us-east-1:1:stream/stream/consumer/c:1"


def _read(script: Script, start: StartPosition | None = None):
    with scripted_endpoint(script) as url:
        reader = ShardReader(
            kinesis_client(url, "us-east-1", timeout_s=2),
            "stream",
            SHARD,
            consumer_arn=CONSUMER,
            retry=RetryPolicy(max_retries=2, base_delay_s=0.01),
        )
        pages = reader.read(start or StartPosition.trim_horizon(), max_records=100)
        sequence_numbers = [r.sequence_number for page in pages for r in page]
    assert reader.outcome is not None
    return sequence_numbers, reader.outcome


@pytest.mark.parametrize(
    "broken",
    [
        pytest.param(Answer([event([record(1), record(2)], 5000)], "drop"), id="dropped"),
        pytest.param(Answer([event([record(1), record(2)], 5000)], "stall"), id="stalled"),
        pytest.param(
            Answer([event([record(1), record(2)], 5000), failure("InternalFailureException")]),
            id="failure-event",
        ),
    ],
)
def test_a_subscription_broken_after_progress_resumes_right_after_its_last_record(broken):
    script = Script([broken, Answer([event([record(3)], 0)])])
    sequence_numbers, outcome = _read(script)
    assert sequence_numbers == ["1", "2", "3"]
    assert script.requests[1]["StartingPosition"] == {
        "Type": "AFTER_SEQUENCE_NUMBER",
        "SequenceNumber": "2",
    }
    assert (outcome.iterator_renewals, outcome.retries, outcome.stopped_by) == (1, 1, "caught_up")


def test_a_subscription_that_ends_behind_the_tip_is_followed_by_the_next():
    """Kinesis ends every subscription after 5 minutes, wherever the reader is."""
    script = Script([Answer([event([record(1)], 5000)]), Answer([event([record(2)], 0)])])
    sequence_numbers, outcome = _read(script)
    assert sequence_numbers == ["1", "2"]
    assert (outcome.iterator_renewals, outcome.retries) == (1, 0)


def test_an_event_at_the_tip_holding_only_the_resume_record_ends_the_read():
    """An idle shard: the resume record alone, at MillisBehindLatest 0, then silence. The
    read must end there, not wait for an event that may not come."""
    script = Script([Answer([event([record(5)], 0)], "stall")])
    sequence_numbers, outcome = _read(script, StartPosition.after("5"))
    assert sequence_numbers == []
    assert (outcome.stopped_by, outcome.iterator_renewals, outcome.data_loss) == (
        "caught_up",
        0,
        None,
    )


def test_an_event_without_millis_behind_latest_is_not_taken_for_the_tip():
    script = Script([Answer([event([record(1)], None), event([record(2)], 0)])])
    sequence_numbers, outcome = _read(script)
    assert sequence_numbers == ["1", "2"]
    assert outcome.stopped_by == "caught_up"


def test_child_shards_end_the_read_at_the_shards_end():
    """A split or merge: the last event of the parent has no ContinuationSequenceNumber
    and names the children."""
    children = [{"ShardId": "shardId-000000000001", "ParentShards": ["shardId-000000000000"]}]
    script = Script(
        [Answer([event([record(7)], 0, ContinuationSequenceNumber=None, ChildShards=children)])]
    )
    sequence_numbers, outcome = _read(script)
    assert sequence_numbers == ["7"]
    assert (outcome.shard_ended, outcome.stopped_by) == (True, "shard_end")


def test_pages_are_the_events_and_the_next_subscription_opens_after_the_records_taken():
    """Each event is a page (it may be the tip only at MillisBehindLatest 0, it ends the
    shard without a ContinuationSequenceNumber); a subscription that ends is followed by
    one opened right after the last record the caller took (the cursor), not the last one
    pushed."""
    children = [{"ShardId": "shardId-000000000001", "ParentShards": [SHARD]}]
    script = Script(
        [
            Answer([event([record(1), record(2)], 5000)]),
            Answer([event([record(3)], 0, ContinuationSequenceNumber=None, ChildShards=children)]),
        ]
    )
    cursor, counts = ReadCursor(StartPosition.trim_horizon(), None, None), Counts()
    with scripted_endpoint(script) as url:
        calls = ShardCalls(
            kinesis_client(url, "us-east-1", timeout_s=2),
            "stream",
            SHARD,
            retry=RetryPolicy(max_retries=2, base_delay_s=0.01),
            sleep=lambda _seconds: None,
        )
        pages = []
        with closing(SubscribedPages(calls, CONSUMER).pages(cursor, counts)) as events:
            for page in events:
                pages.append(page)
                for taken in page.records[:1]:  # the caller takes one record of each page
                    cursor.consumed(taken["SequenceNumber"])
                if page.shard_ended:
                    break
    assert [
        ([r["SequenceNumber"] for r in page.records], page.millis_behind, page.may_be_tip)
        for page in pages
    ] == [(["1", "2"], 5000, False), (["3"], 0, True)]
    assert [page.shard_ended for page in pages] == [False, True]
    assert all(page.server_ms is not None and page.gone is None for page in pages)
    assert [request["StartingPosition"] for request in script.requests] == [
        {"Type": "TRIM_HORIZON"},
        {"Type": "AFTER_SEQUENCE_NUMBER", "SequenceNumber": "1"},
    ]
    assert (counts.calls, counts.iterator_renewals, counts.retries) == (2, 1, 0)
