"""A deployment under test: env variables, settings, resources built from the env.

Resources are built the way ``definitions.py`` builds them, from environment variables,
so the tests also prove that the env -> ``dg.EnvVar`` -> ``Settings`` path works.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import pytest

from kinesis_lake.config import Settings
from kinesis_lake.defs.resources import lake_resources
from kinesis_lake.kinesis.client import kinesis_client
from kinesis_lake.kinesis.streams import ensure_stream
from kinesis_lake_tests.aws_env import FAKE_AWS_ENV

DEMO_CHECKS = {
    "raw_events:fresh_relative_to_stream",
    "raw_events:ingestion_advances",
    "raw_events:no_duplicate_records",
    "raw_events:matches_committed_positions",
    "raw_events:no_data_loss",
    "events_quarantine:reconciles_with_raw",
    "events:schema_matches_declared",
    "events_quarantine:quarantine_ratio",
    "event_counts_per_minute:sums_match_events",
}
"""Every check of the demo declaration (schemas/events.yaml), as asset:check."""


def lake_env(data_dir: Path, endpoint_url: str, stream_name: str, **extra: str) -> dict[str, str]:
    """The variables a deployment would set; Settings.from_env and the resources read them."""
    return {
        **FAKE_AWS_ENV,
        "KINESIS_ENDPOINT_URL": endpoint_url,
        "KINESIS_STREAM_NAME": stream_name,
        "KINESIS_SHARD_COUNT": "2",
        "KINESIS_LAKE_DATA_DIR": str(data_dir),
        "KINESIS_LAKE_NAMESPACE": "lake",
        "SPARK_MASTER": "local[2]",
        "KINESIS_LAKE_QUARANTINE_WARN_RATIO": "0.1",
        **extra,
    }


@dataclass
class Lake:
    """One deployment under test: its env, settings, resources and Kinesis client."""

    env: dict[str, str]
    settings: Settings
    resources: dict[str, dg.ConfigurableResource]
    client: object

    def rebuild(self, monkeypatch: pytest.MonkeyPatch, **changes: str) -> Lake:
        """The same deployment with some variables changed (resources rebuilt from env)."""
        env = {**self.env, **changes}
        for key, value in changes.items():
            monkeypatch.setenv(key, value)
        return Lake(env, Settings.from_env(env), lake_resources(), self.client)


def make_lake(monkeypatch: pytest.MonkeyPatch, data_dir: Path, endpoint_url: str) -> Lake:
    """A fresh stream and catalog; a developer's own pyiceberg configuration cannot leak in."""
    data_dir.mkdir(parents=True, exist_ok=True)
    env = lake_env(data_dir, endpoint_url, f"dg-{uuid.uuid4().hex[:10]}")
    env["PYICEBERG_HOME"] = str(data_dir)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    settings = Settings.from_env(env)
    client = kinesis_client(settings.endpoint_url, settings.region)
    ensure_stream(client, settings.stream_name, settings.shard_count)
    return Lake(env, settings, lake_resources(), client)


def evaluations(result: dg.ExecuteInProcessResult) -> dict[str, dg.AssetCheckEvaluation]:
    """A run's check evaluations by ``asset:check``."""
    return {
        f"{e.asset_key.to_user_string()}:{e.check_name}": e
        for e in result.get_asset_check_evaluations()
    }
