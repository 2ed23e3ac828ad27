"""streams.py against real endpoints."""

from __future__ import annotations

import pytest

from kinesis_lake.kinesis.client import kinesis_client
from kinesis_lake.kinesis.streams import (
    Shard,
    StreamNotFoundError,
    describe_stream,
    ensure_stream,
    list_shards,
    shard_lineage_order,
)
from kinesis_lake_tests.kinesis.fault_proxy import FaultProxy


def test_ensure_stream_creates_once_and_describes(client, new_stream) -> None:
    name = new_stream(client, 3)
    info = describe_stream(client, name)
    assert (info.name, info.status, info.open_shard_count, info.retention_hours) == (
        name,
        "ACTIVE",
        3,
        24,
    )
    assert info.arn.endswith(f":stream/{name}")
    assert info.created_at_ms > 1_600_000_000_000
    # Idempotent: the existing stream is returned, not recreated or resharded.
    assert ensure_stream(client, name, 5) == info


def test_list_shards_returns_open_root_shards_sorted(client, new_stream) -> None:
    name = new_stream(client, 3)
    shards = list_shards(client, name)
    assert [s.shard_id for s in shards] == [f"shardId-00000000000{i}" for i in range(3)]
    assert all(not s.is_closed and s.parent_ids == () for s in shards)
    assert all(s.starting_sequence_number.isdigit() for s in shards)


def test_missing_stream_error_names_stream_endpoint_and_fix(client, endpoint) -> None:
    for call in (describe_stream, list_shards):
        with pytest.raises(StreamNotFoundError) as raised:
            call(client, "no-such-stream")
        message = str(raised.value)
        assert "no-such-stream" in message
        assert endpoint.url in message
        assert "KINESIS_STREAM_NAME" in message


def test_list_shards_falls_back_to_describe_stream(client, new_stream, proxy: FaultProxy) -> None:
    name = new_stream(client, 2)
    proxy.inject("ListShards", "unknown_operation", 1)
    via_fallback = list_shards(kinesis_client(proxy.url), name)
    assert proxy.counts[("ListShards", "unknown_operation")] == 1
    assert via_fallback == list_shards(client, name)
    assert len(via_fallback) == 2


def test_list_shards_retries_throttling(client, new_stream, proxy: FaultProxy) -> None:
    name = new_stream(client, 1)
    proxy.inject("ListShards", "limit", 2)
    assert len(list_shards(kinesis_client(proxy.url), name)) == 1
    assert proxy.counts[("ListShards", "limit")] == 2


def _shard(shard_id: str, parent: str | None = None, adjacent: str | None = None) -> Shard:
    return Shard(shard_id, parent, adjacent, "1", None)


def test_lineage_order_puts_parents_first_and_is_stable() -> None:
    # 0 and 1 merge into 4; 4 splits into 5 and 6; 2 splits into 3 and 7; 8's parent expired.
    shards = [
        _shard("shardId-000000000007", "shardId-000000000002"),
        _shard("shardId-000000000006", "shardId-000000000004"),
        _shard("shardId-000000000005", "shardId-000000000004"),
        _shard("shardId-000000000004", "shardId-000000000001", "shardId-000000000000"),
        _shard("shardId-000000000003", "shardId-000000000002"),
        _shard("shardId-000000000002"),
        _shard("shardId-000000000001"),
        _shard("shardId-000000000000"),
        _shard("shardId-000000000008", "shardId-000000000099"),
    ]
    ordered = [s.shard_id[-1] for s in shard_lineage_order(shards)]
    assert ordered == ["0", "1", "2", "3", "4", "5", "6", "7", "8"]
    position = {s.shard_id: i for i, s in enumerate(shard_lineage_order(shards))}
    for shard in shards:
        assert all(
            position[p] < position[shard.shard_id] for p in shard.parent_ids if p in position
        )


def test_lineage_order_waits_for_both_merge_parents() -> None:
    shards = [
        _shard("shardId-000000000000"),
        _shard("shardId-000000000001", "shardId-000000000009", "shardId-000000000000"),
        _shard("shardId-000000000009"),
    ]
    assert [s.shard_id[-1] for s in shard_lineage_order(shards)] == ["0", "9", "1"]


def test_lineage_cycle_is_rejected() -> None:
    shards = [_shard("a", "b"), _shard("b", "a")]
    with pytest.raises(ValueError, match="cycle"):
        shard_lineage_order(shards)
