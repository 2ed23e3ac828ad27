"""Fixtures for the Dagster layer: a fresh deployment on the real local Kinesis endpoint
(``moto_endpoint`` from the root conftest), and a throwaway Dagster instance."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest

from kinesis_lake_tests.defs.helpers import Lake, make_lake


@pytest.fixture
def lake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, moto_endpoint) -> Lake:
    """A fresh stream and an empty catalog, resources built from the environment."""
    return make_lake(monkeypatch, tmp_path / "data", moto_endpoint.url)


@pytest.fixture
def instance() -> Iterator[dg.DagsterInstance]:
    with dg.instance_for_test() as test_instance:
        yield test_instance
