"""How a shard read calls Kinesis: with the read's retries, counted in its outcome, and
failing with a :class:`ShardReadError` that names the stream, shard and operation.

The read loop (:mod:`~kinesis_lake.kinesis.shard_reader`) and both page sources
(:mod:`~kinesis_lake.kinesis.polled_pages`, :mod:`~kinesis_lake.kinesis.subscribed_pages`)
share one :class:`ShardCalls` per reader, so a read's retries, its random jitter and its
errors are the same whichever way its pages come.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from typing import Protocol, TypeVar

from botocore.exceptions import ClientError

from kinesis_lake.errors import KinesisError
from kinesis_lake.kinesis.client import KinesisClient
from kinesis_lake.kinesis.retry import RetryPolicy, call_with_retry, error_code

_log = logging.getLogger(__name__)
_T = TypeVar("_T")


class ReadCounts(Protocol):
    """The counters of a read's outcome that its calls keep (``ReadOutcome`` has them)."""

    calls: int
    """GetRecords or SubscribeToShard requests sent, failed ones included."""
    retries: int
    """Retried requests of any operation."""
    iterator_renewals: int
    """Iterators renewed after they expired, subscriptions opened again after one ended."""
    records_read: int
    """Kinesis records the read has taken: what bounds the size of the next page."""


class ShardReadError(KinesisError, RuntimeError):
    """A shard could not be read as asked; names everything needed to find out why."""

    def __init__(
        self, stream_name: str, shard_id: str, operation: str, attempts: int, last_error: str
    ) -> None:
        # Everything goes to args so the exception survives pickling across Spark workers.
        super().__init__(stream_name, shard_id, operation, attempts, last_error)
        self.stream_name = stream_name
        self.shard_id = shard_id
        self.operation = operation
        self.attempts = attempts
        self.last_error = last_error

    def __str__(self) -> str:
        return (
            f"{self.operation} on shard {self.shard_id} of Kinesis stream "
            f"{self.stream_name!r} failed after {self.attempts} attempt(s): {self.last_error}"
        )


class ShardCalls:
    """One shard's calls, made with one reader's retry policy, sleep and random jitter."""

    def __init__(
        self,
        client: KinesisClient,
        stream_name: str,
        shard_id: str,
        *,
        retry: RetryPolicy,
        sleep: Callable[[float], None],
    ) -> None:
        self.client = client
        self.stream_name = stream_name
        self.shard_id = shard_id
        self.retry = retry
        self.sleep = sleep
        self.rng = random.Random()

    def error(self, operation: str, attempts: int, detail: str) -> ShardReadError:
        return ShardReadError(self.stream_name, self.shard_id, operation, attempts, detail)

    def call(
        self,
        operation: str,
        request: Callable[[], _T],
        counts: ReadCounts,
        passthrough: frozenset[str] = frozenset(),
    ) -> _T:
        """Call with retries; wrap failures in ShardReadError except ``passthrough`` codes."""
        attempts = 1

        def note_retry(error: BaseException) -> None:
            nonlocal attempts
            attempts += 1
            counts.retries += 1
            _log.info(
                "retrying %s on %s/%s after %s",
                operation,
                self.stream_name,
                self.shard_id,
                error_code(error),
            )

        try:
            return call_with_retry(
                request,
                self.retry,
                sleep=self.sleep,
                rng=self.rng,
                on_retry=note_retry,
            )
        except ClientError as error:
            if error_code(error) in passthrough:
                raise
            raise self.error(operation, attempts, str(error)) from error
        except Exception as error:
            raise self.error(operation, attempts, f"{type(error).__name__}: {error}") from error
