"""Checks that run before Spark starts, so a wrong setting fails in seconds, in one line.

Without them a bad event schema surfaced only after ingestion had committed raw data
(about 25 s in), and an unknown stream, a wrong endpoint port or an unwritable data
directory surfaced as 40-110 line Spark or boto3 tracebacks that named no setting. Each
check here costs at most one cheap call (DescribeStreamSummary) or one small file, and
fails with :class:`PreflightError`: one line, naming the environment variable (as listed
by ``kinesis-lake settings``) and the fix.

The CLI runs :func:`preflight` before ``ingest`` and ``stream``; Dagster assets can call
it before they build their Spark job.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    EndpointConnectionError,
    NoCredentialsError,
    NoRegionError,
)

from kinesis_lake.config import Settings
from kinesis_lake.errors import ConfigurationError
from kinesis_lake.events.declaration_file import load_declaration
from kinesis_lake.events.schema import EventSchemaError
from kinesis_lake.kinesis.client import AssumeRoleError, kinesis_client
from kinesis_lake.kinesis.retry import RetryPolicy, call_with_retry, error_code

#: A transient error may retry twice; a wrong port or name must fail within seconds.
_PREFLIGHT_RETRY = RetryPolicy(max_retries=2)
_TIMEOUT_S = 10.0


class PreflightError(ConfigurationError):
    """A setting the pipeline cannot run with; ``str()`` is one line naming it and the fix."""


def preflight(settings: Settings, *, event_schema: bool) -> None:
    """Check the local directories, the event schema (when the run derives) and the stream.

    Raises :class:`PreflightError` at the first problem. ``event_schema=False`` for runs
    that only ingest: they never read the schema, so a broken one must not stop them.
    """
    check_directories(settings)
    if event_schema:
        check_event_schema(settings)
    check_stream(settings)


def check_directories(settings: Settings) -> None:
    """Every local directory the run writes to exists and is writable, or can be created."""
    places = [("KINESIS_LAKE_DATA_DIR", str(settings.data_dir))]
    places += [
        (variable, value)
        for variable, value in (
            ("KINESIS_LAKE_CHECKPOINT_DIR", settings.checkpoint_dir),
            ("KINESIS_LAKE_SOURCE_PROGRESS_DIR", settings.source_progress_dir),
        )
        if "://" not in value  # s3:// and other remote stores are checked by their users
    ]
    for variable, value in places:
        problem = _why_not_writable(Path(value))
        if problem is not None:
            raise PreflightError(
                f"{variable}={value} is not a writable directory ({problem}): "
                "point it at a directory this user can create and write, or fix its permissions."
            )


def _why_not_writable(path: Path) -> str | None:
    """Why ``path`` cannot become a directory this user writes, or None.

    Creates nothing: a check must leave no trace (a deployment that keeps every table in
    S3 keeps nothing in its local data directory, and tests hold it to that).
    """
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is not a directory"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} is not writable by this user"
    return None


def check_event_schema(settings: Settings) -> None:
    """The declaration derive will use loads and validates now, not after raw data committed."""
    try:
        load_declaration(settings.event_schema_path)
    except EventSchemaError as error:
        raise PreflightError(
            f"KINESIS_LAKE_EVENT_SCHEMA={settings.event_schema_path} is not a valid "
            f"declaration: {_one_line(error)}. Fix the file (see schemas/) or point "
            "the variable at one."
        ) from error


def check_stream(settings: Settings) -> None:
    """One DescribeStreamSummary: the endpoint answers and the stream exists."""
    name = settings.stream_name
    endpoint = settings.endpoint_url or "AWS"
    try:
        client = kinesis_client(
            settings.endpoint_url, settings.region, timeout_s=_TIMEOUT_S, role=settings.assumed_role
        )
        call_with_retry(
            lambda: client.describe_stream_summary(StreamName=name),
            _PREFLIGHT_RETRY,
            sleep=time.sleep,
            rng=random.Random(),
        )
    except AssumeRoleError as error:
        raise PreflightError(str(error)) from error  # it names KINESIS_ROLE_ARN
    except NoRegionError as error:
        raise PreflightError(
            "AWS_REGION= (unset): set it (e.g. AWS_REGION=us-east-1), or a region in your AWS "
            "profile."
        ) from error
    except EndpointConnectionError as error:
        raise PreflightError(
            f"KINESIS_ENDPOINT_URL={endpoint}: nothing answers there ({_one_line(error)}): "
            "start the endpoint (`kinesis-lake endpoint`) or fix the URL and port."
        ) from error
    except NoCredentialsError as error:
        raise PreflightError(
            "No AWS credentials for Kinesis: set AWS_PROFILE, or AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY (against a local endpoint any placeholder values do, as "
            "profiles/local.env sets them)."
        ) from error
    except ClientError as error:
        code = error_code(error)
        if code == "ResourceNotFoundException":
            raise PreflightError(
                f"{_stream_name_origin(settings)}: no such stream at {endpoint} (region "
                f"{client.meta.region_name}): fix the name there, or create the stream "
                "(`kinesis-lake create-streams` creates the lake's streams, on AWS too)."
            ) from error
        raise PreflightError(
            f"{_stream_name_origin(settings)}: DescribeStreamSummary at {endpoint} failed "
            f"({code}: {_one_line(error)}): check the credentials' Kinesis permissions, "
            "KINESIS_ENDPOINT_URL and AWS_REGION."
        ) from error
    except BotoCoreError as error:
        raise PreflightError(
            f"KINESIS_ENDPOINT_URL={endpoint}: the Kinesis call failed ({_one_line(error)}): "
            "fix the URL, or unset it to use AWS."
        ) from error


def _stream_name_origin(settings: Settings) -> str:
    """The stream's name as the user set it: under the declaration's ``streams:`` when it
    declares streams (KINESIS_STREAM_NAME is then not read, so naming it misleads), else
    the variable. Read only on the error path: a declaration that does not load is the
    event schema check's to report."""
    try:
        declared = load_declaration(settings.event_schema_path).streams
    except EventSchemaError:
        declared = ()
    if any(stream.name == settings.stream_name for stream in declared):
        return f"stream {settings.stream_name!r} (streams: in {settings.event_schema_path})"
    return f"KINESIS_STREAM_NAME={settings.stream_name!r}"


def _one_line(error: BaseException) -> str:
    """An error's text on one line (YAML and botocore messages span several)."""
    return " ".join(str(error).split())
