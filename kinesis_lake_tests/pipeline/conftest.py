"""Fixtures for pipeline tests that refresh derived tables straight from Iceberg tables
they build, with no stream behind them."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyiceberg.catalog import Catalog

from kinesis_lake.config import Settings
from kinesis_lake.iceberg.catalog import ensure_namespace
from kinesis_lake.pipeline.lake import open_lake
from kinesis_lake_tests.lake_settings import make_settings


@pytest.fixture
def streamless_settings(tmp_path: Path) -> Settings:
    """Settings whose endpoint nothing reads: these tests never touch Kinesis."""
    return make_settings(tmp_path / "data", "http://127.0.0.1:9")


@pytest.fixture
def streamless_catalog(streamless_settings: Settings) -> Catalog:
    catalog = open_lake(streamless_settings)
    ensure_namespace(catalog, streamless_settings.namespace)
    return catalog
