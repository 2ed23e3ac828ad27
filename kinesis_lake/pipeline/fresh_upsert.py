"""An upsert table's current rows over rows its refresh has not merged yet, without Spark.

The fresh read (:mod:`kinesis_lake.pipeline.fresh_read`) of an upsert table: the table's
rows, with every key the new source rows touch decided again between those rows, the
table's row and the tombstone of that key, by the refresh's own order
(``pipeline.upsert.winning_order``: highest version, then the later Kinesis record; a
delete is a row like any other, so an older update after it still loses). Merging is a
maximum, so it does not matter whether the tombstones already hold some of the new rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from kinesis_lake.events import columns as C
from kinesis_lake.events.derived_tables import UpsertSpec


def upsert_winners(
    committed: pa.Table, tombstones: pa.Table, new_rows: pa.Table, upsert: UpsertSpec
) -> pa.Table:
    """``committed`` (the table's rows, in its schema) with the keys of ``new_rows`` (in
    the same schema) merged in: each such key's winner, left out when it is a delete."""
    new_rows = new_rows.filter(pc.is_valid(new_rows.column(upsert.key)))
    keys = new_rows.column(upsert.key)
    touched = pc.is_in(committed.column(upsert.key), value_set=keys.unique())
    held = committed.filter(touched)
    dead = tombstones.filter(pc.is_in(tombstones.column(upsert.key), value_set=keys.unique()))
    # Candidates: (winning order, deleted, row of the new and held rows together or None).
    candidates = pa.concat_tables([new_rows, held.cast(new_rows.schema)])
    deleted = [*_deletes(new_rows, upsert), *([False] * held.num_rows)]
    best: dict[Any, tuple[tuple, bool, int | None]] = {}
    for order, is_dead, row in [
        *zip(_orders(candidates, upsert), deleted, range(candidates.num_rows), strict=True),
        *((order, True, None) for order in _orders(dead, upsert)),
    ]:
        key = order[0]
        if key not in best or order[1:] > best[key][0][1:]:
            best[key] = (order, is_dead, row)
    alive = sorted(row for _, is_dead, row in best.values() if not is_dead and row is not None)
    winners = candidates.take(pa.array(alive, pa.int64()))
    return pa.concat_tables([committed.filter(pc.invert(touched)), winners.cast(committed.schema)])


def _deletes(rows: pa.Table, upsert: UpsertSpec) -> list[bool]:
    if upsert.delete is None:
        return [False] * rows.num_rows
    values = rows.column(upsert.delete.field).cast(pa.string()).to_pylist()
    return [value is not None and value in upsert.delete.values for value in values]


def _orders(rows: pa.Table, upsert: UpsertSpec) -> list[tuple]:
    """Per row: its key, then what orders it, ascending (the last wins); a null sorts
    first, as ``desc_nulls_last`` puts it last among the winners."""
    columns: Sequence[list[Any]] = [
        rows.column(name).to_pylist()
        for name in (upsert.key, upsert.version, C.ARRIVAL_TIMESTAMP, C.SHARD_ID)
    ]
    sequences = rows.column(C.SEQUENCE_NUMBER).to_pylist()
    subs = rows.column(C.SUB_SEQUENCE_NUMBER).to_pylist()
    return [
        (
            key,
            _nulls_first(version),
            _nulls_first(arrival),
            _nulls_first(shard),
            _nulls_first(None if sequence is None else int(sequence)),
            _nulls_first(sub),
        )
        for key, version, arrival, shard, sequence, sub in zip(
            *columns, sequences, subs, strict=True
        )
    ]


def _nulls_first(value: Any) -> tuple[bool, Any]:
    return (value is not None, value)
