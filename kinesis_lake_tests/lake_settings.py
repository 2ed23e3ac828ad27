"""Settings of a test lake: a fresh stream name and a catalog/warehouse in a folder of the
test's own, optionally declared by a ``lake.yaml`` text written beside it.

The root conftest's ``settings_factory`` fixture builds these under ``tmp_path``; tests
that need settings outside a test function's ``tmp_path`` (module fixtures, hypothesis
examples, simulations) call :func:`make_settings` directly.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kinesis_lake.config import Settings


def make_settings(
    data_dir: Path, endpoint_url: str, *, declaration: str | None = None, **overrides
) -> Settings:
    """``declaration``: the text of a lake declaration, written to ``lake.yaml`` beside
    ``data_dir`` and used as the settings' ``event_schema_path``."""
    from kinesis_lake.config import Settings

    values = {
        "stream_name": f"test-{uuid.uuid4().hex[:10]}",
        "endpoint_url": endpoint_url,
        "region": "us-east-1",
        "shard_count": 2,
        "starting_position": "trim_horizon",
        "data_dir": data_dir,
        "namespace": "lake",
    }
    if declaration is not None:
        path = data_dir.parent / "lake.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(declaration)
        values["event_schema_path"] = path
    values.update(overrides)
    return Settings(**values)
