"""What one process's fresh reads share, so that a read costs what is new since the last.

A routed table is behind raw whenever raw commits faster than the table's refresh follows
(in ``make dev``'s mode under a steady stream: raw commits every 2 s, the follower
refreshes nine tables after each). A fresh read of it then plans which raw data files
were committed since the table caught up, reads them and routes their rows: in benchmark
15 the slowest tenth of back-to-back reads spent more than half their time doing that
again for files the read before had planned and routed already.

Each step is a function of immutable inputs. The files appended in a snapshot range of a
table are fixed once its snapshots are (snapshot ids are unique within a table, tables
are told apart by their UUID). A data file's path names bytes that never change (Iceberg
never rewrites a file in place, and our writers and pyiceberg put a UUID in every file
name), and routing is row by row (:func:`~kinesis_lake.events.parse.route_events`: a
record routes the same alone as beside others). So each file's rows, routed by a
declaration in a raw schema, are kept under exactly those three, and a read after an
edit of the declaration or an evolution of raw routes again. Kept newest first, up to
:data:`MAX_ROWS` rows in all: a table far behind raw is read whole each time, as before,
rather than held in memory.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence

import pyarrow as pa
from pyiceberg.table import Table

from kinesis_lake.events.declaration import LakeDeclaration
from kinesis_lake.events.parse import route_events
from kinesis_lake.iceberg.arrow_schema import table_arrow_schema
from kinesis_lake.iceberg.incremental import appended_since, read_data_file

MAX_ROWS = 200_000
"""Routed rows kept over all files (a few tens of MB for the demo's events)."""

MAX_RANGES = 256
"""Snapshot ranges whose appended files are kept."""

_Key = tuple[LakeDeclaration, pa.Schema, str]
_routed: OrderedDict[_Key, dict[str, pa.Table]] = OrderedDict()
_kept_rows = 0
_appended: OrderedDict[tuple[str, int | None, int], tuple[str, ...]] = OrderedDict()
_lock = threading.Lock()


def files_appended_since(table: Table, from_snapshot_id: int | None) -> tuple[str, ...]:
    """:func:`~kinesis_lake.iceberg.incremental.appended_since` up to the current snapshot:
    the data files, planned once per snapshot range (and table)."""
    current = table.current_snapshot()
    if current is None:
        return tuple(appended_since(table, from_snapshot_id).files)
    key = (str(table.metadata.table_uuid), from_snapshot_id, current.snapshot_id)
    with _lock:
        files = _appended.get(key)
        if files is not None:
            _appended.move_to_end(key)
            return files
    files = tuple(appended_since(table, from_snapshot_id).files)
    with _lock:
        _appended[key] = files
        while len(_appended) > MAX_RANGES:
            _appended.popitem(last=False)
    return files


def routed_raw_files(
    raw: Table | None,
    files: Sequence[str],
    declaration: LakeDeclaration,
    name: str,
    tail_schema: pa.Schema,
) -> pa.Table:
    """Table ``name``'s rows from raw's data ``files`` as :func:`route_events` routes them,
    in file order; each file read in raw's current schema, then shaped as the tail's rows
    (``tail_schema``), as the read routes those. No raw table: no files."""
    if raw is None or not files:
        return route_events(tail_schema.empty_table(), declaration).tables[name]
    schema = table_arrow_schema(raw.schema())
    parts = []
    for path in files:
        key = (declaration, schema, path)
        with _lock:
            tables = _routed.get(key)
            if tables is not None:
                _routed.move_to_end(key)
        if tables is None:
            rows = read_data_file(raw.io.properties, path, schema)
            shaped = rows.select(tail_schema.names).cast(tail_schema)
            tables = route_events(shaped, declaration).tables
            _keep(key, tables)
        parts.append(tables[name])
    return pa.concat_tables(parts)


def _keep(key: _Key, tables: dict[str, pa.Table]) -> None:
    global _kept_rows
    with _lock:
        if key not in _routed:
            _routed[key] = tables
            _kept_rows += _rows(tables)
        while _kept_rows > MAX_ROWS:
            _, dropped = _routed.popitem(last=False)
            _kept_rows -= _rows(dropped)


def _rows(tables: dict[str, pa.Table]) -> int:
    return sum(table.num_rows for table in tables.values())
