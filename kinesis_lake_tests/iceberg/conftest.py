"""Every iceberg test gets its own SQLite catalog and warehouse under tmp_path.

pyiceberg also reads configuration from ~/.pyiceberg.yaml, the working directory and
PYICEBERG_* variables; they are isolated here so a developer's setup cannot leak in.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from kinesis_lake.iceberg.catalog import ensure_namespace, open_catalog
from kinesis_lake.iceberg.raw_table import ensure_raw_table
from kinesis_lake_tests.iceberg.helpers import NAMESPACE, RAW


@pytest.fixture(autouse=True)
def isolated_pyiceberg_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.upper().startswith("PYICEBERG_"):
            monkeypatch.delenv(name)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(home)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def catalog(data_dir: Path) -> Catalog:
    catalog = open_catalog(data_dir=data_dir)
    ensure_namespace(catalog, NAMESPACE)
    return catalog


@pytest.fixture
def raw(catalog: Catalog) -> Table:
    return ensure_raw_table(catalog, RAW)
