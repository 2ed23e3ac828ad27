"""How an epoch's read limits are shared among the shards it reads.

Spark's ReadMaxRows and the source's byte cap bound a whole epoch; each shard's read is
bounded by its own cap too. The total is split evenly, the remainder going to the first
shards in an order rotated by the epoch.

Invariant: the shares never add up to more than the epoch's limit, none exceeds the
per-shard cap, and with fewer rows (or bytes) than shards every shard still gets its turn
over successive epochs, so a small limit slows a stream down but starves no shard.
"""

from __future__ import annotations

from collections.abc import Sequence


def epoch_limits(
    shard_ids: Sequence[str], max_records_per_shard: int, max_rows: int | None, *, rotation: int
) -> dict[str, int]:
    """Records each shard may read in one epoch, keeping the total within ``max_rows``.

    ``max_rows`` is split evenly, the remainder going to the first shards in an order
    rotated by ``rotation`` (the epoch), so that with fewer rows than shards every shard
    still gets its turn. No shard exceeds ``max_records_per_shard``.
    """
    shares = _shares(shard_ids, max_records_per_shard, max_rows, rotation)
    return {shard_id: limit for shard_id, limit in shares.items() if limit > 0}


def epoch_byte_limits(
    shard_ids: Sequence[str],
    max_bytes_per_shard: int | None,
    max_bytes: int | None,
    *,
    rotation: int,
) -> dict[str, int | None]:
    """The byte budget of each shard's read in one epoch (None: no byte cap), keeping
    the total within ``max_bytes``; ``shard_ids`` are the shards given a record limit.

    Split as :func:`epoch_limits` splits records. A budget of 0 (fewer bytes than
    shards) means the shard sits this epoch out, as a record limit of 0 does: a read
    always takes at least one record, so every budget that reads must be at least 1.
    """
    if max_bytes is None and max_bytes_per_shard is None:
        return dict.fromkeys(shard_ids)
    cap = max_bytes_per_shard if max_bytes_per_shard is not None else max_bytes
    assert cap is not None
    return dict(_shares(shard_ids, cap, max_bytes, rotation))


def _shares(shard_ids: Sequence[str], cap: int, total: int | None, rotation: int) -> dict[str, int]:
    """``total`` split evenly over ``shard_ids``, each share at most ``cap``, the remainder
    going to the first shards in an order rotated by ``rotation``; ``cap`` each without
    a total."""
    if not shard_ids:
        return {}
    if total is None:
        return dict.fromkeys(shard_ids, cap)
    turn = rotation % len(shard_ids)
    ordered = [*shard_ids[turn:], *shard_ids[:turn]]
    share, remainder = divmod(total, len(ordered))
    return {
        shard_id: min(cap, share + (1 if index < remainder else 0))
        for index, shard_id in enumerate(ordered)
    }
