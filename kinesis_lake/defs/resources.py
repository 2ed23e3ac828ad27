"""Dagster resources: settings, the Kinesis client and the Spark session, all from env.

Every field defaults from the same environment variable ``kinesis_lake.config.Settings``
reads, through ``dg.EnvVar`` when the variable is set (so the UI shows where a value
came from and secrets never land in run config), else to ``Settings``' own default. The
CLI, the Spark jobs and Dagster therefore run with one configuration.

Credentials are not fields of any resource here unless a deployment sets them on the
Kinesis resource explicitly (as ``dg.EnvVar``); by default boto3's own chain supplies
them. Nothing in this module puts them in metadata or logs.
"""

from __future__ import annotations

import functools
import os
import types
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast, get_args

import boto3
import botocore.session
import dagster as dg
from botocore.config import Config as BotocoreConfig
from dagster_aws.utils import ResourceWithBoto3Configuration, construct_boto_client_retry_config
from dagster_pyspark import LazyPySparkResource
from pydantic import Field, PrivateAttr

from kinesis_lake.config import (
    ENV_VARIABLES,
    SETTINGS,
    Settings,
    SettingsError,
    SettingSpec,
    lake_role,
    parse_setting,
)
from kinesis_lake.kinesis.client import KinesisClient, assume_role

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _spec(attribute: str) -> SettingSpec:
    return next(spec for spec in SETTINGS if spec.attribute == attribute)


def _setting_field(attribute: str) -> Any:
    """A resource field that is the setting ``attribute``: its default and help, once."""
    spec = _spec(attribute)
    return Field(default=spec.default, description=f"{spec.variable}: {spec.help}")


def _variables(**fields: str) -> dict[str, str]:
    """{environment variable: resource field} for resource fields named after settings."""
    return {_spec(setting).variable: field for field, setting in fields.items()}


def _from_env(
    cls: type[dg.ConfigurableResource],
    variables: Mapping[str, str],
    env: Mapping[str, str] | None,
    **fixed: Any,
) -> Any:
    """Build ``cls`` with ``dg.EnvVar`` for every mapped variable that is set.

    Unset (or empty, as ``Settings.from_env`` treats it) variables leave the field at its
    default. Integer fields take ``dg.EnvVar.int``; float fields take the value itself,
    because Dagster 1.13 has no float ``EnvVar`` (nor a boolean one).
    """
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    for variable, attribute in variables.items():
        raw = env.get(variable)
        if raw is None or raw == "":
            continue
        annotation = cls.model_fields[attribute].annotation
        # An optional setting's field is `kind | None`: the EnvVar follows the kind.
        kind = next((k for k in get_args(annotation) if k is not type(None)), annotation)
        if kind is int:
            values[attribute] = dg.EnvVar.int(variable)
        elif kind in (float, bool):
            values[attribute] = parse_setting(variable, raw)
        else:
            values[attribute] = dg.EnvVar(variable)
    return cls(**values, **fixed)


class _SettingsFields(dg.ConfigurableResource):
    """The deployment's ``Settings``, configurable in Dagster, defaulting from the env.

    Assets and checks call :meth:`settings` and hand the result to the same library
    functions the CLI calls, so a run launched from the UI with changed config and a
    ``kinesis-lake`` command with changed variables behave alike. The fields are generated
    from ``kinesis_lake.config.SETTINGS`` (name, type, default, description), so a setting
    is declared once; fields left at None take ``Settings``' computed default.
    """

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Any:
        return _from_env(cls, dict(ENV_VARIABLES), env)

    def settings(self) -> Settings:
        """A validated ``Settings``; a bad value fails here, naming the variable."""
        values: dict[str, Any] = {}
        for spec in SETTINGS:
            value = getattr(self, spec.attribute)
            if value is None or value == "":
                continue
            if spec.kind is Path:
                value = Path(value).expanduser().resolve()
            values[spec.attribute] = value
        return Settings(**values)


def _resource_field(spec: SettingSpec) -> tuple[Any, Any]:
    """(annotation, pydantic Field) for one setting. Paths are strings in Dagster's config;
    a setting whose default is computed (a path under the repository, a folder under the
    data dir) or absent is optional there, None meaning "Settings decides"."""
    computed = spec.kind is Path or spec.default in (None, "")
    kind = str if spec.kind is Path else spec.kind
    annotation = kind | None if computed or spec.optional else kind
    default = None if computed else spec.default
    return annotation, Field(default=default, description=f"{spec.variable}: {spec.help}")


def _settings_resource_class() -> type[_SettingsFields]:
    annotations: dict[str, Any] = {}
    namespace: dict[str, Any] = {"__module__": __name__, "__doc__": _SettingsFields.__doc__}
    for spec in SETTINGS:
        annotations[spec.attribute], namespace[spec.attribute] = _resource_field(spec)
    namespace["__annotations__"] = annotations
    made = types.new_class(
        "PipelineSettingsResource", (_SettingsFields,), exec_body=lambda ns: ns.update(namespace)
    )
    return cast(type[_SettingsFields], made)


if TYPE_CHECKING:  # the checker sees the methods; the fields exist at run time only

    class PipelineSettingsResource(_SettingsFields):
        pass

else:
    PipelineSettingsResource = _settings_resource_class()


class KinesisResource(ResourceWithBoto3Configuration):
    """The stream this deployment ingests, and a boto3 client for cheap calls on it.

    Used by the backlog sensor and the freshness check (ListShards, GetShardIterator,
    GetRecords with Limit=1). Spark's source builds its own clients on the executors from
    ``Settings`` (endpoint, region, ``KINESIS_ROLE_ARN``) with boto3's default chain; keep
    this resource's stream, endpoint and region equal to those settings (both default
    from the same variables, and :meth:`require_same_stream` enforces it). Credentials
    set on the resource (profile or keys) replace the default chain here only; with
    ``role_arn`` they are who assumes the role, and the calls are signed as the role.
    """

    stream_name: str = _setting_field("stream_name")
    shard_count: int = _setting_field("shard_count")
    role_arn: str | None = _setting_field("role_arn")
    connect_timeout_seconds: float = Field(
        default=5.0, description="Short, so a sensor tick (60 s budget) never hangs on AWS."
    )
    read_timeout_seconds: float = Field(default=10.0, description="Per-call read timeout.")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> KinesisResource:
        return _from_env(
            cls,
            _variables(
                stream_name="stream_name",
                shard_count="shard_count",
                endpoint_url="endpoint_url",
                region_name="region",
                role_arn="role_arn",
            ),
            env,
        )

    def get_client(self) -> KinesisClient:
        """The client of this configuration, built once per process: sensors build the
        resource every tick, and a role would otherwise be assumed (an STS call) each time."""
        return _resource_client(
            role_arn=self.role_arn,
            region_name=self.region_name,
            endpoint_url=self.endpoint_url,
            profile_name=self.profile_name,
            aws_access_key_id=self.aws_access_key_id,
            aws_secret_access_key=self.aws_secret_access_key,
            aws_session_token=self.aws_session_token,
            use_ssl=self.use_ssl,
            verify=self.verify,
            max_attempts=self.max_attempts,
            connect_timeout=self.connect_timeout_seconds,
            read_timeout=self.read_timeout_seconds,
        )

    def require_same_stream(self, settings: Settings) -> None:
        """Fail loudly when this resource and the pipeline settings name different streams.

        The sensor probes with this resource while Spark reads with the settings: if they
        disagreed, backlog and freshness would describe a stream nobody ingests.
        """
        mine = (self.stream_name, self.endpoint_url or None)
        theirs = (settings.stream_name, settings.endpoint_url or None)
        if mine != theirs:
            raise SettingsError(
                f"Resource 'kinesis' targets stream {mine[0]!r} at {mine[1] or 'AWS'} but the "
                f"pipeline settings target {theirs[0]!r} at {theirs[1] or 'AWS'}: configure "
                "both from KINESIS_STREAM_NAME / KINESIS_ENDPOINT_URL."
            )


@functools.lru_cache(maxsize=8)
def _resource_client(
    *,
    role_arn: str | None,
    region_name: str | None,
    endpoint_url: str | None,
    profile_name: str | None,
    aws_access_key_id: str | None,
    aws_secret_access_key: str | None,
    aws_session_token: str | None,
    use_ssl: bool,
    verify: bool | str | None,
    max_attempts: int,
    connect_timeout: float,
    read_timeout: float,
) -> KinesisClient:
    own = botocore.session.Session(profile=profile_name)
    if aws_access_key_id:
        own.set_credentials(aws_access_key_id, aws_secret_access_key, aws_session_token)
    signing = own
    if role_arn:
        signing = botocore.session.get_session()
        assume_role(signing, lake_role(role_arn), region_name, source=own)
    config = construct_boto_client_retry_config(max_attempts).merge(
        BotocoreConfig(connect_timeout=connect_timeout, read_timeout=read_timeout)
    )
    return boto3.session.Session(botocore_session=signing).client(
        "kinesis",
        region_name=region_name,
        endpoint_url=endpoint_url,
        use_ssl=use_ssl,
        verify=verify,
        config=config,
    )


class SparkResource(LazyPySparkResource):
    """dagster-pyspark's lazy Spark resource, with what the pipeline's correctness needs.

    As its base, the session starts only when a step first asks for ``spark_session``
    (checks and sensors never start a JVM) and extra Spark settings go in
    ``spark_config``. Added here: a typed ``master`` defaulting from ``SPARK_MASTER``;
    ``spark_config`` values that are ``dg.EnvVar``s are resolved (the base's ``Any`` values
    are not); the session is built by ``build_spark_session`` (loopback, UTC, no
    speculation, Spark's log to a file); and teardown stops the session only if this
    resource started it: one someone else owns (a test's shared session) is used and left
    running, where the base never stops any.
    """

    master: str = _setting_field("spark_master")
    app_name: str = Field(default="kinesis-lake-dagster", description="Spark application name.")
    spark_config: dict[str, str] = Field(
        default_factory=dict,
        description="Extra Spark settings; values may be dg.EnvVar (they are resolved).",
    )
    log_dir: str | None = Field(
        default=None,
        description="Folder of Spark's log file; None: <KINESIS_LAKE_DATA_DIR>/logs.",
    )

    _owned: bool = PrivateAttr(default=False)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> SparkResource:
        return _from_env(cls, _variables(master="spark_master"), env)

    def _init_session(self) -> None:
        if self._spark_session is not None:
            return
        # Imported here so that loading definitions and running sensors stays JVM-free.
        from pyspark import SparkContext

        from kinesis_lake.spark.runtime.session import build_spark_session

        existing = SparkContext._active_spark_context
        session = build_spark_session(
            self.master,
            app_name=self.app_name,
            conf=self.spark_config,
            log_dir=self.log_dir or Settings.from_env().log_dir,
        )
        self._owned = existing is None or session.sparkContext is not existing
        self._spark_session = session

    @property
    def session(self) -> SparkSession:
        """The run's session (``spark_session``, typed)."""
        return self.spark_session

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        if self._spark_session is not None and self._owned:
            self._spark_session.stop()
        self._spark_session = None
        self._owned = False


def lake_resources(env: Mapping[str, str] | None = None) -> dict[str, dg.ConfigurableResource]:
    """The resources every definition here uses, keyed as the assets, checks and sensors
    expect, built from ``env`` (default: the process environment)."""
    return {
        "settings": PipelineSettingsResource.from_env(env),
        "kinesis": KinesisResource.from_env(env),
        "spark": SparkResource.from_env(env),
    }
