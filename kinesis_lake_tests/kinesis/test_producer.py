"""producer.py: batching, partial failures, retries, pacing, sample events."""

from __future__ import annotations

import json
from collections import Counter, defaultdict

import pytest

from kinesis_lake.kinesis.client import kinesis_client
from kinesis_lake.kinesis.producer import PutRecordsError, put_records, sample_events
from kinesis_lake.kinesis.retry import RetryPolicy
from kinesis_lake_tests.kinesis.fault_proxy import FaultProxy
from kinesis_lake_tests.kinesis.helpers import read_stream

FAST = RetryPolicy(max_retries=4, base_delay_s=0.001, max_delay_s=0.01)


def _stored(client, stream) -> list[tuple[str, bytes]]:
    return [(r.partition_key, r.data) for rs in read_stream(client, stream).values() for r in rs]


def test_everything_sent_is_read_back_once_in_key_order(client, new_stream) -> None:
    stream = new_stream(client, 4)
    sent = sample_events(600, seed=3, start_ms=1_700_000_000_000)
    summary = put_records(client, stream, sent, batch_size=250)
    assert (summary.sent, summary.calls, summary.failed, summary.retried_entries) == (600, 3, 0, 0)

    shards = read_stream(client, stream)
    stored = [(r.partition_key, r.data) for records in shards.values() for r in records]
    assert Counter(stored) == Counter(sent)
    assert sum(1 for records in shards.values() if records) > 1  # keys spread over shards
    for records in shards.values():  # within a shard, each key keeps the order it was sent in
        by_key: dict[str, list[bytes]] = defaultdict(list)
        for r in records:
            by_key[r.partition_key].append(r.data)
        for key, data in by_key.items():
            assert data == [d for k, d in sent if k == key]


def test_partial_failures_resend_only_the_failed_entries(
    client, new_stream, proxy: FaultProxy
) -> None:
    stream = new_stream(client, 2)
    sent = [(f"key-{i % 3}", f"event-{i}".encode()) for i in range(10)]
    proxy.inject("PutRecords", "partial_put", 2)
    summary = put_records(kinesis_client(proxy.url), stream, sent, retry=FAST)
    # 10 sent: 5 fail; 5 re-sent: 3 fail; 3 re-sent: all succeed.
    assert (summary.sent, summary.failed, summary.retried_entries, summary.calls) == (10, 8, 8, 3)
    assert proxy.counts[("PutRecords", "partial_put")] == 2
    assert Counter(_stored(client, stream)) == Counter(sent)


def test_whole_call_failures_are_retried(client, new_stream, proxy: FaultProxy) -> None:
    stream = new_stream(client)
    sent = [("k", f"e{i}".encode()) for i in range(7)]
    proxy.inject("PutRecords", "server_error", 1)
    proxy.inject("PutRecords", "throttle", 1)
    summary = put_records(kinesis_client(proxy.url), stream, sent, retry=FAST)
    assert (summary.sent, summary.failed, summary.retried_entries, summary.calls) == (7, 0, 14, 3)
    assert _stored(client, stream) == sent


def test_exhausted_retries_raise_with_stream_count_and_code(
    client, new_stream, proxy: FaultProxy
) -> None:
    stream = new_stream(client)
    proxy.inject("PutRecords", "partial_put", 1)
    proxy.inject("PutRecords", "throttle", 10)
    sent = [("k", f"e{i}".encode()) for i in range(4)]
    with pytest.raises(PutRecordsError) as raised:
        put_records(kinesis_client(proxy.url), stream, sent, retry=RetryPolicy(2, 0.001, 0.01))
    error = raised.value
    assert (error.failed_entries, error.last_error_code) == (
        2,
        "ProvisionedThroughputExceededException",
    )
    assert stream in str(error) and "2 entries not written" in str(error)
    assert (error.summary.sent, error.summary.calls) == (2, 3)
    assert _stored(client, stream) == sent[2:]


def test_non_retryable_errors_fail_at_once(client) -> None:
    with pytest.raises(PutRecordsError, match="ResourceNotFoundException") as raised:
        put_records(client, "no-such-stream", [("k", b"x")], retry=FAST)
    assert raised.value.summary.calls == 1


def test_batches_respect_the_five_mib_request_limit(kinesalite, new_stream) -> None:
    client = kinesis_client(kinesalite.url)
    stream = new_stream(client)
    summary = put_records(client, stream, [(f"k{i}", b"x" * 1_000_000) for i in range(12)])
    assert (summary.sent, summary.calls) == (12, 3)  # 5 + 5 + 2


def test_oversized_entry_is_rejected_before_sending(client) -> None:
    with pytest.raises(ValueError, match="at most 1048576"):
        put_records(client, "any", [("k", b"x" * (1024 * 1024))])


def test_rate_limit_paces_batches(client, new_stream) -> None:
    stream = new_stream(client)
    sleeps: list[float] = []
    summary = put_records(client, stream, [("k", b"x")] * 250, rate_per_s=100, sleep=sleeps.append)
    assert (summary.sent, summary.calls) == (250, 3)  # batches of 100, 100, 50
    # The fake sleep does not let time pass, so each wait reaches to its batch's slot on
    # a schedule starting at the first call: 100 entries -> 1 s, 200 entries -> 2 s.
    assert len(sleeps) == 2
    assert 0 < sleeps[0] <= 1.0 < sleeps[1] <= 2.0


def test_sample_events_are_deterministic_and_well_formed() -> None:
    first = sample_events(50, seed=11, start_ms=1_700_000_000_000)
    assert first == sample_events(50, seed=11, start_ms=1_700_000_000_000)
    assert first != sample_events(50, seed=12, start_ms=1_700_000_000_000)
    for key, data in first:
        event = json.loads(data)
        assert key == event["user_id"] and key.startswith("user-")
        assert event["event_type"] in {"click", "page_view", "purchase", "profile_update"}
        if event["event_type"] == "profile_update":
            assert event["version"] in range(1, 6) and event["op"] in {"update", "delete"}
        assert isinstance(event["amount"], float)
        assert event["event_time"].startswith("2023-11-14T22:") and event["event_time"].endswith(
            "Z"
        )
        assert len(event["event_time"]) == len("2023-11-14T22:13:20.000Z")
        assert all(isinstance(event[k], str) for k in ("event_id", "key1", "key2", "key3"))
    assert len({json.loads(d)["event_id"] for _, d in first}) == 50
    profiles = [json.loads(d) for _, d in sample_events(600, seed=3)]
    updates = [e for e in profiles if e["event_type"] == "profile_update"]
    assert {e["op"] for e in updates} == {"update", "delete"}, "the demo's upsert sees deletes"


def test_malformed_events_cycle_through_the_three_kinds() -> None:
    events = sample_events(12, malformed_every=3, seed=1, start_ms=0)
    kinds = []
    for index, (_, data) in enumerate(events):
        try:
            event = json.loads(data)
        except json.JSONDecodeError:
            kinds.append((index, "invalid-json"))
            continue
        if event.get("amount") == "lots":
            kinds.append((index, "wrong-type"))
        elif "event_id" not in event:
            kinds.append((index, "missing-id"))
    assert kinds == [
        (2, "invalid-json"),
        (5, "wrong-type"),
        (8, "missing-id"),
        (11, "invalid-json"),
    ]
    assert sample_events(5, malformed_every=0) and all(
        isinstance(json.loads(d)["amount"], float) for _, d in sample_events(30, seed=2)
    )
