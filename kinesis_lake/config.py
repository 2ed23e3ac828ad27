"""Every setting kinesis-lake reads, in one place, with its default and its check.

Settings come from environment variables so that the same code runs on a laptop and on
AWS: the profile files under ``profiles/`` are just variable assignments. Dagster
resources take the same names through ``dg.EnvVar``; the CLI and the Spark jobs read them
here. A bad value fails at start-up with a message naming the variable and the fix,
instead of surfacing later as a confusing Spark or boto3 error.

Credentials are deliberately absent: boto3's own chain (environment, profile, instance
role) and pyiceberg's own catalog configuration supply them, so no secret ever passes
through this object, its logs, or Dagster metadata.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, get_args, get_type_hints

from kinesis_lake.errors import ConfigurationError
from kinesis_lake.events.declaration import AGGREGATE_TABLE, QUARANTINE_TABLE, RAW_TABLE
from kinesis_lake.iceberg.defaults import DEFAULT_NAMESPACE, default_data_dir
from kinesis_lake.kinesis.client import AssumedRole
from kinesis_lake.kinesis.consumers import CONSUMER_TYPES
from kinesis_lake.kinesis.start_positions import (
    STARTING_POSITIONS,
    TIMESTAMP_FORMS,
    parse_timestamp_ms,
)

ENDPOINT_KINDS = ("auto", "kinesalite", "moto")
_CONSUMER_NAME = re.compile(r"[a-zA-Z0-9_.-]{1,128}")
"""What Kinesis accepts as a consumer name."""


class SettingsError(ConfigurationError):
    """A setting has a value the pipeline cannot run with; the message says which and why."""


def parse_bool(raw: str) -> bool:
    """true/false, 1/0, yes/no (any case): what people write in env files."""
    lowered = raw.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise ValueError("use true or false")


def _repo_root() -> Path:
    return Path(__file__).resolve().parent.parent


def setting(
    variable: str,
    help: str,
    *,
    default: object = None,
    factory: Callable[[], object] | None = None,
) -> Any:
    """One field of :class:`Settings`: its environment variable and help ride along as
    field metadata, so the field is the only place the setting is declared."""
    metadata = {"variable": variable, "help": help}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


SPARK_CONNECT_PORT = 15002
"""Spark Connect's own default port (``kinesis-lake connect-server``, ``make dev``)."""


@dataclass(frozen=True)
class Settings:
    """The resolved configuration of one kinesis-lake deployment.

    Each field is one setting, declared once: type, default, environment variable and help.
    ``from_env``, ``describe`` (``kinesis-lake settings`` and the README's table) and the
    Dagster resource's fields and descriptions are all read off these fields.
    """

    stream_name: str = setting(
        "KINESIS_STREAM_NAME",
        "Kinesis stream to ingest, unless the declaration file names its streams.",
        default="kinesis-lake-events",
    )
    raw_table_name: str = setting(
        "KINESIS_LAKE_RAW_TABLE",
        "Table the stream is ingested into, unless the declaration file names its streams.",
        default=RAW_TABLE,
    )
    endpoint_url: str | None = setting(
        "KINESIS_ENDPOINT_URL",
        "Kinesis API endpoint; unset means real AWS through boto3's region and credentials.",
    )
    region: str | None = setting("AWS_REGION", "AWS region (else boto3's own resolution).")
    role_arn: str | None = setting(
        "KINESIS_ROLE_ARN",
        "IAM role to read the stream as (STS AssumeRole with boto3's default credentials; "
        "AWS_ENDPOINT_URL_STS overrides the STS endpoint); unset: the default chain's identity.",
    )
    shard_count: int = setting(
        "KINESIS_SHARD_COUNT", "Shards when the project creates the stream.", default=2
    )
    starting_position: str = setting(
        "KINESIS_STARTING_POSITION",
        "Where ingestion starts while the raw table is empty: trim_horizon, latest or "
        "at_timestamp (later the checkpoint, else the committed positions, decide).",
        default="trim_horizon",
    )
    starting_timestamp: str | None = setting(
        "KINESIS_STARTING_TIMESTAMP",
        "With at_timestamp: ISO-8601 time or epoch milliseconds to start from.",
    )
    max_records_per_shard: int = setting(
        "KINESIS_MAX_RECORDS_PER_SHARD",
        "Kinesis records read per shard per micro-batch (a KPL aggregate counts once, however "
        "many user records it holds).",
        default=100_000,
    )
    max_bytes_per_shard: int | None = setting(
        "KINESIS_MAX_BYTES_PER_SHARD",
        "Bytes of Kinesis records (data plus partition key) read per shard per micro-batch, "
        "beside the record cap; a read's first record is always taken, so one larger than "
        "the cap is read alone. Unset: no byte cap.",
        default=None,
    )
    max_write_tasks: int | None = setting(
        "KINESIS_LAKE_MAX_WRITE_TASKS",
        "At most this many tasks write each micro-batch (so at most this many data files per "
        "partition value per commit): shard reads are coalesced into them. 0: one task per "
        "shard. Unset: shards are packed into tasks by the bytes their last reads gave, up "
        "to the raw table's write.target-file-size-bytes each, so files follow the data, "
        "not the shard count (spread over a local master's cores, or a configured "
        "spark.default.parallelism, while each task still gets 4 MiB).",
        default=None,
    )
    consumer_type: str = setting(
        "KINESIS_LAKE_CONSUMER_TYPE",
        "polling: GetRecords (shares each shard's 2 MB/s read limit with other consumers); "
        "efo: enhanced fan-out under a consumer of its own, registered per run and "
        "deregistered after it (see docs/efo.md).",
        default="polling",
    )
    fresh_consumer: str = setting(
        "KINESIS_LAKE_FRESH_CONSUMER",
        "Fresh reads (query --fresh) read the stream's tail over enhanced fan-out as this "
        "consumer, registered by the first one and kept (Kinesis bills a registered "
        "consumer per shard-hour; the identity needs kinesis:RegisterStreamConsumer and "
        "kinesis:SubscribeToShard): they then take none of the shards' shared GetRecords "
        "budget. Empty: they poll (see docs/efo.md).",
        default="",
    )
    fail_on_data_loss: bool = setting(
        "KINESIS_LAKE_FAIL_ON_DATA_LOSS",
        "true: stop ingestion when records expired (retention) before they were read, naming "
        "the shard; false: skip the gap, count it (no_data_loss check) and go on.",
        default=True,
    )
    endpoint_kind: str = setting(
        "KINESIS_LAKE_ENDPOINT_KIND",
        "Local endpoint the project starts: auto (kinesalite if Node is there, else moto).",
        default="auto",
    )
    data_dir: Path = setting(
        "KINESIS_LAKE_DATA_DIR",
        "Local state: catalog, warehouse, endpoint, Spark's log; default <repo>/.data.",
        factory=default_data_dir,
    )
    checkpoint_dir: str = setting(
        "KINESIS_LAKE_CHECKPOINT_DIR",
        "Spark checkpoints (a path Spark can write: local, shared, or s3:// on EMR); "
        "default DATA_DIR/checkpoints.",
        default="",
    )
    source_progress_dir: str = setting(
        "KINESIS_LAKE_SOURCE_PROGRESS_DIR",
        "Where executors record how far they read each shard (a path or s3://, seen by "
        "the driver and every executor); default CHECKPOINT_DIR.",
        default="",
    )
    catalog_name: str = setting(
        "KINESIS_LAKE_CATALOG",
        "pyiceberg catalog name; configure it in .pyiceberg.yaml or PYICEBERG_CATALOG__<NAME>__*.",
        default="kinesis_lake",
    )
    namespace: str = setting(
        "KINESIS_LAKE_NAMESPACE", "Iceberg namespace of all tables.", default=DEFAULT_NAMESPACE
    )
    event_schema_path: Path = setting(
        "KINESIS_LAKE_EVENT_SCHEMA",
        "The declaration file: the tables raw records are routed to and their fields "
        "(README: the declaration file); a relative path is tried in the working directory, "
        "then the repository. Default <repo>/schemas/events.yaml.",
        factory=lambda: _repo_root() / "schemas" / "events.yaml",
    )
    spark_master: str = setting(
        "SPARK_MASTER", "Spark master URL for ingestion jobs.", default="local[2]"
    )
    freshness_minutes: int = setting(
        "KINESIS_LAKE_FRESHNESS_MINUTES",
        "Raw table is stale when the stream has unconsumed data older than this.",
        default=15,
    )
    sensor_interval_seconds: int = setting(
        "KINESIS_LAKE_SENSOR_INTERVAL_SECONDS",
        "How often the backlog sensor looks for records to ingest, and the automation sensor "
        "evaluates (Dagster's daemon looks every 5 s, so it is rounded up to whole 5 s loops "
        "and asked of Dagster 1 s short of that: a tick asked for at exactly 5 s came 5 or 10 "
        "s apart). Lower it, with runs attached to a Spark Connect server, for seconds from "
        "put to table.",
        default=30,
    )
    run_linger_seconds: int = setting(
        "KINESIS_LAKE_RUN_LINGER_SECONDS",
        "An ingestion run (Dagster's or `kinesis-lake ingest`) keeps its query going past "
        "its backlog, micro-batch after micro-batch, until no record arrived for this long "
        "or KINESIS_LAKE_RUN_MAX_SECONDS passed; 0: stop once drained. Set it, with Spark "
        "Connect, for seconds from put to table under a steady stream.",
        default=0,
    )
    idle_backoff_ms: int = setting(
        "KINESIS_LAKE_IDLE_BACKOFF_MS",
        "A continuous or lingering ingestion run polls an idle stream ever less often (every "
        "poll is a micro-batch: tasks and a commit), 1 s, 2 s, 4 s... up to this many ms "
        "apart; a record that arrives after a quiet spell waits up to that much more. 0: "
        "every 1 s (the source's maxIdleTimeBetweenReadsMs).",
        default=5000,
    )
    run_max_seconds: int = setting(
        "KINESIS_LAKE_RUN_MAX_SECONDS",
        "A lingering run ends after this long even if records keep coming (its checks then "
        "run and the sensor starts the next); less than KINESIS_LAKE_FRESHNESS_MINUTES.",
        default=300,
    )
    maintenance_cron: str = setting(
        "KINESIS_LAKE_MAINTENANCE_CRON",
        "When the iceberg_maintenance schedule runs upkeep (compact, expire, remove orphans) "
        "on every table, in cron syntax; every few minutes for a writer on a trigger of "
        "seconds or less.",
        default="17 * * * *",
    )
    quarantine_warn_ratio: float = setting(
        "KINESIS_LAKE_QUARANTINE_WARN_RATIO",
        "Quarantined / raw ratio above which the quarantine check warns.",
        default=0.05,
    )

    def __post_init__(self) -> None:
        if not self.checkpoint_dir:
            object.__setattr__(self, "checkpoint_dir", str(self.data_dir / "checkpoints"))
        if not self.source_progress_dir:
            object.__setattr__(self, "source_progress_dir", self.checkpoint_dir)
        self.validate()

    def validate(self) -> None:
        """Fail fast, naming the environment variable and the values it accepts."""
        if not self.stream_name:
            raise SettingsError("KINESIS_STREAM_NAME is empty: set it to the stream's name.")
        if not re.fullmatch(r"[a-z_][a-z0-9_]*", self.raw_table_name):
            raise SettingsError(
                f"KINESIS_LAKE_RAW_TABLE={self.raw_table_name!r}: use lower-case letters, digits "
                "and underscores, not starting with a digit."
            )
        if self.shard_count < 1:
            raise SettingsError(
                f"KINESIS_SHARD_COUNT={self.shard_count}: it must be a whole number >= 1."
            )
        if self.starting_position not in STARTING_POSITIONS:
            raise SettingsError(
                f"KINESIS_STARTING_POSITION={self.starting_position!r} is not allowed: "
                f"use one of {', '.join(STARTING_POSITIONS)}."
            )
        if self.starting_position == "at_timestamp" and not self.starting_timestamp:
            raise SettingsError(
                "KINESIS_STARTING_POSITION=at_timestamp needs KINESIS_STARTING_TIMESTAMP "
                "(ISO-8601 such as 2026-01-31T12:00:00Z, or epoch milliseconds)."
            )
        if self.starting_timestamp:
            try:
                parse_timestamp_ms(self.starting_timestamp)
            except ValueError:
                raise SettingsError(
                    f"KINESIS_STARTING_TIMESTAMP={self.starting_timestamp!r} is neither "
                    f"{TIMESTAMP_FORMS}."
                ) from None
        if self.max_records_per_shard < 1:
            raise SettingsError(
                "KINESIS_MAX_RECORDS_PER_SHARD must be >= 1 (default 100000), "
                f"got {self.max_records_per_shard}."
            )
        if self.max_bytes_per_shard is not None and self.max_bytes_per_shard < 1:
            raise SettingsError(
                "KINESIS_MAX_BYTES_PER_SHARD must be a whole number of bytes >= 1 (such as "
                f"1048576 for 1 MiB), or unset for no byte cap; got {self.max_bytes_per_shard}."
            )
        if self.sensor_interval_seconds < 1:
            raise SettingsError(
                "KINESIS_LAKE_SENSOR_INTERVAL_SECONDS must be >= 1 (default 30), "
                f"got {self.sensor_interval_seconds}."
            )
        if self.fresh_consumer and not _CONSUMER_NAME.fullmatch(self.fresh_consumer):
            raise SettingsError(
                f"KINESIS_LAKE_FRESH_CONSUMER={self.fresh_consumer!r} is not a consumer name: "
                "1 to 128 letters, digits, '_', '.' or '-' (or empty, to poll)."
            )
        if self.idle_backoff_ms < 0:
            raise SettingsError(
                "KINESIS_LAKE_IDLE_BACKOFF_MS must be >= 0 (0: poll an idle stream every "
                f"second), got {self.idle_backoff_ms}."
            )
        if self.run_linger_seconds < 0:
            raise SettingsError(
                "KINESIS_LAKE_RUN_LINGER_SECONDS must be >= 0 (0, the default, ends a run once "
                f"its backlog is drained), got {self.run_linger_seconds}."
            )
        if self.run_linger_seconds and not 0 < self.run_max_seconds < self.freshness_minutes * 60:
            raise SettingsError(
                f"KINESIS_LAKE_RUN_MAX_SECONDS={self.run_max_seconds} must be above 0 and below "
                f"KINESIS_LAKE_FRESHNESS_MINUTES ({self.freshness_minutes} min): a run in "
                "progress longer than that is reported stale."
            )
        if self.max_write_tasks is not None and self.max_write_tasks < 0:
            raise SettingsError(
                "KINESIS_LAKE_MAX_WRITE_TASKS must be >= 0 (0 writes from one task per shard; "
                f"unset, from tasks sized by the data), got {self.max_write_tasks}."
            )
        if self.consumer_type not in CONSUMER_TYPES:
            raise SettingsError(
                f"KINESIS_LAKE_CONSUMER_TYPE={self.consumer_type!r} is not allowed: "
                f"use one of {', '.join(CONSUMER_TYPES)}."
            )
        if self.endpoint_kind not in ENDPOINT_KINDS:
            raise SettingsError(
                f"KINESIS_LAKE_ENDPOINT_KIND={self.endpoint_kind!r} is not allowed: "
                f"use one of {', '.join(ENDPOINT_KINDS)}."
            )
        if not self.event_schema_path.is_file():
            # Profiles name it relative to the repository, wherever the command runs (the
            # value was resolved against the working directory when it was read).
            try:
                relative = self.event_schema_path.relative_to(Path.cwd())
            except ValueError:
                relative = self.event_schema_path
            if not relative.is_absolute() and (_repo_root() / relative).is_file():
                object.__setattr__(self, "event_schema_path", _repo_root() / relative)
        if not self.event_schema_path.is_file():
            raise SettingsError(
                f"KINESIS_LAKE_EVENT_SCHEMA={self.event_schema_path} does not exist: point it "
                "at a declaration such as schemas/clickstream.yaml or schemas/events.yaml."
            )
        if not 0 <= self.quarantine_warn_ratio <= 1:
            raise SettingsError(
                "KINESIS_LAKE_QUARANTINE_WARN_RATIO must be between 0 and 1, "
                f"got {self.quarantine_warn_ratio}."
            )

    @property
    def log_dir(self) -> Path:
        """Where Spark's log file goes (``kinesis_lake.spark.runtime.session.spark_log_file``)."""
        return self.data_dir / "logs"

    @property
    def assumed_role(self) -> AssumedRole | None:
        """The role every Kinesis client of the lake signs as, if one is configured."""
        return lake_role(self.role_arn) if self.role_arn else None

    @property
    def raw_table(self) -> str:
        return f"{self.namespace}.{self.raw_table_name}"

    def for_stream(self, stream_name: str, raw_table_name: str) -> Settings:
        """These settings for one of the declaration's streams (its own raw table, and so
        its own checkpoint and progress records)."""
        return replace(self, stream_name=stream_name, raw_table_name=raw_table_name)

    def table_identifier(self, name: str) -> str:
        """A declared table's identifier in this deployment's namespace."""
        return f"{self.namespace}.{name}"

    @property
    def quarantine_table(self) -> str:
        return f"{self.namespace}.{QUARANTINE_TABLE}"

    @property
    def aggregate_table(self) -> str:
        return f"{self.namespace}.{AGGREGATE_TABLE}"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read every setting from ``env`` (default: the process environment)."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for spec in SETTINGS:
            raw = env.get(spec.variable)
            if raw is None or raw == "":
                continue
            values[spec.attribute] = spec.parse(raw)
        return cls(**values)

    def to_env(self) -> dict[str, str]:
        """The variables that make ``from_env`` rebuild these settings in a child process."""
        return {
            spec.variable: "" if (value := getattr(self, spec.attribute)) is None else str(value)
            for spec in SETTINGS
        }

    def describe(self) -> list[tuple[str, str, str]]:
        """(variable, value, help) rows, for ``kinesis-lake settings`` and the README."""
        rows = []
        for spec in SETTINGS:
            value = getattr(self, spec.attribute)
            rows.append((spec.variable, "" if value is None else str(value), spec.help))
        return rows


@dataclass(frozen=True)
class SettingSpec:
    """One row of the settings table, as :class:`Settings`' field declares it."""

    variable: str
    attribute: str
    kind: type
    optional: bool
    default: Any
    help: str

    def parse(self, raw: str) -> object:
        try:
            if self.kind is bool:
                return parse_bool(raw)
            if self.kind is Path:
                return Path(raw).expanduser().resolve()
            return self.kind(raw)
        except ValueError as error:
            raise SettingsError(
                f"{self.variable}={raw!r} is not a valid {self.kind.__name__}: {error}"
            ) from error


def _specs() -> tuple[SettingSpec, ...]:
    hints = get_type_hints(Settings)
    specs = []
    for each in fields(Settings):
        kinds = [k for k in get_args(hints[each.name]) if k is not type(None)]
        kind = kinds[0] if kinds else hints[each.name]
        default = each.default if each.default is not MISSING else None
        specs.append(
            SettingSpec(
                variable=each.metadata["variable"],
                attribute=each.name,
                kind=kind,
                optional=bool(kinds),
                default=default,
                help=each.metadata["help"],
            )
        )
    return tuple(specs)


SETTINGS: tuple[SettingSpec, ...] = _specs()
"""Every setting, in declaration order: the table front ends are generated from."""

ENV_VARIABLES: tuple[tuple[str, str], ...] = tuple((s.variable, s.attribute) for s in SETTINGS)
"""(environment variable, Settings attribute) for every setting, for other front ends."""


def settings_markdown() -> str:
    """The README's table of settings, generated from :data:`SETTINGS` (a test keeps the
    README equal to it; ``kinesis-lake settings --markdown`` prints it)."""
    rows = ["| variable | default | meaning |", "|---|---|---|"]
    for spec in SETTINGS:
        default = spec.default
        if isinstance(default, bool):
            default = str(default).lower()
        shown = f"`{default}`" if default not in (None, "") else ""
        rows.append(f"| `{spec.variable}` | {shown} | {spec.help} |")
    return "\n".join(rows) + "\n"


def parse_setting(variable: str, raw: str) -> object:
    """``raw`` as the value of ``variable``; a bad one fails naming the variable."""
    return next(spec for spec in SETTINGS if spec.variable == variable).parse(raw)


def load_profile(path: str | Path, *, override: bool = False) -> None:
    """Apply ``KEY=VALUE`` lines from a profile file to the environment."""
    for line in Path(path).read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, value = line.split("=", 1)
        if override or key.strip() not in os.environ:
            os.environ[key.strip()] = value.strip()


def lake_role(role_arn: str) -> AssumedRole:
    """``role_arn`` as the lake's settings configure it: errors name KINESIS_ROLE_ARN."""
    return AssumedRole(role_arn, setting="KINESIS_ROLE_ARN", sts_setting="AWS_ENDPOINT_URL_STS")
