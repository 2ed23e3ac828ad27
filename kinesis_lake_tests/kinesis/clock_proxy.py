"""A Kinesis endpoint with a clock: kinesalite behind a proxy that lets time pass.

kinesalite keeps every record and every shard for ever, so nothing a consumer does about
retention (records trimmed unread, a resume point that no longer exists, a closed parent
that stops being listed a day after a reshard) can be tested against it. This proxy, a
:class:`~kinesis_lake_tests.kinesis.fault_proxy.FaultProxy` (so faults can still be injected),
keeps a simulated clock, ``now = wall clock + advanced``, and rewrites kinesalite's
responses as real Kinesis would answer at that simulated time.

Behaviours modelled, with the AWS documentation each follows:

* **Retention** (default 24 h, ``retention_hours``). "Data records are accessible for a
  default of 24 hours from the time they are added to a stream"
  (Kinesis Developer Guide, *Changing the data retention period*). A record whose
  ApproximateArrivalTimestamp is older than ``now - retention`` is never returned by
  GetRecords. Trimming is exact at the boundary here; real Kinesis may keep records a
  little longer, never shorter, so a consumer correct here is correct there.
* **TRIM_HORIZON** "Start reading at the last untrimmed record in the shard in the system,
  which is the oldest data record in the shard" (API Reference, *GetShardIterator*): a
  TRIM_HORIZON read begins at the oldest retained record.
* **AT_/AFTER_SEQUENCE_NUMBER on a trimmed record.** The API reference does not say; the
  choice made here is the one KCL and Spark's Kinesis connector are written against: the
  iterator is granted and reading continues at the oldest retained record after that
  position, without an error. A consumer must therefore notice the gap itself (our
  :mod:`~kinesis_lake.kinesis.shard_reader` does, from the missing resume record).
* **Expired closed shards are not listed.** "ListShards ... does not list expired shards"
  and DescribeStream likewise omits them; a closed shard expires once all its records are
  past retention, i.e. ``retention`` after it was closed (Developer Guide, *Resharding a
  stream*: "parent shards ... are accessible ... until they expire"). The close time is read
  from the EndingSequenceNumber kinesalite gives a closed shard, which encodes it.
  GetShardIterator on such a shard answers ResourceNotFoundException.
* **Iterators expire** "5 minutes after it is returned to the requester" (API Reference,
  *GetShardIterator*); an iterator older than that on the simulated clock gets
  ExpiredIteratorException from GetRecords. NextShardIterator values are fresh iterators.

* **The server's clock.** Every response's Date header is the simulated time, as real
  Kinesis' Date header is AWS' clock, and DescribeStream(Summary) report the proxy's
  ``RetentionPeriodHours``.

Time is simulated by offset, not by rewriting: ApproximateArrivalTimestamp in responses
stays kinesalite's wall-clock value (consumers compare it with their own wall clock), while
the proxy ages each record from its arrival plus the total advanced by then.

Not modelled: throughput limits (inject them with ``inject``), MillisBehindLatest
(kinesalite's is passed on unchanged), ``AT_TIMESTAMP`` before the trim horizon (it behaves
as TRIM_HORIZON, which is what real Kinesis does too).

``trimmed`` counts, per shard, the distinct records this proxy withheld because they had
expired, and ``hidden_shards`` the shards it stopped listing: a test or the soak compares
them with what the consumer reported as lost.
"""

from __future__ import annotations

import bisect
import itertools
import json
import threading
import time
from collections import defaultdict

from kinesis_lake_tests.kinesis.fault_proxy import _AMZ_JSON, FaultProxy, _error_body

ITERATOR_TTL_S = 300.0
"""Real Kinesis shard iterators expire 5 minutes after GetShardIterator returned them."""

_Reply = tuple[int, list[tuple[str, str]], bytes]


class ClockProxy(FaultProxy):
    """kinesalite as real Kinesis would look ``advanced`` seconds from now.

    Use as a context manager (``with ClockProxy(url) as proxy:``), point clients at
    ``proxy.url``, and call ``advance(seconds)`` to let time pass.
    """

    def __init__(self, upstream_url: str, *, retention_hours: int = 24) -> None:
        super().__init__(upstream_url)
        self.retention_hours = retention_hours  # whole hours, as Kinesis sets it
        self.retention_s = retention_hours * 3600
        self.advanced_s = 0.0
        # (wall time of an advance, total advanced from then on): the simulated time of a
        # wall-clock event (an arrival, a shard closing) is its time plus the total advanced
        # when it happened, so records produced after an advance are young, not born old.
        self._advances: list[tuple[float, float]] = [(float("-inf"), 0.0)]
        self._iterators: dict[str, tuple[str, float, str]] = {}
        self._token_numbers = itertools.count()
        self._trimmed: dict[str, set[str]] = defaultdict(set)
        self.hidden_shards: set[str] = set()
        self._clock_lock = threading.Lock()

    def __enter__(self) -> ClockProxy:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ the clock

    def now(self) -> float:
        """The simulated time, epoch seconds."""
        return time.time() + self.advanced_s

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` of simulated time pass (records age, iterators expire)."""
        if seconds < 0:
            raise ValueError("time only moves forward")
        with self._clock_lock:
            self.advanced_s += seconds
            self._advances.append((time.time(), self.advanced_s))

    def simulated(self, wall_time: float) -> float:
        """The simulated time at which a wall-clock event at ``wall_time`` happened."""
        with self._clock_lock:
            index = bisect.bisect_right(self._advances, (wall_time, float("inf"))) - 1
            return wall_time + self._advances[index][1]

    def trim_horizon(self) -> float:
        """Epoch seconds before which records have expired."""
        return self.now() - self.retention_s

    @property
    def trimmed(self) -> dict[str, int]:
        """Shard id -> distinct expired records withheld from GetRecords so far."""
        with self._clock_lock:
            return {shard: len(seqs) for shard, seqs in self._trimmed.items()}

    # ------------------------------------------------------------------ rewriting

    def _exchange(
        self, action: str, path: str, headers: list[tuple[str, str]], body: bytes
    ) -> _Reply:
        if action == "GetRecords":
            return self._get_records(path, headers, body)
        if action == "GetShardIterator":
            return self._get_shard_iterator(path, headers, body)
        reply = self._forward("POST", path, headers, body)
        if reply[0] == 200 and action in ("ListShards", "DescribeStream"):
            reply = self._drop_expired_shards(action, reply)
        if reply[0] == 200 and action in ("DescribeStream", "DescribeStreamSummary"):
            reply = self._report_retention(reply)
        return reply

    def _report_retention(self, reply: _Reply) -> _Reply:
        """RetentionPeriodHours as this proxy applies it, not kinesalite's."""
        status, headers, body = reply
        response = json.loads(body)
        for key in ("StreamDescription", "StreamDescriptionSummary"):
            if key in response:
                response[key]["RetentionPeriodHours"] = self.retention_hours
        return status, headers, json.dumps(response).encode()

    def _issue(self, upstream_iterator: str, shard_id: str) -> str:
        token = f"clock-proxy-iterator-{next(self._token_numbers)}"
        with self._clock_lock:
            self._iterators[token] = (upstream_iterator, self.now(), shard_id)
        return token

    def _get_shard_iterator(self, path: str, headers: list[tuple[str, str]], body: bytes) -> _Reply:
        request = json.loads(body)
        shard_id = str(request.get("ShardId", ""))
        if shard_id in self.hidden_shards:
            return _error(
                "ResourceNotFoundException",
                f"Shard {shard_id} in stream {request.get('StreamName')} has expired.",
            )
        status, reply_headers, reply_body = self._forward("POST", path, headers, body)
        if status != 200:
            return status, reply_headers, reply_body
        response = json.loads(reply_body)
        response["ShardIterator"] = self._issue(response["ShardIterator"], shard_id)
        return status, reply_headers, json.dumps(response).encode()

    def _get_records(self, path: str, headers: list[tuple[str, str]], body: bytes) -> _Reply:
        request = json.loads(body)
        with self._clock_lock:
            entry = self._iterators.get(str(request.get("ShardIterator")))
        if entry is None:
            return self._forward("POST", path, headers, body)
        upstream_iterator, issued_at, shard_id = entry
        if self.now() - issued_at > ITERATOR_TTL_S:
            return _error(
                "ExpiredIteratorException",
                f"Iterator expired: issued {self.now() - issued_at:.0f} s ago (clock proxy).",
            )
        # Expired records are skipped upstream page by page until a retained record, the
        # tip (an empty page) or the end of a closed shard: an all-expired page must not
        # look like the tip to the consumer.
        while True:
            forwarded = json.dumps({**request, "ShardIterator": upstream_iterator}).encode()
            status, reply_headers, reply_body = self._forward("POST", path, headers, forwarded)
            if status != 200:
                return status, reply_headers, reply_body
            response = json.loads(reply_body)
            horizon = self.trim_horizon()
            records = response.get("Records", [])
            retained = [
                r
                for r in records
                if self.simulated(float(r["ApproximateArrivalTimestamp"])) >= horizon
            ]
            expired = [r["SequenceNumber"] for r in records if r not in retained]
            if expired:
                with self._clock_lock:
                    self._trimmed[shard_id].update(expired)
            next_iterator = response.get("NextShardIterator")
            if retained or not records or next_iterator is None:
                break
            upstream_iterator = next_iterator
        response["Records"] = retained
        if next_iterator is not None:
            response["NextShardIterator"] = self._issue(next_iterator, shard_id)
        return status, reply_headers, json.dumps(response).encode()

    def _drop_expired_shards(self, action: str, reply: _Reply) -> _Reply:
        status, headers, body = reply
        response = json.loads(body)
        holder = response["StreamDescription"] if action == "DescribeStream" else response
        kept = []
        for shard in holder.get("Shards", []):
            ending = shard.get("SequenceNumberRange", {}).get("EndingSequenceNumber")
            if ending is not None and self.simulated(_closed_at(ending)) < self.trim_horizon():
                with self._clock_lock:
                    self.hidden_shards.add(shard["ShardId"])
                continue
            kept.append(shard)
        holder["Shards"] = kept
        return status, headers, json.dumps(response).encode()


def _closed_at(ending_sequence_number: str) -> float:
    """When kinesalite closed a shard, from the EndingSequenceNumber it gave it.

    kinesalite's version-2 sequence numbers are 47 hex digits: a '2', the shard's creation
    time (9 digits, seconds), ... and at digits 29..37 the sequence time, which for an
    ending sequence number is the moment of the split or merge (kinesalite db/index.js
    ``stringifySequence``). Anything else is treated as never closing.
    """
    digits = format(int(ending_sequence_number), "x")
    if len(digits) != 47 or not digits.endswith("2"):
        return float("inf")
    return float(int(digits[29:38], 16))


def _error(code: str, message: str) -> _Reply:
    return 400, [("Content-Type", _AMZ_JSON)], _error_body(code, message)
