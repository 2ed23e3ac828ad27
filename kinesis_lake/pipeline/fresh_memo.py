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
declaration in a raw schema, are kept under exactly those (the declaration by a digest
of its whole value: an Avro or Protobuf stream's holds dicts, which do not hash), and a
read after an edit of the declaration or an evolution of raw routes again.

Bounded, newest kept: :data:`MAX_FILES` files (a kept file costs about 70 KB beside its
rows: five small Arrow tables) and :data:`MAX_ROWS` rows, a file counting one row at
least; a file larger than that is routed and not kept. A table far behind raw is then
read as before, not held in memory. Ranges from a table's beginning (a table never
refreshed: every live file of raw) are planned each time, not kept.
"""

from __future__ import annotations

import hashlib
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
"""Routed rows kept over all files (about 30 MB of the demo's events: 145 bytes a row)."""

MAX_FILES = 512
"""Files whose routed rows are kept (about 35 MB beside their rows)."""

MAX_RANGES = 256
"""Snapshot ranges whose appended files are kept."""

_Key = tuple[str, pa.Schema, pa.Schema, str]
_routed: OrderedDict[_Key, dict[str, pa.Table]] = OrderedDict()
_kept_rows = 0
_appended: OrderedDict[tuple[str, int | None, int], tuple[str, ...]] = OrderedDict()
_lock = threading.Lock()


def files_appended_since(table: Table, from_snapshot_id: int | None) -> tuple[str, ...]:
    """:func:`~kinesis_lake.iceberg.incremental.appended_since` up to the current snapshot:
    the data files, planned once per snapshot range (and table)."""
    current = table.current_snapshot()
    if current is None or from_snapshot_id is None:
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
    digest = hashlib.sha256(repr(declaration).encode()).hexdigest()
    parts = []
    for path in files:
        key = (digest, schema, tail_schema, path)
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
    weight = _weight(tables)
    if weight > MAX_ROWS:
        return
    with _lock:
        if key not in _routed:
            _routed[key] = tables
            _kept_rows += weight
        while _kept_rows > MAX_ROWS or len(_routed) > MAX_FILES:
            _, dropped = _routed.popitem(last=False)
            _kept_rows -= _weight(dropped)


def _weight(tables: dict[str, pa.Table]) -> int:
    """What a kept file counts against :data:`MAX_ROWS`: its routed rows, one at least (a
    file whose every record was quarantined still takes memory)."""
    return max(1, sum(table.num_rows for table in tables.values()))
