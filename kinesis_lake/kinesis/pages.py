"""What a page source hands the shard read loop, and how it opens a read at the cursor.

A page is one answer's records: a GetRecords response (:mod:`polled_pages`) or a
SubscribeToShard event (:mod:`subscribed_pages`). Both sources open their read the same
way, by :func:`open_read` and :func:`reopen_read`: an AFTER_SEQUENCE_NUMBER start is asked
for AT its record so the first record proves it is still retained, a rejected start falls
back to TRIM_HORIZON for the cursor to judge the gap, and a shard gone from the stream
ends the pages with an empty end page (:func:`ending_if_gone`) instead of failing.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any, ParamSpec, Protocol

from botocore.exceptions import ClientError

from kinesis_lake.kinesis.retry import error_code
from kinesis_lake.kinesis.server_time import server_ms
from kinesis_lake.kinesis.shard_calls import ShardCalls
from kinesis_lake.kinesis.start_positions import StartPosition
from kinesis_lake.kinesis.streams import could_have_aged_out, list_shards

_log = logging.getLogger(__name__)
_P = ParamSpec("_P")

# InvalidArgumentException messages that mean "this sequence number belongs to another
# shard or stream" (a caller bug), as opposed to "it is no longer retained".
_FOREIGN_SEQUENCE_MESSAGES = ("It encodes", "did not come from this stream")

# How Kinesis refuses to start at a sequence number it no longer holds.
_REJECTABLE = frozenset({"InvalidArgumentException"})
# How it answers for a shard it no longer has: a closed shard whose records are all past
# retention, which ListShards stops listing too (or a stream or consumer that is gone).
_NOT_FOUND = frozenset({"ResourceNotFoundException"})


@dataclass(frozen=True)
class Page:
    """One answer's records: a GetRecords response or a SubscribeToShard event.

    ``may_be_tip`` says whether the page could have been the stream's tip: a GetRecords
    page shorter than its limit, or any subscription event (Kinesis pushes what it has).
    """

    records: list[Mapping[str, Any]]
    server_ms: int | None
    shard_ended: bool
    millis_behind: int | None
    may_be_tip: bool
    end_needs_empty_page: bool
    """kinesalite's GetRecords reports a closed shard's end only on an empty page, so a
    page holding nothing but the resume record must not count as the tip there. A
    subscription reports the end in the event itself."""
    gone: str | None = None
    """Why the shard is known to be gone from the stream, on the empty end page that
    stands for it (:class:`_ShardGoneError`)."""


#: Opens a read at a GetShardIterator-shaped position (``StartPosition.iterator_args``):
#: a shard iterator for polling, a subscription for enhanced fan-out.
Opener = Callable[[dict[str, Any]], Any]


class ReadStart(Protocol):
    """What opening a read needs of the read's cursor (``ReadCursor`` has it)."""

    start: StartPosition
    last_seen: str | None
    """The last record the read took, or skipped as at or before its resume point."""

    def rejected(self, operation: str, message: str) -> None:
        """Kinesis refused AT_SEQUENCE_NUMBER of an AFTER_SEQUENCE_NUMBER start: the read
        goes on from TRIM_HORIZON, and the records that follow decide the gap."""


class _ShardGoneError(Exception):
    """The shard is no longer in the stream: Kinesis closed it and all its records
    passed retention, so it answers ResourceNotFoundException and ListShards omits it.

    Such a shard will never return another record, exactly like a closed shard read to
    its end: the read ends there (:func:`ending_if_gone`), and the gap rules of the start
    decide whether anything after it expired unread. Failing instead failed every retry
    and replay of the batch the same way, for ever (issue 31 simulation, seed 20147).
    """

    def __init__(self, detail: str, server_ms: int | None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.server_ms = server_ms

    def end_page(self) -> Page:
        return Page(
            records=[],
            server_ms=self.server_ms,
            shard_ended=True,
            millis_behind=0,
            may_be_tip=True,
            end_needs_empty_page=False,
            gone=self.detail,
        )


def ending_if_gone(source: Callable[_P, Generator[Page]]) -> Callable[_P, Generator[Page]]:
    """A page source's pages, ending with an empty end-of-shard page if the shard is
    found gone."""

    @functools.wraps(source)
    def pages(*args: _P.args, **kwargs: _P.kwargs) -> Generator[Page]:
        try:
            yield from source(*args, **kwargs)
        except _ShardGoneError as gone:
            yield gone.end_page()

    return pages


def open_read(calls: ShardCalls, cursor: ReadStart, opener: Opener, operation: str) -> Any:
    """Open a read at ``cursor.start`` with ``opener``.

    AFTER_SEQUENCE_NUMBER S is requested as AT_SEQUENCE_NUMBER S so that the first
    record proves S is still retained; if S is rejected outright, the read falls back to
    TRIM_HORIZON and the cursor reports the gap. A shard gone from the stream raises
    :class:`_ShardGoneError`.
    """
    start = cursor.start
    try:
        if start.kind in ("AT_SEQUENCE_NUMBER", "AFTER_SEQUENCE_NUMBER"):
            try:
                return opener(
                    {
                        "ShardIteratorType": "AT_SEQUENCE_NUMBER",
                        "StartingSequenceNumber": start.sequence_number,
                    }
                )
            except ClientError as error:
                message = str(error)
                if error_code(error) in _NOT_FOUND:
                    raise
                if start.kind == "AT_SEQUENCE_NUMBER" or any(
                    m in message for m in _FOREIGN_SEQUENCE_MESSAGES
                ):
                    raise calls.error(operation, 1, message) from error
                cursor.rejected(operation, message)
                return opener({"ShardIteratorType": "TRIM_HORIZON"})
        return opener(start.iterator_args())
    except ClientError as error:  # ResourceNotFoundException only (passthrough)
        raise _gone(calls, operation, error) from error


def reopen_read(calls: ShardCalls, cursor: ReadStart, opener: Opener, operation: str) -> Any:
    """Open again after an iterator expired or a subscription ended: right after the
    last record seen, or at the start.

    A shard gone after this read took records fails the read: what it held after them
    is unknown, and the retry, reading from the start again, judges that gap.
    """
    if cursor.last_seen is None:
        return open_read(calls, cursor, opener, operation)
    try:
        return opener(
            {
                "ShardIteratorType": "AFTER_SEQUENCE_NUMBER",
                "StartingSequenceNumber": cursor.last_seen,
            }
        )
    except ClientError as error:  # ResourceNotFoundException only (passthrough)
        raise calls.error(operation, 1, str(error)) from error


def opener_passthrough(position: Mapping[str, Any]) -> frozenset[str]:
    """Error codes an opener raises as they came, for :func:`open_read` to judge."""
    if position["ShardIteratorType"] == "AT_SEQUENCE_NUMBER":
        return _REJECTABLE | _NOT_FOUND
    return _NOT_FOUND


def _gone(calls: ShardCalls, operation: str, error: ClientError) -> Exception:
    """What ResourceNotFoundException at the start of a read means: the shard is gone
    from the stream if ListShards no longer lists it and it can have aged out (a gone
    stream raises StreamNotFoundError there); else an error of this read (a consumer
    not found, a shard the stream never had)."""
    listed = {s.shard_id for s in list_shards(calls.client, calls.stream_name)}
    if calls.shard_id in listed or not could_have_aged_out(calls.shard_id, listed):
        return calls.error(operation, 1, str(error))
    _log.warning(
        "shard %s of stream %s is no longer in the stream: read as ended (%s)",
        calls.shard_id,
        calls.stream_name,
        error,
    )
    return _ShardGoneError(f"{operation}: {error}", server_ms(error.response))
