"""Enhanced fan-out (SubscribeToShard) against kinesis-mock, the one local endpoint that
serves it, over plain HTTP on 127.0.0.1.

Every check compares what a subscription returned with what GetRecords returns for the
same shard, so "the same records" is never taken on trust from the reader under test.
What kinesis-mock does not do (report ChildShards at a shard's end) is in docs/efo.md.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator

import pytest

from kinesis_lake.kinesis.client import KinesisClient, kinesis_client
from kinesis_lake.kinesis.consumers import (
    MAX_CONSUMERS,
    Consumer,
    ConsumerError,
    deregister_consumer,
    ensure_consumer,
)
from kinesis_lake.kinesis.kinesis_mock import KinesisMockEndpoint
from kinesis_lake.kinesis.kpl import aggregate
from kinesis_lake.kinesis.records import KinesisRecord
from kinesis_lake.kinesis.retry import RetryPolicy
from kinesis_lake.kinesis.shard_calls import ShardReadError
from kinesis_lake.kinesis.shard_reader import ShardReader
from kinesis_lake.kinesis.start_positions import StartPosition
from kinesis_lake.kinesis.streams import describe_stream, ensure_stream, list_shards
from kinesis_lake.kinesis.subscription import (
    BUSY_RETRIES,
    INITIAL_RESPONSE,
    Subscription,
    WithInitialResponse,
    event_message,
)
from kinesis_lake_tests.kinesis.fault_proxy import FaultProxy
from kinesis_lake_tests.kinesis.helpers import entries, put, read_shard


@pytest.fixture
def client(kinesis_mock_endpoint: KinesisMockEndpoint) -> KinesisClient:
    return kinesis_client(kinesis_mock_endpoint.url, "us-east-1", timeout_s=10)


@pytest.fixture
def stream(client: KinesisClient) -> str:
    name = f"efo-{uuid.uuid4().hex[:10]}"
    ensure_stream(client, name, 1)
    return name


@pytest.fixture
def consumer(client: KinesisClient, stream: str) -> Iterator[Consumer]:
    arn = describe_stream(client, stream).arn
    registered = ensure_consumer(client, arn, f"c-{uuid.uuid4().hex[:8]}")
    yield registered
    deregister_consumer(client, registered)


def _subscribed_read(
    client: KinesisClient, stream: str, consumer: Consumer, **read_args
) -> tuple[list[KinesisRecord], ShardReader]:
    shard_id = list_shards(client, stream)[0].shard_id
    reader = ShardReader(client, stream, shard_id, consumer_arn=consumer.arn)
    start = read_args.pop("start", StartPosition.trim_horizon())
    read_args.setdefault("max_records", 100_000)
    return [r for page in reader.read(start, **read_args) for r in page], reader


def test_a_subscription_returns_what_get_records_returns(
    client: KinesisClient, stream: str, consumer: Consumer
) -> None:
    put(client, stream, entries(25))
    kpl = [("k", f"agg{i}".encode()) for i in range(4)]
    client.put_record(StreamName=stream, PartitionKey="k", Data=aggregate(kpl))
    put(client, stream, entries(5, prefix="tail"))

    subscribed, reader = _subscribed_read(client, stream, consumer)
    polled = read_shard(client, stream, list_shards(client, stream)[0].shard_id)

    assert len(polled) == 34  # 30 plain records and an aggregate of 4 user records
    assert subscribed == polled
    assert [r.data for r in subscribed if r.aggregated] == [data for _, data in kpl]
    outcome = reader.outcome
    assert outcome is not None
    assert (outcome.stopped_by, outcome.caught_up, outcome.records_read) == ("caught_up", True, 31)
    assert outcome.tip_ms is not None and outcome.tip_ms >= subscribed[-1].arrival_ms - 1000


def test_a_limited_read_resumes_after_its_last_record_and_replays_exactly(
    client: KinesisClient, stream: str, consumer: Consumer
) -> None:
    put(client, stream, entries(30))
    first, first_reader = _subscribed_read(client, stream, consumer, max_records=12)
    assert first_reader.outcome is not None and first_reader.outcome.stopped_by == "limit"
    last = first_reader.outcome.last_sequence_number
    assert last == first[-1].sequence_number

    # The next micro-batch subscribes right after the first one's subscription closed:
    # the consumer's shard is still held for a few seconds (ResourceInUseException), and
    # the reader waits it out instead of failing the task.
    rest, rest_reader = _subscribed_read(client, stream, consumer, start=StartPosition.after(last))
    assert rest_reader.outcome is not None and rest_reader.outcome.data_loss is None
    assert [r.data for r in first + rest] == [f"r{i}".encode() for i in range(30)]

    # A replay of the pinned first range returns it exactly, whatever arrived since.
    put(client, stream, entries(3, prefix="late"))
    replay, _ = _subscribed_read(client, stream, consumer, max_records=12, end_sequence_number=last)
    assert replay == first


def test_a_resume_point_that_is_not_in_the_shard_is_reported_as_data_loss(
    client: KinesisClient, stream: str, consumer: Consumer
) -> None:
    sequence_numbers = put(client, stream, entries(3))
    # A resume record the shard no longer holds: what a checkpoint older than retention
    # finds. Kinesis then starts at the next record, and nothing proves the gap empty.
    missing = str(int(sequence_numbers[0]) - 1)
    records, reader = _subscribed_read(client, stream, consumer, start=StartPosition.after(missing))
    assert [r.data for r in records] == [b"r0", b"r1", b"r2"]
    assert reader.outcome is not None and reader.outcome.data_loss is not None
    assert missing in reader.outcome.data_loss


@pytest.mark.parametrize(
    ("faults", "renewals_and_retries"),
    [
        pytest.param([("end_subscription", 2), ("server_error", 1)], (2, 1), id="ended-5xx"),
        # Inside the event stream urllib3, not botocore, reads: its error must count as
        # transient like botocore's own.
        pytest.param([("drop_subscription", 1)], (0, 1), id="dropped"),
        pytest.param([("failure_event", 1)], (0, 1), id="failure-event"),
    ],
)
def test_a_subscription_that_ends_fails_or_drops_is_opened_again_at_the_same_place(
    kinesis_mock_endpoint: KinesisMockEndpoint,
    client: KinesisClient,
    stream: str,
    consumer: Consumer,
    faults: list[tuple[str, int]],
    renewals_and_retries: tuple[int, int],
) -> None:
    """Kinesis ends every subscription after 5 minutes, and connections drop."""
    put(client, stream, entries(20))
    proxy = FaultProxy(kinesis_mock_endpoint.url).start()
    try:
        for kind, times in faults:
            proxy.inject("SubscribeToShard", kind, times=times)
        through_proxy = kinesis_client(proxy.url, "us-east-1", timeout_s=10)
        records, reader = _subscribed_read(through_proxy, stream, consumer)
    finally:
        proxy.stop()
    assert [r.data for r in records] == [f"r{i}".encode() for i in range(20)]
    assert [proxy.counts[("SubscribeToShard", kind)] for kind, _ in faults] == [
        times for _, times in faults
    ]
    assert reader.outcome is not None
    assert (reader.outcome.iterator_renewals, reader.outcome.retries) == renewals_and_retries


def test_subscriptions_that_always_end_at_once_fail_the_read_naming_the_shard(
    kinesis_mock_endpoint: KinesisMockEndpoint,
    client: KinesisClient,
    stream: str,
    consumer: Consumer,
) -> None:
    proxy = FaultProxy(kinesis_mock_endpoint.url).start()
    try:
        proxy.inject("SubscribeToShard", "end_subscription", times=1000)
        shard_id = list_shards(client, stream)[0].shard_id
        reader = ShardReader(
            kinesis_client(proxy.url, "us-east-1", timeout_s=10),
            stream,
            shard_id,
            retry=RetryPolicy(max_retries=2),
            consumer_arn=consumer.arn,
        )
        with pytest.raises(ShardReadError, match="3 subscriptions in a row ended") as raised:
            list(reader.read(StartPosition.trim_horizon(), max_records=10))
    finally:
        proxy.stop()
    assert raised.value.shard_id == shard_id and raised.value.operation == "SubscribeToShard"
    assert proxy.counts[("SubscribeToShard", "end_subscription")] == 3


def test_a_held_shard_is_waited_out_on_one_budget_per_read_not_one_per_subscription(
    kinesis_mock_endpoint: KinesisMockEndpoint,
    client: KinesisClient,
    stream: str,
    consumer: Consumer,
) -> None:
    """A shard held by another subscription of the same consumer (another query reading
    under its name) is waited out BUSY_RETRIES times per read. Subscriptions that end
    empty in between must not each get the whole budget again: 20 waits times
    maxRetries would keep a task spinning for minutes where it should fail."""
    proxy = FaultProxy(kinesis_mock_endpoint.url).start()
    try:
        for _ in range(4):
            proxy.inject("SubscribeToShard", "in_use", times=15)
            proxy.inject("SubscribeToShard", "end_subscription", times=1)
        slept: list[float] = []
        reader = ShardReader(
            kinesis_client(proxy.url, "us-east-1", timeout_s=10),
            stream,
            list_shards(client, stream)[0].shard_id,
            retry=RetryPolicy(max_retries=3),
            consumer_arn=consumer.arn,
            sleep=slept.append,
        )
        with pytest.raises(ShardReadError, match="ResourceInUseException") as raised:
            list(reader.read(StartPosition.trim_horizon(), max_records=10))
    finally:
        proxy.stop()
    assert raised.value.operation == "SubscribeToShard"
    # 15 waits, an empty subscription, 5 waits left and the 21st refusal is raised.
    assert proxy.counts[("SubscribeToShard", "in_use")] == BUSY_RETRIES + 1
    assert len(slept) == BUSY_RETRIES + 1  # the 20 waits and one before reopening
    assert proxy.counts[("SubscribeToShard", "end_subscription")] == 1


def test_stopping_the_fault_proxy_ends_the_subscriptions_it_relays(
    kinesis_mock_endpoint: KinesisMockEndpoint,
    client: KinesisClient,
    stream: str,
    consumer: Consumer,
) -> None:
    """A relayed subscription waits on its upstream between events, for up to the 5
    minutes a subscription lives: a stopped proxy that left it open would keep feeding a
    reader that the test believes cut off, and keep its thread and sockets."""
    put(client, stream, entries(2))
    proxy = FaultProxy(kinesis_mock_endpoint.url).start()
    subscription = Subscription.open(
        kinesis_client(proxy.url, "us-east-1", timeout_s=10),
        consumer.arn,
        list_shards(client, stream)[0].shard_id,
        {"ShardIteratorType": "TRIM_HORIZON"},
    )
    try:
        first = subscription.next_event()
        assert first is not None and [r["Data"] for r in first["Records"]] == [b"r0", b"r1"]
        proxy.stop()
        after_stop = []
        with contextlib.suppress(Exception):  # cut mid-stream: a transport error is fine
            while (event := subscription.next_event()) is not None and len(after_stop) < 5:
                after_stop.append(event)
    finally:
        subscription.close()
    # At most the event already in flight when the proxy stopped.
    assert len(after_stop) <= 1


def test_consumers_are_registered_once_and_deregistered(client: KinesisClient, stream: str) -> None:
    arn = describe_stream(client, stream).arn
    name = f"c-{uuid.uuid4().hex[:8]}"
    first = ensure_consumer(client, arn, name)
    again = ensure_consumer(client, arn, name)
    assert again.arn == first.arn
    assert _consumer_names(client, arn) == {name}

    deregister_consumer(client, first)
    deregister_consumer(client, first)  # a second time is harmless
    deadline = time.monotonic() + 30
    while name in _consumer_names(client, arn) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert name not in _consumer_names(client, arn)


def test_a_throttled_describe_is_waited_out_while_registering(
    kinesis_mock_endpoint: KinesisMockEndpoint, stream: str
) -> None:
    """DescribeStreamConsumer allows 20 calls/s per stream: many queries planning at once
    get LimitExceededException, which must not fail the query."""
    proxy = FaultProxy(kinesis_mock_endpoint.url).start()
    try:
        proxy.inject("DescribeStreamConsumer", "limit", times=2)
        through_proxy = kinesis_client(proxy.url, "us-east-1", timeout_s=10)
        arn = describe_stream(through_proxy, stream).arn
        consumer = ensure_consumer(through_proxy, arn, f"c-{uuid.uuid4().hex[:8]}", timeout_s=30)
        deregister_consumer(through_proxy, consumer)
    finally:
        proxy.stop()
    assert proxy.counts[("DescribeStreamConsumer", "limit")] == 2
    assert consumer.arn.startswith(arn)


def test_a_stream_with_all_its_consumers_refuses_one_more_at_once(
    client: KinesisClient, stream: str
) -> None:
    """Kinesis answers LimitExceededException both for "too many calls" (wait) and "20
    consumers already" (waiting is useless): the second must fail at once, naming them."""
    arn = describe_stream(client, stream).arn
    for number in range(MAX_CONSUMERS):
        client.register_stream_consumer(StreamARN=arn, ConsumerName=f"other-{number:02d}")
    started = time.monotonic()
    with pytest.raises(ConsumerError, match="has its 20 consumers already") as raised:
        ensure_consumer(client, arn, "one-too-many", timeout_s=60)
    assert time.monotonic() - started < 30
    assert "other-00" in str(raised.value) and "deregister-stream-consumer" in str(raised.value)


def test_a_consumer_still_being_deleted_does_not_count_against_the_twenty() -> None:
    """The previous run's consumer is DELETING for seconds after its release (AWS takes
    that long; this kinesis-mock is told to, too). A stream with 19 others and that one is
    not full: registering must wait for the place to free, not refuse at once."""
    endpoint = KinesisMockEndpoint(delays={"DEREGISTER_STREAM_CONSUMER": "10000ms"}).start()
    try:
        proxy = FaultProxy(endpoint.url).start()
        try:
            client = kinesis_client(endpoint.url, "us-east-1", timeout_s=10)
            through_proxy = kinesis_client(proxy.url, "us-east-1", timeout_s=10)
            name = f"efo-{uuid.uuid4().hex[:10]}"
            ensure_stream(client, name, 1)
            arn = describe_stream(client, name).arn
            for number in range(MAX_CONSUMERS - 1):
                client.register_stream_consumer(StreamARN=arn, ConsumerName=f"other-{number:02d}")
            previous = ensure_consumer(client, arn, "previous-run")
            deregister_consumer(client, previous)
            statuses = {
                listed["ConsumerName"]: listed["ConsumerStatus"]
                for listed in client.list_stream_consumers(StreamARN=arn)["Consumers"]
            }
            assert statuses["previous-run"] == "DELETING"  # for 10 s: what the fix is about
            # What AWS answers while the stream still holds 20, DELETING included.
            proxy.inject("RegisterStreamConsumer", "limit", times=1)
            registered = ensure_consumer(through_proxy, arn, "this-run", timeout_s=60)
            names = _consumer_names(client, arn)
        finally:
            proxy.stop()
    finally:
        endpoint.stop()
    # The refusal made it count the stream's consumers, previous-run still DELETING among them.
    listings = [
        calls for (action, _), calls in proxy.signed_by.items() if action == "ListStreamConsumers"
    ]
    assert sum(listings) >= 1
    assert proxy.counts[("RegisterStreamConsumer", "limit")] == 1
    assert registered.name == "this-run" and "this-run" in names


def _consumer_names(client: KinesisClient, stream_arn: str) -> set[str]:
    listed = client.list_stream_consumers(StreamARN=stream_arn)["Consumers"]
    return {consumer["ConsumerName"] for consumer in listed}


class _RawStream:
    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks

    def stream(self) -> Iterator[bytes]:
        yield from self.chunks

    def close(self) -> None:
        pass


@pytest.mark.parametrize("split_at", [1, 7, 40])
def test_an_initial_response_is_supplied_only_where_the_endpoint_sent_none(split_at: int) -> None:
    """AWS opens every event stream with initial-response; kinesis-mock does not. The
    supplied one must appear only in the second case, however the bytes are chunked."""
    event = event_message("SubscribeToShardEvent", b'{"Records": []}')
    from_aws = INITIAL_RESPONSE + event
    from_mock = event

    def passed_on(raw: bytes) -> bytes:
        chunks = [raw[i : i + split_at] for i in range(0, len(raw), split_at)]
        return b"".join(WithInitialResponse(_RawStream(chunks)).stream())

    assert passed_on(from_aws) == from_aws
    assert passed_on(from_mock) == INITIAL_RESPONSE + event
