"""open_catalog: the embedded default, or whatever pyiceberg's configuration says."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyiceberg.catalog.sql import SqlCatalog

from kinesis_lake.iceberg.catalog import (
    catalog_properties,
    ensure_namespace,
    local_catalog_properties,
    open_catalog,
)
from kinesis_lake.iceberg.defaults import DEFAULT_CATALOG_NAME


def test_default_is_a_local_sqlite_catalog_under_the_data_dir(data_dir: Path) -> None:
    catalog = open_catalog(data_dir=data_dir)
    ensure_namespace(catalog, "lake")

    assert isinstance(catalog, SqlCatalog)
    assert catalog.name == DEFAULT_CATALOG_NAME
    assert (data_dir / "catalog.db").is_file()
    assert (data_dir / "warehouse").is_dir()
    assert catalog_properties(data_dir=data_dir) == {
        "type": "sql",
        "uri": f"sqlite:///{data_dir.resolve() / 'catalog.db'}",
        "warehouse": f"file://{data_dir.resolve() / 'warehouse'}",
    }


def test_relative_data_dir_gives_absolute_properties(monkeypatch: pytest.MonkeyPatch) -> None:
    props = local_catalog_properties(Path("rel"))
    assert props["uri"] == f"sqlite:///{Path.cwd() / 'rel' / 'catalog.db'}"
    assert props["warehouse"].startswith("file:///")


def test_environment_variables_override_the_default(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, data_dir: Path
) -> None:
    other = tmp_path / "elsewhere"
    other.mkdir()
    # Set after pyiceberg was imported: pyiceberg's own load_catalog would not see these.
    monkeypatch.setenv("PYICEBERG_CATALOG__KINESIS_LAKE__URI", f"sqlite:///{other}/other.db")
    monkeypatch.setenv("PYICEBERG_CATALOG__KINESIS_LAKE__WAREHOUSE", f"file://{other}/wh")

    catalog = open_catalog(data_dir=data_dir)
    ensure_namespace(catalog, "lake")

    assert (other / "other.db").is_file()
    assert not (data_dir / "catalog.db").exists()
    assert catalog_properties(data_dir=data_dir) == {
        "uri": f"sqlite:///{other}/other.db",
        "warehouse": f"file://{other}/wh",
    }


def test_pyiceberg_yaml_in_pyiceberg_home_overrides_the_default(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, data_dir: Path
) -> None:
    home = tmp_path / "pyiceberg-home"
    home.mkdir()
    (home / ".pyiceberg.yaml").write_text(
        "catalog:\n"
        "  kinesis_lake:\n"
        "    type: sql\n"
        f"    uri: sqlite:///{home}/yaml.db\n"
        f"    warehouse: file://{home}/wh\n"
    )
    monkeypatch.setenv("PYICEBERG_HOME", str(home))

    catalog = open_catalog(data_dir=data_dir)
    ensure_namespace(catalog, "lake")

    assert (home / "yaml.db").is_file()
    assert catalog_properties(data_dir=data_dir)["uri"] == f"sqlite:///{home}/yaml.db"


def test_another_catalog_name_is_not_taken_for_ours(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, data_dir: Path
) -> None:
    monkeypatch.setenv("PYICEBERG_CATALOG__PROD__URI", f"sqlite:///{tmp_path}/prod.db")

    assert catalog_properties(data_dir=data_dir) == local_catalog_properties(data_dir)
    assert catalog_properties("prod", data_dir=data_dir) == {"uri": f"sqlite:///{tmp_path}/prod.db"}


def test_ensure_namespace_is_idempotent(data_dir: Path) -> None:
    catalog = open_catalog(data_dir=data_dir)
    ensure_namespace(catalog, "lake")
    ensure_namespace(catalog, "lake")
    assert ("lake",) in catalog.list_namespaces()
