"""``results/<name>.json``: one benchmark's numbers with the environment they came from."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from benchmarks.context import BenchContext


def write_result(ctx: BenchContext, name: str, result: dict[str, Any]) -> Path:
    """``results/<name>.json``: the benchmark's numbers plus the environment they came from."""
    ctx.results_dir.mkdir(parents=True, exist_ok=True)
    path = ctx.results_dir / f"{name}.json"
    payload = {"benchmark": name, "environment": ctx.environment, **result}
    path.write_text(json.dumps(payload, indent=2, sort_keys=False, default=_json_default) + "\n")
    return path


def _json_default(value: Any) -> Any:
    if hasattr(value, "__dataclass_fields__"):
        return asdict(value)
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    raise TypeError(f"not JSON-able: {type(value).__name__}")
