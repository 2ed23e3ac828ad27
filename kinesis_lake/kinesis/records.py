"""The record type every consumer in this project sees."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class KinesisRecord:
    """One user record, addressed by (sequence_number, sub_sequence_number).

    A KPL-aggregated Kinesis record carries many user records under one sequence number;
    the sub-sequence number tells them apart, so the pair is the unique, ordered key that
    deduplication and replay must use. ``error`` is set when an aggregate was corrupt and
    is passed on whole (``aggregated=False``) instead of being dropped, or when a field
    could not be stored as read (a key that is not UTF-8 is kept escaped), so that the
    data reaches a dead-letter path and the problem is visible.
    """

    sequence_number: str
    sub_sequence_number: int
    partition_key: str
    arrival_ms: int
    data: bytes
    aggregated: bool
    error: str | None


def escaped_text(value: object) -> str | None:
    """``None`` when ``value`` is a string Arrow and Iceberg can store (valid UTF-8), else
    a lossless, printable stand-in: invalid bytes and lone surrogates as ``\\x``/``\\u``
    escapes, any other type as its ``repr``.

    Protobuf hands a KPL key that is not UTF-8 back as ``bytes``; stored as is, it made
    Arrow fail the whole micro-batch. The stand-in keeps the record's place and evidence.
    """
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", "backslashreplace").decode("utf-8")
        return None
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "backslashreplace")
    return repr(value)
