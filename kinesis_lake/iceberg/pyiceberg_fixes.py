"""Work-arounds for pyiceberg defects that would change what readers see; applied once, when
``kinesis_lake.iceberg.catalog`` is imported (every table of ours is loaded through it), so
every read and write of ours goes through them.

* A null list of structs became ``[]`` (apache/iceberg-python#3833, open in pyiceberg
  0.12). pyiceberg projects every batch it writes (``Table.append``: our upsert, SQL and
  replayed tables) and every file it reads once a table's schema evolved (``query``)
  through ``ArrowProjectionVisitor.list``, which rebuilds a list of structs from its
  offsets and values only (a work-around of its own for apache/arrow#38809) and so drops
  the list's validity. We put the validity back; a pyiceberg that keeps it is left alone.
  ``ArrowProjectionVisitor.map`` does the same to a map whose values are structs (a null
  ``map<string, struct>`` of a SQL table's result became ``{}``, and a compaction of an
  evolved table would rewrite it so): its nulls are put back the same way.
  Remove this once the upstream fix is in the pinned pyiceberg (the tests in
  ``kinesis_lake_tests/iceberg/test_pyiceberg_fixes.py`` and ``test_query.py`` show it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
from pyiceberg.io.pyarrow import ArrowProjectionVisitor
from pyiceberg.types import ListType, MapType

_ListProjection = Callable[[Any, ListType, pa.Array | None, pa.Array | None], pa.Array | None]
_MapProjection = Callable[
    [Any, MapType, pa.Array | None, pa.Array | None, pa.Array | None], pa.Array | None
]


def _keeping_null_lists(project: _ListProjection) -> _ListProjection:
    """``project`` (pyiceberg's list projection) with the input list's nulls kept."""

    def list_keeping_nulls(
        visitor: Any, list_type: ListType, list_array: pa.Array | None, value_array: pa.Array | None
    ) -> pa.Array | None:
        projected = project(visitor, list_type, list_array, value_array)
        if (
            list_array is None
            or not isinstance(projected, pa.ListArray | pa.LargeListArray)
            or projected.null_count == list_array.null_count
        ):
            return projected
        return type(projected).from_arrays(
            projected.offsets, projected.values, type=projected.type, mask=list_array.is_null()
        )

    list_keeping_nulls.__wrapped__ = project  # type: ignore[attr-defined]
    return list_keeping_nulls


def _keeping_null_maps(project: _MapProjection) -> _MapProjection:
    """``project`` (pyiceberg's map projection) with the input map's nulls kept."""

    def map_keeping_nulls(
        visitor: Any,
        map_type: MapType,
        map_array: pa.Array | None,
        key_result: pa.Array | None,
        value_result: pa.Array | None,
    ) -> pa.Array | None:
        projected = project(visitor, map_type, map_array, key_result, value_result)
        if (
            map_array is None
            or not isinstance(projected, pa.MapArray)
            or projected.null_count == map_array.null_count
        ):
            return projected
        return pa.MapArray.from_arrays(
            projected.offsets,
            projected.keys,
            projected.items,
            type=projected.type,
            mask=map_array.is_null(),
        )

    map_keeping_nulls.__wrapped__ = project  # type: ignore[attr-defined]
    return map_keeping_nulls


def apply() -> None:
    """Install the work-arounds (idempotent)."""
    if not hasattr(ArrowProjectionVisitor.list, "__wrapped__"):
        ArrowProjectionVisitor.list = _keeping_null_lists(ArrowProjectionVisitor.list)  # type: ignore[method-assign, assignment]
    if not hasattr(ArrowProjectionVisitor.map, "__wrapped__"):
        ArrowProjectionVisitor.map = _keeping_null_maps(ArrowProjectionVisitor.map)  # type: ignore[method-assign, assignment]
