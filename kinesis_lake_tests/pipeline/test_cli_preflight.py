"""Misconfiguration fails before Spark starts, in one line naming the setting.

Issue 15, defect 8: a bad event schema was read only after ingestion had committed raw
data, and an unknown stream, a wrong endpoint port or an unwritable data directory came
out as 40-110 line tracebacks naming no setting. Each case runs the real CLI process.
"""

from __future__ import annotations

import socket
import subprocess
import threading
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from kinesis_lake.config import Settings
from kinesis_lake.iceberg.catalog import open_catalog
from kinesis_lake.pipeline.preflight import PreflightError, check_directories, check_stream
from kinesis_lake_tests.pipeline_helpers import produce, run_cli_with, settings_env


def _ingest(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return run_cli_with(env, "ingest", *args)


def _one_line_naming(failed: subprocess.CompletedProcess, variable: str) -> str:
    assert failed.returncode != 0
    lines = failed.stderr.strip().splitlines()
    assert len(lines) == 1, failed.stderr
    assert f"{variable}=" in lines[0]
    return lines[0]


def test_bad_event_schema_fails_before_anything_is_committed(
    kinesalite_endpoint, settings_factory, tmp_path: Path
):
    settings = settings_factory(kinesalite_endpoint)
    produce(settings, 10, seed=3)
    schema = tmp_path / "broken.yaml"
    schema.write_text("fields:\n  - name: [unclosed\n    type: string\n")
    env = {**settings_env(settings), "KINESIS_LAKE_EVENT_SCHEMA": str(schema)}

    line = _one_line_naming(_ingest(env, "--derive"), "KINESIS_LAKE_EVENT_SCHEMA")

    assert str(schema) in line and "Fix the file" in line
    catalog = open_catalog(settings.catalog_name, data_dir=settings.data_dir)
    assert not catalog.table_exists(settings.raw_table), "nothing may be committed"


def test_unknown_stream_names_the_stream_setting(kinesalite_endpoint, settings_factory):
    settings = settings_factory(kinesalite_endpoint, stream_name="no-such-stream")
    line = _one_line_naming(_ingest(settings_env(settings)), "KINESIS_STREAM_NAME")
    assert "no-such-stream" in line and "no such stream" in line


def test_wrong_endpoint_port_names_the_endpoint_setting(kinesalite_endpoint, settings_factory):
    with socket.socket() as probe:  # a port nothing listens on once closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings = settings_factory(kinesalite_endpoint)
    env = {**settings_env(settings), "KINESIS_ENDPOINT_URL": f"http://127.0.0.1:{port}"}
    line = _one_line_naming(_ingest(env), "KINESIS_ENDPOINT_URL")
    assert f":{port}" in line and "start the endpoint" in line


def test_unwritable_data_dir_names_the_data_dir_setting(
    kinesalite_endpoint, settings_factory, tmp_path: Path
):
    settings = settings_factory(kinesalite_endpoint)
    produce(settings, 5, seed=4)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    data_dir = blocker / "data"  # cannot be created, whoever runs the test (root too)
    env = {
        **settings_env(settings),
        "KINESIS_LAKE_DATA_DIR": str(data_dir),
        "KINESIS_LAKE_CHECKPOINT_DIR": "",
        "KINESIS_LAKE_SOURCE_PROGRESS_DIR": "",
    }
    line = _one_line_naming(_ingest(env), "KINESIS_LAKE_DATA_DIR")
    assert str(data_dir) in line and "writable" in line


def test_the_directory_check_creates_nothing(tmp_path):
    """A deployment that keeps every table in S3 keeps nothing locally: the check must not
    leave an empty data directory behind (the AWS-profile test asserts there is none)."""
    settings = Settings(data_dir=tmp_path / "node" / "scratch", checkpoint_dir="s3://b/c")

    check_directories(settings)

    assert not (tmp_path / "node").exists()


def _without(env: dict[str, str], *names: str) -> dict[str, str]:
    """``env`` without ``names``, with no credentials file, profile or metadata service to
    fall back on (so nothing leaves the machine looking for one)."""
    kept = {k: v for k, v in env.items() if k not in names and k != "AWS_PROFILE"}
    return {
        **kept,
        "AWS_CONFIG_FILE": "/dev/null",
        "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
        "AWS_EC2_METADATA_DISABLED": "true",
    }


def test_missing_credentials_say_which_variables_and_that_placeholders_do_locally(
    kinesalite_endpoint, settings_factory
):
    env = _without(
        settings_env(settings_factory(kinesalite_endpoint)),
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
    )
    failed = _ingest(env)
    assert failed.returncode != 0
    (line,) = failed.stderr.strip().splitlines()
    assert line.startswith("kinesis-lake: configuration error: No AWS credentials for Kinesis")
    assert "AWS_ACCESS_KEY_ID" in line and "placeholder values do" in line


def test_no_region_names_aws_region(kinesalite_endpoint, settings_factory):
    env = _without(
        settings_env(settings_factory(kinesalite_endpoint)), "AWS_REGION", "AWS_DEFAULT_REGION"
    )
    line = _one_line_naming(_ingest(env), "AWS_REGION")
    assert "regionName" not in line, "the CLI has no regionName option"


class _FailingSts(ThreadingHTTPServer):
    """An STS endpoint that answers every call 503 and counts them."""

    def __init__(self) -> None:
        self.calls = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                owner.calls += 1
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                self.send_response(503)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


def test_a_failing_sts_fails_the_preflight_in_one_line_naming_the_lake_s_settings(
    streamless_settings, monkeypatch
):
    """The message named the Spark source's options (roleArn, stsEndpointUrl) under
    KINESIS_ROLE_ARN, and botocore retried STS behind our back (a sensor tick's budget)."""
    role = "arn:aws:iam::123456789012:role/reader"
    sts = _FailingSts()
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL_STS", sts.url)
        # No endpoint: the role is assumed before any call reaches Kinesis.
        settings = replace(streamless_settings, role_arn=role)
        with pytest.raises(PreflightError) as failure:
            check_stream(settings)
    finally:
        sts.shutdown()

    message = str(failure.value)
    assert "\n" not in message
    assert message.startswith(f"KINESIS_ROLE_ARN={role}: ")
    assert f"AWS_ENDPOINT_URL_STS={sts.url}" in message
    assert "roleArn" not in message and "stsEndpointUrl" not in message
    assert sts.calls <= 2
