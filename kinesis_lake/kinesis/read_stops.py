"""Why a shard read stops: the rule ``ShardReader.read`` applies, record by record and
page by page, kept apart from the fetching so it can be read (and tested) alone.

A read stops at the first of: a replay's first record past its end ("end_gone": retention
took the end record), a record that arrived after the cutoff ("cutoff"), the end record of
a replay ("end_sequence"), the record limit ("limit"), the end of a closed shard
("shard_end"), the shard gone from the stream ("shard_gone") or a page at the tip
("caught_up"). The first two leave the record they were judged on unread.
"""

from __future__ import annotations

BEFORE_RECORD = frozenset({"end_gone", "cutoff"})
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
) -> str | None:
    """Why the read stops at this record, if it does; ``taken_before`` counts the
    Kinesis records the read has taken so far."""
    if end is not None and int(sequence_number) > end:
        return "end_gone"
    if arrival_cutoff_ms is not None and arrival_ms > arrival_cutoff_ms:
        return "cutoff"
    if end is not None and int(sequence_number) == end:
        return "end_sequence"
    if taken_before + 1 >= max_records:
        return "limit"
    return None


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
