"""KPL aggregation: many user records packed into one Kinesis record.

Format (amazon-kinesis-producer ``aggregation-format.md``): magic bytes ``F3 89 9A C2``,
a protobuf ``AggregatedRecord`` (a partition-key table plus records pointing into it),
then the MD5 digest of the protobuf bytes.

Splitting is done here rather than with ``aws_kinesis_agg.deaggregator`` because that
module treats a bad digest as "not aggregated" without saying so and prints protobuf errors
to stderr; we need the reason on the record (``KinesisRecord.error``). We reuse the
package's generated protobuf classes and its aggregator, which is what real producers
using that package emit.
"""

from __future__ import annotations

import hashlib
import sys
from types import ModuleType

from google.protobuf.message import DecodeError

from kinesis_lake.kinesis.records import KinesisRecord, escaped_text

KPL_MAGIC = b"\xf3\x89\x9a\xc2"
_DIGEST_SIZE = hashlib.md5().digest_size
_KEY_BYTES_SHOWN = 64


def _import_aws_kinesis_agg() -> tuple[ModuleType, ModuleType]:
    """Import aws_kinesis_agg without letting it rewrite ``sys.path`` for good.

    Its modules insert their own directory at ``sys.path[0]`` so that the generated
    ``messages_pb2`` can ``import config_pb2``; left in place, that directory would shadow
    any top-level module named ``aggregator``/``deaggregator`` for the whole process.
    """
    saved = list(sys.path)
    try:
        from aws_kinesis_agg import aggregator, messages_pb2
    finally:
        sys.path[:] = saved
    return aggregator, messages_pb2


_aggregator, _messages_pb2 = _import_aws_kinesis_agg()


class _CorruptAggregateError(ValueError):
    """Internal: why an aggregate cannot be split (becomes ``KinesisRecord.error``)."""


def user_records(
    sequence_number: str, partition_key: str, arrival_ms: int, data: bytes
) -> list[KinesisRecord]:
    """Split one Kinesis record into its user records.

    Non-aggregated data gives one record with sub-sequence 0. A corrupt aggregate gives one
    record holding the whole original bytes with ``error`` set: dropping it would lose data
    silently, and guessing at a partial split could emit garbage as if it were valid.
    """
    if not data.startswith(KPL_MAGIC):
        return [KinesisRecord(sequence_number, 0, partition_key, arrival_ms, data, False, None)]
    try:
        return _split(sequence_number, arrival_ms, data)
    except _CorruptAggregateError as error:
        return [
            KinesisRecord(
                sequence_number,
                0,
                partition_key,
                arrival_ms,
                data,
                False,
                f"corrupt KPL aggregate in record {sequence_number}: {error}",
            )
        ]


def _split(sequence_number: str, arrival_ms: int, data: bytes) -> list[KinesisRecord]:
    if len(data) <= len(KPL_MAGIC) + _DIGEST_SIZE:
        raise _CorruptAggregateError(
            f"{len(data)} bytes is too short for magic, protobuf body and MD5 digest"
        )
    body = data[len(KPL_MAGIC) : -_DIGEST_SIZE]
    if hashlib.md5(body).digest() != data[-_DIGEST_SIZE:]:
        raise _CorruptAggregateError("MD5 digest does not match the protobuf body")
    message = _messages_pb2.AggregatedRecord()
    try:
        message.ParseFromString(body)
    except DecodeError as error:
        raise _CorruptAggregateError(f"protobuf does not parse: {error}") from error
    if not message.records:
        raise _CorruptAggregateError("aggregate holds no user records")
    keys = message.partition_key_table
    result = []
    for index, user_record in enumerate(message.records):
        if user_record.partition_key_index >= len(keys):
            raise _CorruptAggregateError(
                f"user record {index} points at partition key {user_record.partition_key_index}"
                f" but the key table has {len(keys)} entries"
            )
        key = keys[user_record.partition_key_index]
        problem: str | None = None
        if isinstance(key, bytes):  # protobuf returns a key that is not UTF-8 as bytes
            problem = (
                f"user record {index} of KPL aggregate {sequence_number}: partition key is not "
                f"UTF-8 (bytes {key[:_KEY_BYTES_SHOWN].hex(' ')}"
                f"{' ...' if len(key) > _KEY_BYTES_SHOWN else ''}); stored with \\x escapes"
            )
            key = escaped_text(key)
        result.append(
            KinesisRecord(sequence_number, index, key, arrival_ms, user_record.data, True, problem)
        )
    return result


def aggregate(records: list[tuple[str, bytes]]) -> bytes:
    """Pack ``(partition_key, data)`` pairs into one aggregated Kinesis record.

    Uses aws_kinesis_agg's aggregator, i.e. the same bytes a producer built on that package
    sends. Raises ``ValueError`` when the records do not fit in one 1 MiB Kinesis record.
    Put the result with the first record's partition key: Kinesis routes the whole
    aggregate to one shard by that key.
    """
    if not records:
        raise ValueError("aggregate() needs at least one (partition_key, data) pair")
    agg_record = _aggregator.AggRecord()
    for index, (partition_key, data) in enumerate(records):
        if not agg_record.add_user_record(partition_key, data):
            raise ValueError(
                f"record {index} of {len(records)} does not fit: an aggregated Kinesis "
                "record is limited to 1 MiB; split the input into several aggregates"
            )
    _, _, payload = agg_record.get_contents()
    return bytes(payload)
