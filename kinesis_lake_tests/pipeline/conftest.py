"""Fixtures of the pipeline tests: a lake declared by the test module, and for tests that
refresh derived tables straight from Iceberg tables they build, with no stream behind
them, its catalog (``streamless_settings``: the root conftest)."""

from __future__ import annotations

import pytest
from pyiceberg.catalog import Catalog

from kinesis_lake.config import Settings
from kinesis_lake.iceberg.catalog import ensure_namespace
from kinesis_lake.pipeline.lake import open_lake


@pytest.fixture
def settings(request: pytest.FixtureRequest, kinesalite_endpoint, settings_factory) -> Settings:
    """A lake on kinesalite declared by the test module's ``DECLARATION`` (a lake.yaml
    text, often one of ``declared_lakes``); a test may rewrite the file to edit it."""
    return settings_factory(kinesalite_endpoint, declaration=request.module.DECLARATION)


@pytest.fixture
def streamless_catalog(streamless_settings: Settings) -> Catalog:
    catalog = open_lake(streamless_settings)
    ensure_namespace(catalog, streamless_settings.namespace)
    return catalog
