"""A fresh read's tail (``pipeline/fresh_tail.py``) where ingestion's own rules decide: a
quiet shard whose last committed record aged out is no alarm, a real gap still is, and
with ``latest`` a shard with no committed record starts where the table says ingestion
read it to its tip, or, with nothing saying so, is left out and named. Fast: kinesalite
(behind the clock proxy where retention matters) and a raw table whose properties are
set as ingestion sets them; no Spark. Only raw is read: any declaration does. Enhanced
fan-out's reads are against kinesis-mock (the local endpoint that serves SubscribeToShard),
behind the fault proxy where a held subscription must be certain."""

from __future__ import annotations

import json
import time

from kinesis_lake.config import Settings
from kinesis_lake.iceberg.summary import POSITIONS
from kinesis_lake.kinesis.client import kinesis_client
from kinesis_lake.kinesis.streams import describe_stream
from kinesis_lake.pipeline.earlier_reads import READ_TO_TIP
from kinesis_lake.pipeline.fresh_read import TailLimits, fresh_read
from kinesis_lake.pipeline.ingest_query import prepare_raw_table
from kinesis_lake_tests.kinesis.clock_proxy import ClockProxy
from kinesis_lake_tests.kinesis.fault_proxy import FaultProxy
from kinesis_lake_tests.pipeline.declared_lakes import PROFILES
from kinesis_lake_tests.pipeline_helpers import put

SHARD = "shardId-000000000000"


def _record(settings: Settings, **properties: dict) -> None:
    """Set raw table properties as ingestion writes them (JSON values)."""
    raw = prepare_raw_table(settings)
    with raw.transaction() as transaction:
        transaction.set_properties({k: json.dumps(v) for k, v in properties.items()})


def _texts(settings: Settings) -> list[str]:
    fresh = fresh_read(settings, settings.raw_table_name)
    return [json.loads(data)["text"] for data in fresh.table.column("data").to_pylist()]


def test_a_quiet_shard_past_retention_is_no_alarm_and_a_gap_still_is(
    kinesalite_endpoint, settings_factory
):
    with ClockProxy(kinesalite_endpoint.url) as clock:
        settings = settings_factory(clock, declaration=PROFILES, shard_count=1)
        (committed,) = put(settings, {"type": "note", "text": "committed"})
        read_at_ms = int(clock.now() * 1000)
        clock.advance(25 * 3600)  # the committed record is past retention now

        _record(settings, **{POSITIONS: {SHARD: committed}})
        unknown = fresh_read(settings, settings.raw_table_name)
        _record(settings, **{READ_TO_TIP: {SHARD: read_at_ms}})
        gap = fresh_read(settings, settings.raw_table_name)
        # Read to its tip an hour ago (server time): quiet since, nothing can have expired.
        _record(settings, **{READ_TO_TIP: {SHARD: int(clock.now() * 1000) - 3_600_000}})
        quiet = fresh_read(settings, settings.raw_table_name)

    assert quiet.warnings == [] and quiet.shards_read == 1 and quiet.table.num_rows == 0
    assert len(unknown.warnings) == 1 and "no read to its tip is on record" in unknown.warnings[0]
    assert len(gap.warnings) == 1 and f"tip at {read_at_ms} ms" in gap.warnings[0]
    assert "may have expired unread" in gap.warnings[0]


def test_latest_starts_a_shard_without_position_at_its_recorded_read_to_tip(
    kinesalite_endpoint, settings_factory
):
    settings = settings_factory(
        kinesalite_endpoint, declaration=PROFILES, shard_count=1, starting_position="latest"
    )
    put(settings, {"type": "note", "text": "before ingestion started"})
    time.sleep(0.05)  # arrival times are in ms: the read to the tip comes strictly after
    read_at_ms = int(time.time() * 1000)
    time.sleep(0.05)
    put(settings, {"type": "note", "text": "after"})

    prepare_raw_table(settings)
    unknown = fresh_read(settings, settings.raw_table_name)
    _record(settings, **{READ_TO_TIP: {SHARD: read_at_ms}})
    known = _texts(settings)

    assert unknown.table.num_rows == 0 and unknown.shards_read == 0
    assert [(o.shard_id, o.after_sequence_number) for o in unknown.left_out] == [(SHARD, None)]
    assert "KINESIS_STARTING_POSITION=latest" in unknown.left_out[0].reason
    assert known == ["after"]


def test_a_configured_fresh_consumer_is_subscribed_and_a_held_shard_polled(
    kinesis_mock_endpoint, settings_factory
):
    """With KINESIS_LAKE_FRESH_CONSUMER a fresh read takes none of the stream's shared
    GetRecords budget: it subscribes as that consumer. Kinesis allows one subscription per
    consumer and shard every 5 s, so a read right after it polls instead of waiting, and
    says so."""
    proxy = FaultProxy(kinesis_mock_endpoint.url).start()
    try:
        settings = settings_factory(
            proxy, declaration=PROFILES, shard_count=2, fresh_consumer="fresh-reads"
        )
        texts = [f"n{i}" for i in range(6)]
        put(settings, *({"type": "note", "text": t} for t in texts), keys=("a", "b", "c"))
        subscribed = fresh_read(settings, settings.raw_table_name)
        proxy.inject("SubscribeToShard", "in_use", times=2)  # both shards, still held
        polled = fresh_read(settings, settings.raw_table_name)
        client = kinesis_client(kinesis_mock_endpoint.url, settings.region)
        consumers = client.list_stream_consumers(
            StreamARN=describe_stream(client, settings.stream_name).arn
        )["Consumers"]
    finally:
        proxy.stop()

    assert [c["ConsumerName"] for c in consumers] == ["fresh-reads"]
    assert subscribed.shards_subscribed == 2 and subscribed.polled_while_held == []
    assert _read(subscribed) == texts and "2 by enhanced fan-out" in subscribed.describe("raw")
    assert polled.shards_subscribed == 0 and polled.shards_read == 2
    assert len(set(polled.polled_while_held)) == 2
    assert _read(polled) == texts and "refused as in use" in polled.describe("raw")


def test_a_fresh_consumer_that_cannot_be_had_is_warned_of_and_the_read_polls(
    kinesis_mock_endpoint, settings_factory
):
    """A reader whose identity may not register consumers (AccessDenied) still reads fresh,
    as it did before it had a consumer, and is told why it polled."""
    proxy = FaultProxy(kinesis_mock_endpoint.url).start()
    try:
        settings = settings_factory(proxy, declaration=PROFILES, shard_count=1, fresh_consumer="c")
        put(settings, {"type": "note", "text": "n0"})
        proxy.inject("DescribeStreamConsumer", "access_denied")
        fresh = fresh_read(settings, settings.raw_table_name)
    finally:
        proxy.stop()
    assert _read(fresh) == ["n0"] and fresh.shards_subscribed == 0
    assert len(fresh.warnings) == 1 and "consumer 'c' is not to be had" in fresh.warnings[0]


def _read(fresh) -> list[str]:
    return sorted(json.loads(d)["text"] for d in fresh.table.column("data").to_pylist())


def test_shards_read_at_once_take_what_one_after_another_would_under_every_cap(
    kinesalite_endpoint, settings_factory
):
    """The tail's shards are read at once (``_ReadAhead``), each ahead with a share of the
    cap; whatever the cap, a read takes exactly what reading the shards one after another
    in lineage order took: every record of the shards before, the oldest records of one
    shard (where the cap stopped it), then nothing, and names the shards it left out and
    where."""
    settings = settings_factory(kinesalite_endpoint, declaration=PROFILES, shard_count=4)
    put(
        settings,
        *({"type": "note", "text": f"n{i}"} for i in range(14)),
        keys=[f"k{i}" for i in range(14)],
    )
    prepare_raw_table(settings)
    whole = fresh_read(settings, settings.raw_table_name)
    in_order = sorted(_positions(whole), key=lambda p: (p[0], int(p[1])))
    assert whole.table.num_rows == 14 and len({shard for shard, _ in in_order}) >= 3

    for cap in range(1, 16):
        capped = fresh_read(settings, settings.raw_table_name, limits=TailLimits(cap))

        taken = in_order[:cap]
        assert sorted(_positions(capped), key=lambda p: (p[0], int(p[1]))) == taken, cap
        left = {o.shard_id: o.after_sequence_number for o in capped.left_out}
        if cap > 14:
            assert left == {}, cap
            continue
        # The cap stops the read on the record that reaches it, at a shard's end or not.
        partial, last = taken[-1]
        expected = {partial: last} | {s: None for s, _ in in_order[cap:] if s != partial}
        assert left == expected, cap


def _positions(fresh) -> list[tuple[str, str]]:
    return list(
        zip(
            fresh.table.column("shard_id").to_pylist(),
            fresh.table.column("sequence_number").to_pylist(),
            strict=True,
        )
    )


def test_a_shard_whose_read_ahead_failed_is_read_again_by_the_loop(
    kinesalite_endpoint, settings_factory
):
    """A read ahead is speculative: one that fails (here the first GetShardIterator is
    refused, as for an identity without the right) leaves the shard to the loop's own
    read, which fails the fresh read only if it fails too."""
    proxy = FaultProxy(kinesalite_endpoint.url).start()
    try:
        settings = settings_factory(proxy, declaration=PROFILES, shard_count=4)
        texts = [f"n{i}" for i in range(12)]
        put(
            settings,
            *({"type": "note", "text": t} for t in texts),
            keys=[f"k{i}" for i in range(12)],
        )
        prepare_raw_table(settings)
        proxy.inject("GetShardIterator", "access_denied")
        fresh = fresh_read(settings, settings.raw_table_name)
    finally:
        proxy.stop()

    assert proxy.counts[("GetShardIterator", "access_denied")] == 1
    assert sorted(_texts_of(fresh)) == sorted(texts) and fresh.shards_read == 4


def _texts_of(fresh) -> list[str]:
    return [json.loads(data)["text"] for data in fresh.table.column("data").to_pylist()]
