"""Retry policy shared by every Kinesis call this package makes.

botocore can retry on its own, but then the retries are invisible: they are not counted,
they cannot be bounded per shard, and fault-injection tests would exercise botocore instead
of this code. So clients are built with botocore retries off (see ``client.py``) and every
call goes through :func:`call_with_retry`, which backs off with full jitter (the AWS
recommendation for many clients contending for one shard's throughput).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import urllib3.exceptions
from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    ReadTimeoutError,
)

T = TypeVar("T")

#: Error codes that mean "try again later" rather than "this request is wrong".
#: Also used by the producer for per-entry PutRecords error codes.
RETRYABLE_ERROR_CODES = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "LimitExceededException",
        "ThrottlingException",
        "InternalFailure",
        "InternalFailureException",  # how an event stream (SubscribeToShard) names it
        "ServiceUnavailable",
        "KMSThrottlingException",
    }
)

_RETRYABLE_TRANSPORT_ERRORS = (
    EndpointConnectionError,
    ConnectionClosedError,
    ReadTimeoutError,
    ConnectTimeoutError,
    # An event stream (SubscribeToShard) is read by urllib3 directly: a dropped or
    # stalled subscription raises urllib3's errors, which botocore never wraps.
    urllib3.exceptions.ProtocolError,
    urllib3.exceptions.ReadTimeoutError,
)

# 2**62 * any sane base delay is far beyond max_delay_s; capping the exponent keeps the
# float arithmetic from overflowing on absurd attempt numbers.
_MAX_EXPONENT = 62


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently to retry a throttled or failed call."""

    max_retries: int = 8
    base_delay_s: float = 0.1
    max_delay_s: float = 5.0

    def delay(self, attempt: int, rng: random.Random) -> float:
        """Full-jitter backoff for retry number ``attempt`` (0 = first retry).

        A uniform draw in [0, min(max, base * 2**attempt)] spreads competing readers
        apart instead of having them retry in lock step against the same shard.
        """
        ceiling = min(self.max_delay_s, self.base_delay_s * 2 ** min(attempt, _MAX_EXPONENT))
        return rng.uniform(0.0, ceiling)


#: Shared default (the policy is frozen, so one instance can serve every caller).
DEFAULT_RETRY = RetryPolicy()


def error_code(error: BaseException) -> str:
    """The AWS error code of ``error`` or its class name (for logs and error messages)."""
    if isinstance(error, ClientError):
        return str(error.response.get("Error", {}).get("Code", "Unknown"))
    return type(error).__name__


def is_retryable(error: BaseException) -> bool:
    """True when repeating the same request later can succeed.

    Throttling, server-side failures (any HTTP 5xx) and broken or slow connections are
    transient. Everything else (validation errors, missing streams, expired iterators,
    which need a new iterator rather than a repeat) is not.
    """
    if isinstance(error, ClientError):
        if error_code(error) in RETRYABLE_ERROR_CODES:
            return True
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        return int(status) >= 500
    return isinstance(error, _RETRYABLE_TRANSPORT_ERRORS)


def call_with_retry(
    operation: Callable[[], T],
    policy: RetryPolicy,
    *,
    sleep: Callable[[float], None],
    rng: random.Random,
    on_retry: Callable[[BaseException], None] | None = None,
) -> T:
    """Run ``operation``, retrying retryable errors up to ``policy.max_retries`` times.

    The last error is re-raised unchanged so callers can wrap it with their own context
    (stream, shard, operation). ``on_retry`` lets callers count retries for metrics.
    """
    attempt = 0
    while True:
        try:
            return operation()
        except Exception as error:
            if not is_retryable(error) or attempt >= policy.max_retries:
                raise
            if on_retry is not None:
                on_retry(error)
            sleep(policy.delay(attempt, rng))
            attempt += 1
