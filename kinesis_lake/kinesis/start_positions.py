"""Where a shard read may start: the vocabulary settings, options and readers share.

``STARTING_POSITIONS`` and ``parse_timestamp_ms`` are what the deployment's settings, the
Spark source's options, the CLI's ``--as-of`` and the Iceberg time-travel reader accept;
``StartPosition`` is one resolved position, JSON-able for a Spark offset and turned into
``GetShardIterator`` arguments by the shard reader. Nothing here talks to Kinesis.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

_ITERATOR_KINDS = (
    "TRIM_HORIZON",
    "LATEST",
    "AT_TIMESTAMP",
    "AT_SEQUENCE_NUMBER",
    "AFTER_SEQUENCE_NUMBER",
)


STARTING_POSITIONS = ("trim_horizon", "latest", "at_timestamp")
"""Where a consumer with no committed position may start: the names settings and the
Spark source accept (``at_timestamp`` needs a time as well)."""


def parse_timestamp_ms(text: str) -> int:
    """ISO-8601 (naive means UTC) or epoch milliseconds -> epoch milliseconds.

    Raises ValueError; each caller names its own setting or option in the message.
    """
    stripped = text.strip()
    if stripped.isdigit():
        return int(stripped)
    moment = datetime.fromisoformat(stripped.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


TIMESTAMP_FORMS = "ISO-8601 (2026-01-31T12:00:00Z) nor epoch milliseconds"
"""How a message completes "... is neither" after a value ``parse_timestamp_ms`` refused."""


@dataclass(frozen=True)
class StartPosition:
    """Where a read starts; JSON-able so it can live in a Spark offset."""

    kind: str
    sequence_number: str | None = None
    timestamp_ms: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in _ITERATOR_KINDS:
            raise ValueError(f"start position kind {self.kind!r} is not one of {_ITERATOR_KINDS}")
        if self.kind.endswith("_SEQUENCE_NUMBER") and self.sequence_number is None:
            raise ValueError(f"start position {self.kind} needs a sequence_number")
        if self.kind == "AT_TIMESTAMP" and self.timestamp_ms is None:
            raise ValueError("start position AT_TIMESTAMP needs timestamp_ms")

    @classmethod
    def trim_horizon(cls) -> StartPosition:
        """The oldest retained record."""
        return cls("TRIM_HORIZON")

    @classmethod
    def at_timestamp(cls, timestamp_ms: int) -> StartPosition:
        """The first record that arrived at or after ``timestamp_ms`` (epoch ms)."""
        return cls("AT_TIMESTAMP", timestamp_ms=timestamp_ms)

    @classmethod
    def after(cls, sequence_number: str) -> StartPosition:
        """Resume right after a record that was already processed."""
        return cls("AFTER_SEQUENCE_NUMBER", sequence_number=sequence_number)

    def iterator_args(self) -> dict[str, Any]:
        """GetShardIterator arguments for exactly this position."""
        args: dict[str, Any] = {"ShardIteratorType": self.kind}
        if self.sequence_number is not None:
            args["StartingSequenceNumber"] = self.sequence_number
        if self.timestamp_ms is not None:
            args["Timestamp"] = datetime.fromtimestamp(self.timestamp_ms / 1000, tz=UTC)
        return args

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StartPosition:
        return cls(data["kind"], data.get("sequence_number"), data.get("timestamp_ms"))
