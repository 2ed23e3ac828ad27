"""Each starting position reads exactly the records it names; a checkpoint wins over it."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest
from pyspark.errors import StreamingQueryException

from kinesis_lake_tests.kinesis.fault_proxy import FaultProxy
from kinesis_lake_tests.pipeline_helpers import read_stream
from kinesis_lake_tests.spark.source_helpers import (
    keyed_events,
    kinesis,
    new_stream,
    payloads,
    put,
    run_source,
    source_options,
)


@dataclass(frozen=True)
class TwoWaves:
    stream: str
    boundary_ms: int
    """Every record of wave "a" arrived before it, every record of wave "b" at or after."""
    first_wave: list[str]
    second_wave: list[str]


@pytest.fixture(scope="module")
def two_waves(kinesalite_endpoint) -> TwoWaves:
    url = kinesalite_endpoint.url
    stream = new_stream(url, shards=2)
    first, second = keyed_events("a", keys=4, per_key=5), keyed_events("b", keys=4, per_key=5)
    put(url, stream, first)
    arrivals = [
        r["ApproximateArrivalTimestamp"]
        for r in _read_all(kinesis(url), stream).values()
        for r in r
    ]
    boundary_ms = int(max(arrivals).timestamp() * 1000) + 1
    while time.time() * 1000 <= boundary_ms:  # wave "b" must arrive in a later millisecond
        time.sleep(0.01)
    put(url, stream, second)
    return TwoWaves(
        stream, boundary_ms, [d.decode() for _, d in first], [d.decode() for _, d in second]
    )


def _read_all(client, stream: str) -> dict[str, list[dict]]:
    """Each shard's records, from the ground-truth reader."""
    found: dict[str, list[dict]] = {}
    for record in read_stream(client, stream):
        found.setdefault(record["ShardId"], []).append(record)
    return found


def test_trim_horizon_reads_every_record(spark, kinesalite_endpoint, two_waves, tmp_path):
    options = source_options(kinesalite_endpoint.url, two_waves.stream, tmp_path / "meta")
    rows = run_source(spark, options, tmp_path / "checkpoint")
    assert sorted(payloads(rows)) == sorted(two_waves.first_wave + two_waves.second_wave)


@pytest.mark.parametrize("form", ["iso-8601", "epoch-ms"])
def test_at_timestamp_reads_what_arrived_at_or_after_it(
    spark, kinesalite_endpoint, two_waves, tmp_path, form
):
    boundary = two_waves.boundary_ms
    timestamp = (
        datetime.fromtimestamp(boundary / 1000, tz=UTC).isoformat(timespec="milliseconds")
        if form == "iso-8601"
        else str(boundary)
    )
    options = source_options(
        kinesalite_endpoint.url,
        two_waves.stream,
        tmp_path / "meta",
        startingPosition="at_timestamp",
        startingTimestamp=timestamp,
    )
    rows = run_source(spark, options, tmp_path / "checkpoint")
    assert sorted(payloads(rows)) == sorted(two_waves.second_wave)


def test_a_shard_map_reads_after_each_named_sequence_number(
    spark, kinesalite_endpoint, two_waves, tmp_path
):
    """Shards the map does not name are read from their oldest record."""
    by_shard = _read_all(kinesis(kinesalite_endpoint.url), two_waves.stream)
    named, unnamed = sorted(by_shard)
    after = by_shard[named][2]["SequenceNumber"]
    options = source_options(
        kinesalite_endpoint.url,
        two_waves.stream,
        tmp_path / "meta",
        startingPosition=json.dumps({named: after}),
    )
    rows = run_source(spark, options, tmp_path / "checkpoint")
    expected = [r["Data"].decode() for r in by_shard[named][3:] + by_shard[unnamed]]
    assert sorted(payloads(rows)) == sorted(expected)


def test_latest_is_pinned_at_the_initial_offset_and_the_checkpoint_wins(
    spark, kinesalite_endpoint, tmp_path
):
    """``latest`` keeps records that arrive after planning but before the first read.

    The first run plans from ``latest`` and then fails its first read (an injected,
    non-retryable GetShardIterator error), so its plan sits in the checkpoint unread.
    Records put after that arrived between planning and the first read. The second run
    asks for ``trim_horizon``, but the checkpoint wins: it replays the pinned plan,
    reading the new records and none of the older ones. A third run, its checkpoint
    lost, asks for ``latest`` again and reads what arrived since the second run's read to
    the tip (a new query's "now" skipped it).
    """
    url = kinesalite_endpoint.url
    stream = new_stream(url, shards=1)
    put(url, stream, keyed_events("before", keys=2, per_key=3))
    proxy = FaultProxy(url).start()
    try:
        proxy.inject("GetShardIterator", "invalid_argument", 1)
        checkpoint, metadata = tmp_path / "checkpoint", tmp_path / "meta"
        latest = source_options(proxy.url, stream, metadata, startingPosition="latest")
        with pytest.raises(StreamingQueryException, match="GetShardIterator"):
            run_source(spark, latest, checkpoint)
        assert proxy.counts[("GetShardIterator", "invalid_argument")] == 1

        later = keyed_events("after", keys=2, per_key=3)
        put(url, stream, later)
        restarted = source_options(proxy.url, stream, metadata, startingPosition="trim_horizon")
        rows = run_source(spark, restarted, checkpoint)

        # The checkpoint lost, a new query with latest goes on where the last read to the
        # tip left the shard: what arrived since is read, not skipped as before "now".
        while_down = keyed_events("down", keys=2, per_key=2)
        put(url, stream, while_down)
        resumed = run_source(spark, latest, tmp_path / "new-checkpoint")
    finally:
        proxy.stop()
    assert sorted(payloads(rows)) == sorted(d.decode() for _, d in later)
    assert sorted(payloads(resumed)) == sorted(d.decode() for _, d in while_down)
