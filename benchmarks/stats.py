"""Turning measurements into the numbers a report states: ratios, percentiles, verdicts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    if not numerator or not denominator:
        return None
    return round(numerator / denominator, 3)


def verdict(value: float | None, target: float, *, at_least: bool) -> str:
    if value is None:
        return "n/a"
    met = value >= target if at_least else value <= target
    return "met" if met else "MISSED"


def percentile(values: Sequence[float], pct: float) -> float | None:
    """Nearest-rank percentile (no interpolation: the value some record really had)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(pct / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def phase_medians(progress: list[dict[str, Any]]) -> dict[str, float]:
    """Each phase of Spark's ``durationMs`` over the micro-batches ``progress``, its median
    (the upper one: a duration some batch really had)."""
    keys = sorted({k for p in progress for k in p["durationMs"]})
    out = {}
    for key in keys:
        values = sorted(p["durationMs"].get(key, 0) for p in progress)
        out[key] = values[len(values) // 2] if values else 0
    return out
