"""The one place a boto3 Kinesis client is built.

Credentials come from boto3's default chain (environment, profile, instance role), so no
secret ever passes through this project's configuration or logs. With an
:class:`AssumedRole`, the chain's credentials only sign the STS AssumeRole call and every
Kinesis call is signed with the role's temporary credentials, refreshed by botocore
before they expire (the awslabs Kinesis connector's ``roleArn`` options).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeAlias

import boto3
import botocore.session
from botocore.client import BaseClient
from botocore.config import Config
from botocore.credentials import (
    AssumeRoleCredentialFetcher,
    CredentialProvider,
    DeferredRefreshableCredentials,
)
from botocore.exceptions import BotoCoreError, ClientError, NoRegionError
from botocore.loaders import Loader
from botocore.utils import parse_timestamp

from kinesis_lake.errors import ConfigurationError

#: boto3 generates the concrete client class at runtime, so the best static type without
#: extra stub packages (``types-boto3[kinesis]``) is botocore's base class.
KinesisClient: TypeAlias = BaseClient


@dataclass(frozen=True)
class AssumedRole:
    """An IAM role to read the stream as (cross-account streams, least privilege).

    ``setting`` and ``sts_setting`` are what the caller's user configured them with (the
    Spark source's options by default, ``KINESIS_ROLE_ARN`` for the lake's settings), so
    an error names what the reader can change.
    """

    role_arn: str
    session_name: str = "kinesis-lake"
    sts_endpoint_url: str | None = None
    """None: botocore's resolution (the region's STS endpoint, or AWS_ENDPOINT_URL_STS)."""
    setting: str = "roleArn"
    sts_setting: str = "stsEndpointUrl"

    def error(self, reason: str) -> AssumeRoleError:
        if self.sts_endpoint_url:
            where = f"{self.sts_setting}={self.sts_endpoint_url}"
        elif os.environ.get("AWS_ENDPOINT_URL_STS"):
            where = f"AWS_ENDPOINT_URL_STS={os.environ['AWS_ENDPOINT_URL_STS']}"
        else:
            where = "the region's STS endpoint"
        return AssumeRoleError(
            f"{self.setting}={self.role_arn}: could not assume the role through {where}: "
            f"{' '.join(reason.split())}"
        )


class AssumeRoleError(ConfigurationError):
    """STS refused or could not be reached: the role options or the caller's rights."""


def kinesis_client(
    endpoint_url: str | None = None,
    region_name: str | None = None,
    *,
    max_attempts: int = 1,
    timeout_s: float = 30.0,
    role: AssumedRole | None = None,
) -> KinesisClient:
    """A Kinesis client whose only retries are the ones this package makes.

    ``max_attempts`` is the total number of HTTP attempts botocore makes per call
    (botocore's ``total_max_attempts``); the default 1 turns botocore's own retries off,
    because ``retry.py`` owns retries: they are counted, bounded, and are the code that
    fault-injection tests exercise. (botocore's ``max_attempts`` key counts retries
    *after* the first attempt, so 1 there would still retry once behind our back.)

    Clients are shared per process and arguments: building one costs tens of
    milliseconds (botocore loads its service models), which every Spark task paid
    before. boto3 clients are thread-safe and refresh expiring credentials themselves.

    Raises botocore's ``NoRegionError`` at once when no region can be resolved (botocore
    raises it only at the first call); each caller names its own setting.
    """
    region = region_name or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    return _shared_client(endpoint_url, region, max_attempts, timeout_s, role)


@functools.lru_cache(maxsize=32)
def _shared_client(
    endpoint_url: str | None,
    region_name: str | None,
    max_attempts: int,
    timeout_s: float,
    role: AssumedRole | None,
) -> KinesisClient:
    botocore_session = _utc_botocore_session()
    if role is not None:
        assume_role(botocore_session, role, region_name)
    session = boto3.session.Session(botocore_session=botocore_session)
    region = region_name or session.region_name
    if not region:
        raise NoRegionError()
    config = Config(
        retries={"total_max_attempts": max_attempts, "mode": "standard"},
        connect_timeout=timeout_s,
        read_timeout=timeout_s,
        tcp_keepalive=True,
    )
    return session.client("kinesis", region_name=region, endpoint_url=endpoint_url, config=config)


#: STS is called on the driver as a query starts and by sensor ticks, whose budget is a
#: minute: short timeouts and one retry, not botocore's default 60 s reads retried 4 times.
_STS_CONFIG = Config(
    connect_timeout=5, read_timeout=10, retries={"total_max_attempts": 2, "mode": "standard"}
)


def assume_role(
    session: botocore.session.Session,
    role: AssumedRole,
    region: str | None,
    *,
    source: botocore.session.Session | None = None,
) -> None:
    """Make ``session`` sign as ``role``, assumed with ``source``'s credentials (default:
    boto3's default chain). The first credentials are fetched now, so a role that cannot
    be assumed fails here, naming the caller's settings, not on some later call."""
    source = source or botocore.session.get_session()
    source_credentials = source.get_credentials()
    if source_credentials is None:
        raise role.error(
            "no AWS credentials to call STS with: set AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, to an identity the role trusts"
        )
    fetcher = AssumeRoleCredentialFetcher(
        client_creator=functools.partial(
            source.create_client,
            region_name=region,
            endpoint_url=role.sts_endpoint_url,
            config=_STS_CONFIG,
        ),
        source_credentials=source_credentials,
        role_arn=role.role_arn,
        extra_args={"RoleSessionName": role.session_name},
    )
    try:
        fetcher.fetch_credentials()
    except (BotoCoreError, ClientError) as error:
        raise role.error(
            f"{error}. Check that the role's trust policy allows this caller and that the "
            "endpoint answers."
        ) from error
    credentials = DeferredRefreshableCredentials(
        refresh_using=fetcher.fetch_credentials, method=_RoleProvider.METHOD
    )
    resolver = session.get_component("credential_provider")
    resolver.insert_before(resolver.providers[0].METHOD, _RoleProvider(credentials))


class _RoleProvider(CredentialProvider):
    """First in the session's chain: the role's credentials, refreshed by botocore."""

    METHOD = "kinesis-lake-assume-role"

    def __init__(self, credentials: DeferredRefreshableCredentials) -> None:
        super().__init__()
        self._credentials = credentials

    def load(self) -> DeferredRefreshableCredentials:
        return self._credentials


def _utc_botocore_session() -> botocore.session.Session:
    """A botocore session that parses response timestamps as UTC.

    Kinesis sends ``ApproximateArrivalTimestamp`` as epoch seconds, and botocore's
    default parser attaches the *local* zone (``dateutil.tz.tzlocal``), which costs more
    per record than the rest of decoding; the instant is the same either way.
    """
    session = botocore.session.get_session()
    session.register_component("data_loader", _model_loader())
    session.get_component("response_parser_factory").set_parser_defaults(
        timestamp_parser=_parse_timestamp_utc
    )
    return session


@functools.cache
def _model_loader() -> Loader:
    """botocore's loader of service models, one for every session of this process.

    Each botocore session has a loader of its own, and a client built through a new one
    reads and parses the Kinesis model and endpoint rules again (0.16 to 0.21 s measured):
    every new Spark worker paid it for its first shard.
    """
    return botocore.session.get_session().get_component("data_loader")


def preload_service_models() -> None:
    """Read what building a Kinesis client reads, so that processes forked after this
    (Spark's workers, from :mod:`kinesis_lake.spark.runtime.worker_daemon`) inherit it parsed.

    The throwaway client has credentials of its own, so no credential chain (and no
    instance metadata endpoint) is consulted, and it makes no call.
    """
    _utc_botocore_session().create_client(
        "kinesis",
        region_name="us-east-1",
        aws_access_key_id="preload",
        aws_secret_access_key="preload",
    )


def _parse_timestamp_utc(value: str | int | float) -> datetime:
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value, tz=UTC)
    return parse_timestamp(value)
