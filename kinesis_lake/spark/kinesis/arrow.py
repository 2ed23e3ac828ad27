"""Kinesis records as the Arrow rows Spark receives: the ``kinesis`` source's schema.

One row per user record (after KPL de-aggregation), identity and arrival first. Converting
is the executor's hot path (a profile bucket of its own in ``benchmarks/profile.py``), so
records are converted column by column; only a batch Arrow refuses is converted again one
record at a time, so a record that cannot be stored as read is flagged, never lost.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import pyarrow as pa

from kinesis_lake.kinesis.records import KinesisRecord, escaped_text
from kinesis_lake.record_rows import RECORD_ARROW_SCHEMA

KINESIS_SCHEMA_DDL = (
    "stream_name string not null, shard_id string not null, sequence_number string not null, "
    "sub_sequence_number long not null, partition_key string not null, "
    "approximate_arrival_timestamp timestamp not null, data binary not null, "
    "aggregated boolean not null, source_error string"
)


def records_to_arrow(
    stream_name: str, shard_id: str, records: Sequence[KinesisRecord]
) -> pa.RecordBatch:
    """The Arrow batch Spark receives for ``records``, one row per user record.

    A record Arrow cannot hold as read (a key that is not UTF-8, an arrival time out of
    range, ...) must not fail the batch: that failed on every retry and held back every
    shard. Only then, the records are converted one by one (:func:`_representable`) and
    the bad ones flagged in ``source_error``, so valid records stay on the fast path.
    """
    try:
        return _arrow_batch(stream_name, shard_id, records)
    except (pa.ArrowException, ValueError, TypeError, OverflowError):
        return _arrow_batch(stream_name, shard_id, [_representable(shard_id, r) for r in records])


_REQUIRED_COLUMNS = [f.name for f in RECORD_ARROW_SCHEMA if not f.nullable]
_MIN_INT64, _MAX_INT64 = -(2**63), 2**63 - 1
_MIN_ARRIVAL_MS, _MAX_ARRIVAL_MS = -(2**63 // 1000), _MAX_INT64 // 1000  # as microseconds


def _arrow_batch(
    stream_name: str, shard_id: str, records: Sequence[KinesisRecord]
) -> pa.RecordBatch:
    count = len(records)
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array([stream_name] * count, pa.string()),
            pa.array([shard_id] * count, pa.string()),
            pa.array([r.sequence_number for r in records], pa.string()),
            pa.array([r.sub_sequence_number for r in records], pa.int64()),
            pa.array([r.partition_key for r in records], pa.string()),
            pa.array([r.arrival_ms * 1000 for r in records], pa.timestamp("us", tz="UTC")),
            pa.array([r.data for r in records], pa.binary()),
            pa.array([r.aggregated for r in records], pa.bool_()),
            pa.array([r.error for r in records], pa.string()),
        ],
        schema=RECORD_ARROW_SCHEMA,
    )
    if any(batch.column(name).null_count for name in _REQUIRED_COLUMNS):
        raise ValueError("a required column holds a null")
    return batch


def _representable(shard_id: str, record: KinesisRecord) -> KinesisRecord:
    """``record`` as Arrow can hold it: each field that cannot be stored as read is
    replaced by a stand-in (text escaped, bytes kept) and named in ``error``."""
    problems: list[str] = []
    sequence_number = _text("sequence_number", record.sequence_number, problems)
    partition_key = _text("partition_key", record.partition_key, problems)
    error = None if record.error is None else _text("source_error", record.error, problems)
    sub_sequence_number = record.sub_sequence_number
    if not isinstance(sub_sequence_number, int) or not (
        _MIN_INT64 <= sub_sequence_number <= _MAX_INT64
    ):
        problems.append(f"sub_sequence_number {sub_sequence_number!r} is not a 64-bit integer")
        sub_sequence_number = 0
    arrival_ms = record.arrival_ms
    if not isinstance(arrival_ms, int) or not _MIN_ARRIVAL_MS <= arrival_ms <= _MAX_ARRIVAL_MS:
        problems.append(f"arrival time {arrival_ms!r} ms is out of range; stored as epoch 0")
        arrival_ms = 0
    data = record.data
    if isinstance(data, bytearray | memoryview):
        data = bytes(data)
    elif not isinstance(data, bytes):
        problems.append(f"data is {type(data).__name__}, not bytes; stored as its text")
        data = b"" if data is None else str(data).encode("utf-8", "backslashreplace")
    if problems:
        flagged = (
            f"record {sequence_number}/{sub_sequence_number} on shard {shard_id} cannot be "
            f"stored as read: {'; '.join(problems)}"
        )
        error = flagged if error is None else f"{error}; {flagged}"
    return KinesisRecord(
        sequence_number,
        sub_sequence_number,
        partition_key,
        arrival_ms,
        data,
        bool(record.aggregated),
        error,
    )


def _text(name: str, value: object, problems: list[str]) -> str:
    stand_in = escaped_text(value)
    if stand_in is None:
        return cast(str, value)  # escaped_text returns None only for valid text
    problems.append(f"{name} is not valid UTF-8 text; stored with escapes")
    return stand_in
