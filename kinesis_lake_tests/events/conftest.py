"""A fresh pyiceberg SqlCatalog with the ``lake`` namespace, for the event tests that write
tables."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyiceberg.catalog.sql import SqlCatalog


@pytest.fixture
def catalog(tmp_path: Path) -> SqlCatalog:
    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}/wh")
    catalog.create_namespace("lake")
    return catalog
