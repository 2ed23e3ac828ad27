"""Why a shard read stops: the rule ``ShardReader.read`` applies, record by record and
page by page, kept apart from the fetching so it can be read (and tested) alone.

A read stops at the first of: a replay's first record past its end ("end_gone": retention
took the end record), a record that arrived after the cutoff ("cutoff"), the end record of
a replay ("end_sequence"), a record that would take the read past its byte budget
("over_bytes"), the record limit ("limit"), the byte budget reached ("bytes"), the end of
a closed shard ("shard_end"), the shard gone from the stream ("shard_gone") or a page at
the tip ("caught_up"). "end_gone", "cutoff" and "over_bytes" leave the record they were
judged on unread.

The byte budget counts whole Kinesis records, as the record limit does: an aggregate is
one record, never split. It is a strict cap with one exception that guarantees progress:
the first record of a read is always taken, so a record larger than the whole budget is
read alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

BEFORE_RECORD = frozenset({"end_gone", "cutoff", "over_bytes"})
"""Stops that leave the record they were judged on unread."""

SHARD_ENDS = frozenset({"shard_end", "shard_gone"})
"""Stops meaning the shard will never return another record."""


def record_stop(
    sequence_number: str,
    arrival_ms: int,
    *,
    taken_before: int,
    end: int | None,
    arrival_cutoff_ms: int | None,
    max_records: int,
    size: int = 0,
    bytes_before: int = 0,
    max_bytes: int | None = None,
) -> str | None:
    """Why the read stops at this record, if it does; ``taken_before`` counts the
    Kinesis records the read has taken so far, ``bytes_before`` their bytes
    (:func:`record_bytes`), ``size`` this record's."""
    if end is not None and int(sequence_number) > end:
        return "end_gone"
    if arrival_cutoff_ms is not None and arrival_ms > arrival_cutoff_ms:
        return "cutoff"
    if end is not None and int(sequence_number) == end:
        return "end_sequence"
    over = max_bytes is not None and bytes_before + size > max_bytes
    if over and taken_before > 0:
        return "over_bytes"
    if taken_before + 1 >= max_records:
        return "limit"
    if over or (max_bytes is not None and bytes_before + size == max_bytes):
        return "bytes"  # the budget reached exactly, or a first record larger than it
    return None


def record_bytes(record: Mapping[str, Any]) -> int:
    """A Kinesis record's size as Kinesis counts it against its 1 MiB record limit: the
    data blob (before base64) plus the partition key; an aggregate's whole blob."""
    return len(record["Data"]) + len(str(record["PartitionKey"]).encode())


def page_stop(
    *,
    shard_ended: bool,
    gone: bool,
    read_whole_page: bool,
    may_be_tip: bool,
    millis_behind: int | None,
    resume_record_only: bool,
) -> str | None:
    """How a page ends the read once its records are judged, if it does.

    A closed shard ends it only once its last page was read whole. A page that may be the
    tip ("caught_up") counts only when ``MillisBehindLatest`` says 0 (real Kinesis returns
    short, even empty, pages while behind), and not when it held nothing but the resume
    record where the end of a closed shard comes on an empty page only (kinesalite's
    GetRecords: ``Page.end_needs_empty_page``). A stop found among the page's records
    comes first; the caller still records a shard's end behind it.
    """
    if shard_ended and read_whole_page:
        return "shard_gone" if gone else "shard_end"
    if may_be_tip and not millis_behind and not resume_record_only:
        return "caught_up"
    return None
