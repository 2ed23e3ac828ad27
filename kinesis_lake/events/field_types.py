"""The field types an event schema may declare, and their Arrow representation.

Types are spelled as short strings in YAML (``long``, ``decimal(10,2)``) so a schema stays
configuration, not code. This module is the single place that knows the spellings; the Iceberg
mapping lives in ``tables.py`` so the executor-side parser does not need it.
"""

from __future__ import annotations

import re

import pyarrow as pa

# Timestamps are stored as UTC microseconds: Iceberg's ``timestamptz`` and Spark's
# ``TimestampType`` both have microsecond precision, so nothing finer survives anyway.
TIMESTAMP_ARROW_TYPE = pa.timestamp("us", tz="UTC")

_SIMPLE_TYPES: dict[str, pa.DataType] = {
    "string": pa.string(),
    "long": pa.int64(),
    "int": pa.int32(),
    "double": pa.float64(),
    "float": pa.float32(),
    "boolean": pa.bool_(),
    "timestamp": TIMESTAMP_ARROW_TYPE,
    "date": pa.date32(),
}

_ALLOWED_TYPES = ", ".join([*_SIMPLE_TYPES, "decimal(p,s)"])

# Iceberg (and Arrow's decimal128) store at most 38 significant digits.
_MAX_DECIMAL_PRECISION = 38

_DECIMAL = re.compile(r"decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)")


def normalize_type(spelling: str) -> str:
    """Return the canonical spelling of a declared type, or raise ``ValueError``.

    Canonical spellings make schema comparisons insensitive to cosmetic differences such as
    ``decimal(10, 2)`` versus ``decimal(10,2)``.
    """
    if spelling in _SIMPLE_TYPES:
        return spelling
    match = _DECIMAL.fullmatch(spelling)
    if match is None:
        raise ValueError(f"unknown type {spelling!r}; allowed types: {_ALLOWED_TYPES}")
    precision, scale = int(match[1]), int(match[2])
    if not 1 <= precision <= _MAX_DECIMAL_PRECISION:
        raise ValueError(
            f"decimal precision must be between 1 and {_MAX_DECIMAL_PRECISION}, got {precision}"
        )
    if scale > precision:
        raise ValueError(f"decimal scale must be between 0 and the precision, got {scale}")
    return f"decimal({precision},{scale})"


def decimal_params(type_name: str) -> tuple[int, int] | None:
    """Return (precision, scale) for a canonical decimal type, ``None`` for any other type."""
    match = _DECIMAL.fullmatch(type_name)
    return (int(match[1]), int(match[2])) if match else None


def arrow_type(type_name: str) -> pa.DataType:
    """Arrow type of a canonical type name (as produced by ``normalize_type``)."""
    params = decimal_params(type_name)
    return pa.decimal128(*params) if params else _SIMPLE_TYPES[type_name]
