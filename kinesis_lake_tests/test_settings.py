"""Each setting is declared once (a field of Settings) and every front end is read off it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kinesis_lake.config import SETTINGS, Settings, SettingsError, settings_markdown
from kinesis_lake.defs.resources import KinesisResource, PipelineSettingsResource, SparkResource
from kinesis_lake.kinesis.start_positions import STARTING_POSITIONS
from kinesis_lake.spark.kinesis import options as kinesis_source_options

REPO_ROOT = Path(__file__).resolve().parents[1]


def test_the_dagster_resource_has_a_field_per_setting_described_by_its_help() -> None:
    fields = PipelineSettingsResource.model_fields
    assert list(fields) == [spec.attribute for spec in SETTINGS]
    for spec in SETTINGS:
        assert fields[spec.attribute].description == f"{spec.variable}: {spec.help}"


def test_resource_defaults_are_the_settings_defaults() -> None:
    resolved = PipelineSettingsResource().settings()
    assert resolved == Settings()
    assert KinesisResource.model_fields["stream_name"].default == Settings().stream_name
    assert SparkResource.model_fields["master"].default == Settings().spark_master


def test_the_readme_table_is_the_generated_one() -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    assert settings_markdown() in readme


def test_kinesis_lake_settings_prints_every_variable() -> None:
    printed = subprocess.run(
        [sys.executable, "-m", "kinesis_lake.cli", "settings"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert [line.split()[0] for line in printed.splitlines()] == [s.variable for s in SETTINGS]


def test_starting_positions_are_one_list() -> None:
    assert kinesis_source_options.STARTING_POSITIONS is STARTING_POSITIONS


def test_a_byte_cap_setting_is_whole_bytes_or_unset() -> None:
    assert Settings.from_env({}).max_bytes_per_shard is None
    assert Settings.from_env({"KINESIS_MAX_BYTES_PER_SHARD": "65536"}).max_bytes_per_shard == 65536
    for bad in ("0", "1MB"):
        with pytest.raises(SettingsError, match="KINESIS_MAX_BYTES_PER_SHARD"):
            Settings.from_env({"KINESIS_MAX_BYTES_PER_SHARD": bad})
