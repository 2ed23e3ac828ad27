"""Fixtures for pipeline tests that refresh derived tables straight from Iceberg tables
they build, with no stream behind them (``streamless_settings``: the root conftest)."""

from __future__ import annotations

import pytest
from pyiceberg.catalog import Catalog

from kinesis_lake.config import Settings
from kinesis_lake.iceberg.catalog import ensure_namespace
from kinesis_lake.pipeline.lake import open_lake


@pytest.fixture
def streamless_catalog(streamless_settings: Settings) -> Catalog:
    catalog = open_lake(streamless_settings)
    ensure_namespace(catalog, streamless_settings.namespace)
    return catalog
