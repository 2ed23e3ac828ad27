"""Every iceberg test gets its own SQLite catalog and warehouse under tmp_path (the root
conftest keeps a developer's pyiceberg configuration out)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from kinesis_lake.iceberg.catalog import ensure_namespace, open_catalog
from kinesis_lake.iceberg.raw_table import ensure_raw_table
from kinesis_lake_tests.iceberg.helpers import NAMESPACE, RAW


@pytest.fixture
def catalog(data_dir: Path) -> Catalog:
    catalog = open_catalog(data_dir=data_dir)
    ensure_namespace(catalog, NAMESPACE)
    return catalog


@pytest.fixture
def raw(catalog: Catalog) -> Table:
    return ensure_raw_table(catalog, RAW)
