"""The ``kinesis`` source's options: names, defaults, parsing and the errors a user sees.

Options are checked on the driver when the query is defined (``.load()``), before any
micro-batch runs, so a typo fails with the option's name and the accepted values rather
than as a task failure deep inside an executor. :meth:`KinesisSourceOptions.parse` checks
everything that needs no network; :func:`check_against_stream` then checks what only the
stream can answer (does it exist, do the shard ids of a JSON starting position exist).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kinesis_lake.errors import ConfigurationError
from kinesis_lake.kinesis.client import AssumedRole
from kinesis_lake.kinesis.consumers import CONSUMER_TYPES
from kinesis_lake.kinesis.start_positions import (
    STARTING_POSITIONS,
    TIMESTAMP_FORMS,
    StartPosition,
    parse_timestamp_ms,
)
from kinesis_lake.kinesis.streams import Shard, could_have_aged_out

DEFAULT_METADATA_ROOT = Path.home() / ".kinesis-lake" / "kinesis-source"
MIN_CALL_INTERVAL_MS = 200
DEFAULT_BYTES_PER_TASK = 128 * 1024 * 1024
"""Spark's own default for packing small files into one read task (maxPartitionBytes)."""
"""Kinesis serves at most 5 GetRecords calls per second per shard, to all readers together."""

# option name (as users write it) -> (default, description). Spark passes keys in any case.
OPTIONS: dict[str, tuple[str | None, str]] = {
    "streamName": (None, "Kinesis stream to read (required)."),
    "regionName": (None, "AWS region; default: boto3's own resolution (AWS_REGION, profile)."),
    "endpointUrl": (None, "Kinesis API endpoint; default: the region's AWS endpoint."),
    "roleArn": (
        None,
        "IAM role to read as (STS AssumeRole with the default chain's credentials); "
        "default: the default chain's own identity.",
    ),
    "roleSessionName": ("kinesis-lake", "Session name of the assumed role (in CloudTrail)."),
    "stsEndpointUrl": (None, "STS endpoint for roleArn; default: botocore's (the region's)."),
    "startingPosition": (
        "latest",
        "trim_horizon | latest | at_timestamp | a JSON map {shardId: sequenceNumber}.",
    ),
    "startingTimestamp": (None, "For at_timestamp: ISO-8601 time or epoch milliseconds."),
    "maxRecordsPerShard": ("100000", "Kinesis records read per shard per micro-batch."),
    "maxRecordsPerBatch": (
        None,
        "Default Spark read limit (ReadMaxRows) over all shards. Counts Kinesis records, "
        "not rows: a KPL aggregate counts once, yields many rows, and is never split.",
    ),
    "maxBytesPerShard": (
        None,
        "Bytes of Kinesis records (data plus partition key) read per shard per micro-batch, "
        "a whole number of bytes. A read stops before the record that would pass it, or "
        "after the one that reaches it; its first record is always read, so a record "
        "larger than the cap is read alone. A KPL aggregate is one record, never split.",
    ),
    "maxBytesPerBatch": (
        None,
        "The same in bytes over all shards of a micro-batch, split across the shards read; "
        "Spark's default read limit (ReadMaxBytes) unless maxRecordsPerBatch is set, and "
        "applied beside it when it is.",
    ),
    "metadataPath": (
        str(DEFAULT_METADATA_ROOT),
        "Where executors record how far they read (shared storage on a cluster).",
    ),
    "failOnDataLoss": ("true", "Fail when unread records expired; false skips and counts."),
    "availableNow": (
        "false",
        "true: read only what arrived before the query started, then report nothing new, as "
        "Trigger.AvailableNow does on Spark 4.2+. For Spark 4.0/4.1, where AvailableNow runs "
        "one micro-batch: use it with a processing-time trigger and processAllAvailable() "
        "(kinesis_lake.spark.kinesis.available_now does).",
    ),
    "earlierReads": (
        None,
        'JSON {"sinceMs": ms, "tipMs": {shardId: ms}} (server time): since when records '
        "are this deployment's to read, and when each shard was last read to its tip. A "
        "query started without checkpoint then reports what expired unread on a shard no "
        "record of which was committed; kinesis-lake's ingestion passes what its raw "
        "table records.",
    ),
    "bytesPerTask": (
        str(DEFAULT_BYTES_PER_TASK),
        "Shards are packed into read tasks of about this many bytes per micro-batch (each "
        "shard's size guessed from its last read), so a sink writes files that follow the "
        "data, not the shard count. 0: one task per shard.",
    ),
    "minTasks": (
        "1",
        "Cores to spread a micro-batch over: it is split into at least this many tasks "
        "while each still gets 4 MiB or more (Spark's rule for file splits).",
    ),
    "idleTimeBetweenReadsMs": ("1000", "Pause before re-polling a stream found idle."),
    "maxIdleTimeBetweenReadsMs": (
        "0",
        "Longest pause an idle stream's re-polling backs off to: the pause doubles after "
        "each micro-batch that read nothing, from idleTimeBetweenReadsMs up to this (every "
        "poll is a micro-batch: tasks and a commit). 0: no back-off.",
    ),
    "minCallIntervalMs": (
        str(MIN_CALL_INTERVAL_MS),
        "Minimum gap between GetRecords calls per shard (>= 200: Kinesis allows 5/s).",
    ),
    "maxRetries": ("8", "Retries of a throttled or failed Kinesis call before failing."),
    "consumerType": (
        "polling",
        "polling: GetRecords, sharing each shard's 2 MB/s with other readers; efo: enhanced "
        "fan-out (SubscribeToShard) under a registered consumer with its own 2 MB/s.",
    ),
    "consumerName": (
        None,
        "For efo: the consumer to read as, registered if missing; one query at a time. "
        "Default: kinesis-lake-<hash of metadataPath>, which release_consumer(options) "
        "deregisters after the query stops (a named consumer is yours to deregister).",
    ),
}
_BY_LOWER = {name.lower(): name for name in OPTIONS}


class KinesisOptionError(ConfigurationError):
    """An option of the ``kinesis`` source is missing, unknown or malformed."""


@dataclass(frozen=True)
class EarlierReads:
    """What earlier queries of a deployment read, kept where a lost checkpoint cannot
    take it (the raw table): since when (``since_ms``) and each shard's last read to its
    tip (``tip_ms``), server times. See :mod:`kinesis_lake.spark.kinesis.earlier_runs`."""

    since_ms: int | None = None
    tip_ms: dict[str, int] = field(default_factory=dict)

    def to_option(self) -> str:
        return json.dumps({"sinceMs": self.since_ms, "tipMs": self.tip_ms}, sort_keys=True)

    @classmethod
    def parse(cls, text: str | None) -> EarlierReads:
        if not text:
            return cls()
        try:
            data = json.loads(text)
            since = data.get("sinceMs")
            return cls(
                since_ms=None if since is None else int(since),
                tip_ms={str(k): int(v) for k, v in data.get("tipMs", {}).items()},
            )
        except (ValueError, TypeError, AttributeError) as error:
            raise KinesisOptionError(
                f"Option 'earlierReads'={text!r} is not valid ({error}): expected "
                '{"sinceMs": <ms>, "tipMs": {"<shardId>": <ms>, ...}}, or leave it unset.'
            ) from error


@dataclass(frozen=True)
class KinesisSourceOptions:
    """Parsed, checked options. ``starting_position`` of kind LATEST is resolved to a
    timestamp only when the query's initial offset is made (see ``initial_start``)."""

    stream_name: str
    region_name: str | None
    endpoint_url: str | None
    role: AssumedRole | None
    starting_position: StartPosition
    per_shard_start: dict[str, StartPosition]
    max_records_per_shard: int
    max_records_per_batch: int | None
    metadata_path: str
    metadata_path_defaulted: bool
    fail_on_data_loss: bool
    idle_ms: int
    max_idle_ms: int
    min_call_interval_s: float
    max_retries: int
    consumer_type: str = "polling"
    consumer_name: str = ""
    consumer_name_defaulted: bool = True
    earlier_reads: EarlierReads = field(default_factory=EarlierReads)
    available_now: bool = False
    max_bytes_per_shard: int | None = None
    max_bytes_per_batch: int | None = None
    bytes_per_task: int = DEFAULT_BYTES_PER_TASK
    min_tasks: int = 1

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> KinesisSourceOptions:
        values = _named_values(options)
        if not values["streamName"]:
            raise KinesisOptionError(
                "Option 'streamName' is required: .option('streamName', '<your stream>')."
            )
        start, per_shard = _parse_start(values["startingPosition"], values["startingTimestamp"])
        batch_limit = values["maxRecordsPerBatch"]
        consumer_type = str(values["consumerType"]).strip().lower()
        if consumer_type not in CONSUMER_TYPES:
            raise KinesisOptionError(
                f"Option 'consumerType'={values['consumerType']!r}: use one of "
                f"{', '.join(CONSUMER_TYPES)}."
            )
        metadata_path = str(values["metadataPath"])
        given = {key.lower() for key, value in options.items() if str(value).strip()}
        if consumer_type == "efo" and not {"metadatapath", "consumername"} & given:
            raise KinesisOptionError(
                "Option 'consumerType'='efo' needs a consumer of the query's own: set "
                "'metadataPath' (the consumer is named after it) or 'consumerName'. The "
                "default metadataPath is shared by every query on this machine, and queries "
                "sharing a consumer take each other's subscriptions away."
            )
        if consumer_type != "efo" and "consumername" in given:
            raise KinesisOptionError(
                "Option 'consumerName' applies to consumerType=efo only: set "
                ".option('consumerType', 'efo') or drop consumerName."
            )
        return cls(
            stream_name=str(values["streamName"]),
            region_name=values["regionName"] or None,
            endpoint_url=values["endpointUrl"] or None,
            role=_role(options, values),
            starting_position=start,
            per_shard_start=per_shard,
            max_records_per_shard=_whole_number("maxRecordsPerShard", values),
            max_records_per_batch=(
                None if batch_limit is None else _whole_number("maxRecordsPerBatch", values)
            ),
            metadata_path=metadata_path,
            metadata_path_defaulted="metadatapath" not in given,
            fail_on_data_loss=_boolean("failOnDataLoss", values),
            idle_ms=_whole_number("idleTimeBetweenReadsMs", values, minimum=0),
            max_idle_ms=_whole_number("maxIdleTimeBetweenReadsMs", values, minimum=0),
            min_call_interval_s=(
                _whole_number("minCallIntervalMs", values, minimum=MIN_CALL_INTERVAL_MS) / 1000
            ),
            max_retries=_whole_number("maxRetries", values, minimum=0),
            consumer_type=consumer_type,
            consumer_name=values["consumerName"] or default_consumer_name(metadata_path),
            consumer_name_defaulted=not values["consumerName"],
            earlier_reads=EarlierReads.parse(values["earlierReads"]),
            available_now=_boolean("availableNow", values),
            max_bytes_per_shard=_byte_count("maxBytesPerShard", values),
            max_bytes_per_batch=_byte_count("maxBytesPerBatch", values),
            bytes_per_task=_whole_number("bytesPerTask", values, minimum=0),
            min_tasks=_whole_number("minTasks", values),
        )

    def initial_start(self, now_ms: int) -> tuple[StartPosition, StartPosition]:
        """(start for the shards listed now, start for shards that appear later).

        ``latest`` becomes "arrived at or after ``now_ms``": pinned when the query's
        initial offset is made, so records that arrive between planning and the first
        read are not lost, as they would be with an iterator of type LATEST opened later
        by an executor. Shards that appear later (split or merge children) are read from
        their first record under every starting position except ``at_timestamp``: they
        were created after the query started, so all their records are new, and a driver
        clock ahead of Kinesis' arrival timestamps must not skip any of them.
        ``at_timestamp`` applies its timestamp to later shards too, since the user's
        instant may lie in the future.
        """
        start = self.starting_position
        if start.kind == "LATEST":
            return StartPosition.at_timestamp(now_ms), StartPosition.trim_horizon()
        if start.kind == "AT_TIMESTAMP":
            return start, start
        return start, StartPosition.trim_horizon()


def check_against_stream(options: KinesisSourceOptions, shards: Sequence[Shard]) -> None:
    """Refuse a JSON starting position naming shards the stream never had.

    A shard the listing lacks is not necessarily a typo: Kinesis stops listing a closed
    shard once its records are past retention ("ListShards does not list expired
    shards"), so a position saved before that, such as the raw table's committed
    positions a day after a split, names it. Kinesis numbers shards in creation order and
    a closed shard's children are newer and still listed, so a missing id numbered below
    the newest listed shard is taken as aged out: it has nothing left to read, and the
    query simply does not read it (:meth:`SourceOffset.initial` starts only the shards
    listed). A missing id that is not of that form cannot have aged out, and is refused.
    """
    known = {s.shard_id for s in shards}
    impossible = sorted(
        shard_id
        for shard_id in set(options.per_shard_start) - known
        if not could_have_aged_out(shard_id, known)
    )
    if impossible:
        raise KinesisOptionError(
            f"startingPosition names shards that stream {options.stream_name!r} does not "
            f"have: {', '.join(impossible)}. Its shards are: {', '.join(sorted(known))}."
        )


def default_consumer_name(metadata_path: str) -> str:
    """One consumer per query: a consumer holds one subscription per shard, so two
    queries sharing one would take each other's subscriptions away."""
    return f"kinesis-lake-{hashlib.sha256(metadata_path.encode()).hexdigest()[:16]}"


def _role(options: Mapping[str, str], values: Mapping[str, str | None]) -> AssumedRole | None:
    given = {key.lower() for key in options}
    if not values["roleArn"]:
        orphans = [name for name in ("roleSessionName", "stsEndpointUrl") if name.lower() in given]
        if orphans:
            raise KinesisOptionError(
                f"Option {orphans[0]} needs roleArn: set .option('roleArn', "
                "'arn:aws:iam::<account>:role/<name>') or remove it."
            )
        return None
    return AssumedRole(
        role_arn=str(values["roleArn"]),
        session_name=str(values["roleSessionName"]),
        sts_endpoint_url=values["stsEndpointUrl"] or None,
    )


def _named_values(options: Mapping[str, str]) -> dict[str, str | None]:
    values: dict[str, str | None] = {name: default for name, (default, _) in OPTIONS.items()}
    for key, value in options.items():
        name = _BY_LOWER.get(key.lower())
        if name is None:
            if key.lower() == "path":  # Spark's own key for .load(path); the name is an option
                continue
            raise KinesisOptionError(
                f"Unknown option {key!r} for format 'kinesis'. Allowed options: "
                f"{', '.join(OPTIONS)}."
            )
        values[name] = value
    return values


def _parse_start(
    position: str | None, timestamp: str | None
) -> tuple[StartPosition, dict[str, StartPosition]]:
    text = (position or "latest").strip()
    lowered = text.lower()
    if timestamp is not None and lowered != "at_timestamp":
        raise KinesisOptionError(
            f"Option 'startingTimestamp' is only used with startingPosition=at_timestamp, "
            f"but startingPosition is {text!r}. Remove one of the two."
        )
    if lowered == "trim_horizon":
        return StartPosition.trim_horizon(), {}
    if lowered == "latest":
        return StartPosition("LATEST"), {}
    if lowered == "at_timestamp":
        if not timestamp:
            raise KinesisOptionError(
                "startingPosition 'at_timestamp' needs option 'startingTimestamp' "
                "(ISO-8601 such as 2026-01-31T12:00:00Z, or epoch milliseconds)."
            )
        try:
            return StartPosition.at_timestamp(parse_timestamp_ms(timestamp)), {}
        except ValueError:
            raise KinesisOptionError(
                f"startingTimestamp={timestamp!r} is neither {TIMESTAMP_FORMS}."
            ) from None
    if text.startswith("{"):
        return StartPosition.trim_horizon(), _parse_shard_map(text)
    raise KinesisOptionError(
        f"startingPosition={text!r} is not allowed: use one of {', '.join(STARTING_POSITIONS)}, "
        'or a JSON map of shard ids to sequence numbers such as {"shardId-000000000000": "4959…"}.'
    )


def _parse_shard_map(text: str) -> dict[str, StartPosition]:
    """A JSON map of shard id -> the last sequence number already processed on it.

    Reading starts *after* each number, as it does from a checkpoint. Shards the map does
    not name start at TRIM_HORIZON.
    """
    try:
        mapping = json.loads(text)
    except json.JSONDecodeError as error:
        raise KinesisOptionError(
            f"startingPosition is not valid JSON ({error}); expected "
            '{"shardId-000000000000": "<sequence number>", ...}.'
        ) from error
    if (
        not isinstance(mapping, dict)
        or not mapping
        or not all(isinstance(v, str) and v.isdigit() for v in mapping.values())
    ):
        raise KinesisOptionError(
            "startingPosition as JSON must map shard ids to decimal sequence-number strings, "
            'e.g. {"shardId-000000000000": "4959…"}; reading starts after each given number.'
        )
    return {shard: StartPosition.after(seq) for shard, seq in mapping.items()}


def _whole_number(name: str, values: Mapping[str, str | None], *, minimum: int = 1) -> int:
    raw = values[name]
    try:
        number = int(str(raw).strip())
    except ValueError:
        number = minimum - 1
    if number < minimum:
        raise KinesisOptionError(f"Option {name!r}={raw!r} must be a whole number >= {minimum}.")
    return number


def _byte_count(name: str, values: Mapping[str, str | None]) -> int | None:
    """A byte cap: unset, or a whole number of bytes >= 1."""
    raw = values[name]
    if raw is None or not str(raw).strip():
        return None
    text = str(raw).strip()
    if not text.isdigit() or int(text) < 1:
        raise KinesisOptionError(
            f"Option {name!r}={raw!r} must be a whole number of bytes >= 1, such as "
            "1048576 for 1 MiB (no unit suffix), or left unset for no byte cap."
        )
    return int(text)


def _boolean(name: str, values: Mapping[str, str | None]) -> bool:
    raw = str(values[name]).strip().lower()
    if raw not in ("true", "false"):
        raise KinesisOptionError(f"Option {name!r}={values[name]!r} must be true or false.")
    return raw == "true"
