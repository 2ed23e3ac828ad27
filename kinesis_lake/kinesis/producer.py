"""Put records into a stream reliably, and generate the sample events everyone shares.

PutRecords is not all-or-nothing: a call can succeed while some entries in it fail
(throttled shard, internal failure). Those entries must be re-sent, and only those, or the
stream gets duplicates. That bookkeeping lives here, once, for the CLI, demo, tests and
benchmarks.

Ordering per partition key: entries are sent in input order and a batch's failed entries
are re-sent, in order, before any later entry is sent. What PutRecords itself allows is the
limit: if within one call an entry fails and a later entry with the same key succeeds,
the retried entry lands after it. Strict per-key order needs one in-flight entry per key
(``batch_size=1``) or PutRecord with SequenceNumberForOrdering.
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

from kinesis_lake.errors import KinesisError
from kinesis_lake.kinesis.client import KinesisClient
from kinesis_lake.kinesis.retry import (
    DEFAULT_RETRY,
    RETRYABLE_ERROR_CODES,
    RetryPolicy,
    error_code,
    is_retryable,
)

_log = logging.getLogger(__name__)

_MAX_ENTRIES_PER_CALL = 500
_MAX_BYTES_PER_CALL = 5 * 1024 * 1024
_MAX_BYTES_PER_ENTRY = 1024 * 1024  # data + partition key

Entry = tuple[str, bytes]


@dataclass
class PutSummary:
    """What a put_records run did.

    ``sent``: entries written. ``retried_entries``: entries re-sent, for a per-entry failure
    or a failed whole call. ``failed``: per-entry failures Kinesis reported (each of them
    was re-sent; entries still failing after the last retry raise PutRecordsError).
    ``calls``: PutRecords requests made.
    """

    sent: int = 0
    retried_entries: int = 0
    failed: int = 0
    calls: int = 0


class PutRecordsError(KinesisError, RuntimeError):
    """Entries could not be written; ``summary`` tells what was written before that."""

    def __init__(
        self, stream_name: str, failed_entries: int, last_error_code: str, summary: PutSummary
    ) -> None:
        super().__init__(stream_name, failed_entries, last_error_code, summary)
        self.stream_name = stream_name
        self.failed_entries = failed_entries
        self.last_error_code = last_error_code
        self.summary = summary

    def __str__(self) -> str:
        return (
            f"PutRecords to Kinesis stream {self.stream_name!r}: {self.failed_entries} "
            f"entries not written, last error {self.last_error_code} "
            f"({self.summary.sent} entries were written before that)"
        )


class _Pacer:
    """Spaces calls so that entries go out at a steady ``rate_per_s`` on average."""

    def __init__(self, rate_per_s: float, sleep: Callable[[float], None]) -> None:
        self._rate = rate_per_s
        self._sleep = sleep
        self._next_at = time.monotonic()

    def wait_for(self, entries: int) -> None:
        now = time.monotonic()
        if self._next_at > now:
            self._sleep(self._next_at - now)
        self._next_at = max(now, self._next_at) + entries / self._rate


def put_records(
    client: KinesisClient,
    stream_name: str,
    entries: Iterable[Entry],
    *,
    batch_size: int = _MAX_ENTRIES_PER_CALL,
    rate_per_s: float | None = None,
    retry: RetryPolicy = DEFAULT_RETRY,
    sleep: Callable[[float], None] = time.sleep,
) -> PutSummary:
    """Write ``(partition_key, data)`` entries with PutRecords, re-sending only failures.

    Batches hold at most ``batch_size`` (<= 500) entries and 5 MiB. With ``rate_per_s``,
    batches shrink to about one second's worth of entries and are spaced to that rate.
    A whole call failing with a retryable error is retried as a whole; note that such a
    call (timeout, 5xx) may have written some entries already, so Kinesis delivery is
    at-least-once and consumers deduplicate by content, not by arrival.
    """
    if not 1 <= batch_size <= _MAX_ENTRIES_PER_CALL:
        raise ValueError(f"batch_size must be within 1..{_MAX_ENTRIES_PER_CALL}")
    if rate_per_s is not None and rate_per_s <= 0:
        raise ValueError("rate_per_s must be positive (or None for no limit)")
    if rate_per_s is not None:
        batch_size = min(batch_size, max(1, math.floor(rate_per_s)))
    pacer = _Pacer(rate_per_s, sleep) if rate_per_s is not None else None
    summary = PutSummary()
    rng = random.Random()
    for batch in _batches(entries, batch_size):
        _send_batch(client, stream_name, batch, summary, retry, sleep, rng, pacer)
    return summary


def _batches(entries: Iterable[Entry], batch_size: int) -> Iterator[list[Entry]]:
    batch: list[Entry] = []
    batch_bytes = 0
    for partition_key, data in entries:
        size = len(data) + len(partition_key.encode())
        if size > _MAX_BYTES_PER_ENTRY:
            raise ValueError(
                f"entry with partition key {partition_key!r} is {size} bytes; Kinesis accepts "
                f"at most {_MAX_BYTES_PER_ENTRY} bytes of data plus partition key"
            )
        if batch and (len(batch) == batch_size or batch_bytes + size > _MAX_BYTES_PER_CALL):
            yield batch
            batch, batch_bytes = [], 0
        batch.append((partition_key, data))
        batch_bytes += size
    if batch:
        yield batch


def _send_batch(
    client: KinesisClient,
    stream_name: str,
    batch: list[Entry],
    summary: PutSummary,
    retry: RetryPolicy,
    sleep: Callable[[float], None],
    rng: random.Random,
    pacer: _Pacer | None,
) -> None:
    pending = batch
    attempt = 0
    while True:
        if pacer is not None:
            pacer.wait_for(len(pending))
        summary.calls += 1
        try:
            response = client.put_records(
                StreamName=stream_name,
                Records=[{"PartitionKey": key, "Data": data} for key, data in pending],
            )
        except Exception as error:
            if not is_retryable(error):
                raise PutRecordsError(stream_name, len(pending), error_code(error), summary) from (
                    error
                )
            failed, last_code = pending, error_code(error)
        else:
            results = response["Records"]
            failed = [
                entry
                for entry, result in zip(pending, results, strict=True)
                if "ErrorCode" in result
            ]
            codes = [result["ErrorCode"] for result in results if "ErrorCode" in result]
            summary.sent += len(pending) - len(failed)
            summary.failed += len(failed)
            if not failed:
                return
            last_code = codes[-1]
            fatal = sorted(set(codes) - RETRYABLE_ERROR_CODES)
            if fatal:
                raise PutRecordsError(stream_name, len(failed), ", ".join(fatal), summary)
        if attempt >= retry.max_retries:
            raise PutRecordsError(stream_name, len(failed), last_code, summary)
        _log.info("re-sending %d of %d entries after %s", len(failed), len(pending), last_code)
        sleep(retry.delay(attempt, rng))
        attempt += 1
        summary.retried_entries += len(failed)
        pending = failed


# ----------------------------------------------------------------- sample events

_EVENT_TYPES = ("click", "page_view", "purchase", "profile_update")
_PLANS = ("free", "pro", "team")
_PROFILE_VERSIONS = 5
"""A profile update carries a version drawn from 1..5 per event, so versions of one user
arrive out of order and repeat, as they do from several producers."""
_USERS = 1000
_EVENT_SPACING_MS = 10
_WORDS = ("alpha", "bravo", "delta", "echo", "kilo", "lima", "oscar", "tango", "zulu")
_PAGES = ("/", "/search", "/product/42", "/cart", "/checkout")
_DEVICES = (("ios", "safari"), ("android", "chrome"), ("macos", "firefox"), ("windows", "edge"))
_SKUS = ("sku-001", "sku-002", "sku-003", "sku-004")


def sample_events(
    count: int,
    *,
    malformed_every: int = 0,
    unrouted_every: int = 0,
    seed: int = 0,
    start_ms: int | None = None,
) -> list[Entry]:
    """Deterministic clickstream events as ``(partition_key, data)`` entries (key = user_id).

    Each event has the flat fields of ``schemas/events.yaml`` and the nested ones of
    ``schemas/clickstream.yaml`` (the page and device it happened on; a purchase's items),
    so either declaration can be demonstrated with it. Same ``seed`` and ``start_ms`` give
    byte-identical output (``start_ms=None`` means now, so demos look live). Events are
    10 ms apart. Every ``malformed_every``-th event (1-based, 0 = never) is broken, cycling
    through the three kinds a pipeline must survive: invalid JSON, a wrong type
    (``"amount": "lots"``), a missing ``event_id``. Every ``unrouted_every``-th one is a
    heartbeat without ``event_type``, which no route of the clickstream takes. A
    ``profile_update`` also carries ``version``, ``op`` (``update``; ``delete`` for about one
    in six) and the profile (``email``, ``plan``), for the demo's upsert table.
    """
    if count < 0 or malformed_every < 0 or unrouted_every < 0:
        raise ValueError("count, malformed_every and unrouted_every must not be negative")
    rng = random.Random(seed)
    base_ms = int(time.time() * 1000) if start_ms is None else start_ms
    entries: list[Entry] = []
    malformed_so_far = 0
    for index in range(count):
        user_id = f"user-{rng.randrange(_USERS)}"
        # choices() draws with random(); choice() right after getrandbits(128) repeats
        # itself visibly with Mersenne Twister ("tango", "tango", "tango").
        word1, word2, word3 = rng.choices(_WORDS, k=3)
        event_ms = base_ms + index * _EVENT_SPACING_MS
        event = {
            "event_id": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
            "event_type": rng.choices(_EVENT_TYPES)[0],
            "user_id": user_id,
            "amount": round(rng.uniform(0.5, 500.0), 2),
            "event_time": datetime.fromtimestamp(event_ms / 1000, tz=UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "key1": word1,
            "key2": word2,
            "key3": f"{word3}-{rng.randrange(100)}",
        }
        event.update(_clickstream_fields(rng, str(event["event_type"])))
        if event["event_type"] == "profile_update":
            event.update(_profile_fields(random.Random(f"{seed}:{index}"), user_id))
        if unrouted_every and (index + 1) % unrouted_every == 0:
            data = _encode({"kind": "heartbeat", "sent_at": event["event_time"]})
        elif malformed_every and (index + 1) % malformed_every == 0:
            data = _malformed(event, malformed_so_far % 3)
            malformed_so_far += 1
        else:
            data = _encode(event)
        entries.append((user_id, data))
    return entries


def _clickstream_fields(rng: random.Random, event_type: str) -> dict[str, object]:
    os_name, browser = _DEVICES[rng.randrange(len(_DEVICES))]
    fields: dict[str, object] = {
        "page": {"url": _PAGES[rng.randrange(len(_PAGES))], "referrer": None},
        "context": {"device": {"os": os_name, "browser": browser}, "locale": "en-GB"},
    }
    if event_type == "click":
        fields["element"] = f"button-{rng.randrange(5)}"
    if event_type == "purchase":
        fields["order"] = {
            "currency": ("EUR", "USD")[rng.randrange(2)],
            "items": [
                {
                    "sku": _SKUS[rng.randrange(len(_SKUS))],
                    "quantity": 1 + rng.randrange(3),
                    "price": f"{rng.randrange(100, 10000) / 100:.2f}",
                }
                for _ in range(1 + rng.randrange(3))
            ],
        }
    return fields


def _profile_fields(rng: random.Random, user_id: str) -> dict[str, object]:
    """Drawn from an RNG of their own, so the other fields stay what they were."""
    return {
        "version": 1 + rng.randrange(_PROFILE_VERSIONS),
        "op": "delete" if rng.randrange(6) == 0 else "update",
        "email": f"{user_id}@example.com",
        "plan": _PLANS[rng.randrange(len(_PLANS))],
    }


def _encode(event: dict[str, object]) -> bytes:
    return json.dumps(event, separators=(",", ":")).encode()


def _malformed(event: dict[str, object], kind: int) -> bytes:
    if kind == 0:
        return _encode(event)[:-7]  # truncated: invalid JSON
    if kind == 1:
        return _encode({**event, "amount": "lots"})
    return _encode({k: v for k, v in event.items() if k != "event_id"})
