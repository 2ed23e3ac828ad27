"""Every error the package raises on purpose is a KinesisLakeError, of a precise kind."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import kinesis_lake
from kinesis_lake.errors import KinesisLakeError, SnapshotExpiredError
from kinesis_lake.iceberg.catalog import open_catalog
from kinesis_lake.iceberg.raw_table import ensure_raw_table
from kinesis_lake.pipeline.reconcile import rows_at
from kinesis_lake_tests.iceberg.helpers import ingest

SKIP = {"kinesis_lake.cli", "kinesis_lake.demo", "kinesis_lake.dev"}


def _public_error_classes() -> dict[str, type]:
    found = {}
    for info in pkgutil.walk_packages(kinesis_lake.__path__, "kinesis_lake."):
        if info.name in SKIP or info.name.startswith("kinesis_lake.defs"):
            continue
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, Exception)
                and not name.startswith("_")
                and value.__module__.startswith("kinesis_lake")
            ):
                found[f"{value.__module__}.{name}"] = value
    return found


def test_every_error_of_the_package_is_a_kinesis_lake_error() -> None:
    classes = _public_error_classes()
    assert len(classes) >= 15
    strays = sorted(name for name, cls in classes.items() if not issubclass(cls, KinesisLakeError))
    assert not strays, f"errors outside the hierarchy: {strays}"


def test_an_expired_snapshot_is_not_a_lookup_error() -> None:
    """The checks catch SnapshotExpiredError; were it a LookupError, catching it would
    also turn KeyError and IndexError bugs into failed checks."""
    assert not issubclass(SnapshotExpiredError, LookupError)


def test_counting_rows_at_an_expired_snapshot_says_so(tmp_path) -> None:
    catalog = open_catalog(data_dir=tmp_path / "data")
    catalog.create_namespace("lake")
    table = ensure_raw_table(catalog, "lake.raw")
    first = ingest(table, "w", 0, range(3)).snapshot_id
    ingest(table, "w", 1, range(3, 6))
    with table.maintenance.expire_snapshots() as expiry:
        expiry.by_ids([first])

    with pytest.raises(SnapshotExpiredError, match="has expired"):
        rows_at(table, first)
