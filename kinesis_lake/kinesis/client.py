"""The one place a boto3 Kinesis client is built.

Credentials always come from boto3's default chain (environment, profile, instance role),
so no secret ever passes through this project's configuration or logs.
"""

from __future__ import annotations

import boto3
from botocore.client import BaseClient
from botocore.config import Config

#: boto3 generates the concrete client class at runtime, so the best static type without
#: extra stub packages (``types-boto3[kinesis]``) is botocore's base class.
KinesisClient = BaseClient


def kinesis_client(
    endpoint_url: str | None = None,
    region_name: str | None = None,
    *,
    max_attempts: int = 1,
    timeout_s: float = 30.0,
) -> KinesisClient:
    """Build a Kinesis client whose only retries are the ones this package makes.

    ``max_attempts`` is the total number of HTTP attempts botocore makes per call
    (botocore's ``total_max_attempts``); the default 1 turns botocore's own retries off,
    because ``retry.py`` owns retries: they are counted, bounded, and are the code that
    fault-injection tests exercise. (botocore's ``max_attempts`` key counts retries
    *after* the first attempt, so 1 there would still retry once behind our back.)

    Raises ``ValueError`` when no region can be resolved, because botocore's own error for
    that (``NoRegionError``) does not say which setting of this project to fix.
    """
    session = boto3.session.Session()
    region = region_name or session.region_name
    if not region:
        raise ValueError(
            "No AWS region for the Kinesis client: set the AWS_REGION environment variable "
            "(or AWS_DEFAULT_REGION, or a region in your AWS profile), or set regionName "
            "in the kinesis-lake Kinesis settings (e.g. regionName=us-east-1)."
        )
    config = Config(
        retries={"total_max_attempts": max_attempts, "mode": "standard"},
        connect_timeout=timeout_s,
        read_timeout=timeout_s,
        tcp_keepalive=True,
    )
    return session.client("kinesis", region_name=region, endpoint_url=endpoint_url, config=config)
