"""Derived tables of a declaration: current state by key (upsert) and Spark SQL tables.

They sit under ``derived:`` in the declaration file, beside the routed ``tables:``, and
read only declared tables, never raw records:

* **upsert** (``from`` + ``upsert: {key, version, delete}``): the current row per ``key`` of
  the table named in ``from``; the row with the highest ``version`` wins whatever order
  records arrive in. Ties go to the record Kinesis received later (arrival time, then
  shard, sequence and sub-sequence number), so the outcome depends only on the records,
  never on how they were batched. A row matching ``delete`` removes the key; its version
  is remembered, so an older update arriving later cannot bring the key back, while a
  newer one does.
* **sql** (``sql`` + ``refresh``): a Spark SQL query over declared tables. ``rows`` runs it
  over the new rows of its one input table and appends the result; ``windowed`` recomputes
  only the time windows (``window: {column, size, output}``) the new rows fall in and
  replaces those; ``full`` recomputes the whole table when any input changed.

The SQL is parsed (sqlglot, Spark dialect) when the declaration loads, so a syntax error
or a table nobody declared fails ``dagster definitions validate``, naming file, line and
table, not the first refresh.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from kinesis_lake.events.columns import (
    ARRIVAL_TIMESTAMP,
    SEQUENCE_NUMBER,
    SHARD_ID,
    SUB_SEQUENCE_NUMBER,
)
from kinesis_lake.events.schema import EventSchemaError, check_keys

ORDER_COLUMNS = (ARRIVAL_TIMESTAMP, SHARD_ID, SEQUENCE_NUMBER, SUB_SEQUENCE_NUMBER)
"""An upsert's tie rule: after the version, the record Kinesis received later wins (the
sequence number compared as an integer)."""
REFRESH_MODES = ("rows", "windowed", "full")
WINDOW_SIZES = ("minute", "hour", "day")
TOMBSTONE_SUFFIX = "_tombstones"
"""An upsert table's deleted keys live in ``<name>_tombstones`` (key, version, order)."""
_UPSERT_KEYS = ("key", "version", "delete")
_DELETE_KEYS = ("field", "equals", "one_of")
_WINDOW_KEYS = ("column", "size", "output")
_DERIVED_KEYS = ("name", "description", "from", "upsert", "sql", "refresh", "window")
_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]*")


class DerivedTableError(EventSchemaError):
    """An invalid ``derived:`` entry."""


@dataclass(frozen=True)
class DeleteRule:
    """Rows whose ``field`` equals one of ``values`` delete their key."""

    field: str
    values: tuple[str, ...]


@dataclass(frozen=True)
class UpsertSpec:
    key: str
    version: str
    delete: DeleteRule | None = None


@dataclass(frozen=True)
class WindowSpec:
    """Input rows whose ``column`` truncated to ``size`` is a window; the SQL's output
    column ``output`` holds that window's start."""

    column: str
    size: str
    output: str


@dataclass(frozen=True)
class DerivedTable:
    """One ``derived:`` entry: exactly one of ``upsert`` (with ``source``) or ``sql``."""

    name: str
    description: str
    inputs: tuple[str, ...]
    """The declared tables it reads: the upsert's ``from``, or the SQL's tables."""
    upsert: UpsertSpec | None = None
    sql: str | None = None
    refresh: str = "full"
    window: WindowSpec | None = None

    @property
    def source(self) -> str:
        """The input whose appends drive the refresh (every input, for ``full``)."""
        return self.inputs[0]

    @property
    def incremental(self) -> bool:
        """Reads only what its source appended since its last refresh (all but full SQL)."""
        return self.upsert is not None or self.refresh != "full"

    @property
    def tombstones(self) -> str:
        return self.name + TOMBSTONE_SUFFIX


def parse_derived(raw: object, index: int, declared: Mapping[str, frozenset[str]]) -> DerivedTable:
    """Validate one ``derived:`` entry; ``declared`` maps every table it may read (routed
    and derived before it) to its top-level columns."""
    where = f"derived[{index}]"
    raw = check_keys(raw, _DERIVED_KEYS, ("name",), where)
    name = raw.get("name")
    if not isinstance(name, str) or not _IDENTIFIER.fullmatch(name):
        raise DerivedTableError(f"{where}: name must be a lower-case table name, got {name!r}")
    where = f"derived table {name!r}"
    description = raw.get("description", "")
    if not isinstance(description, str):
        raise DerivedTableError(f"{where}: description must be a string")
    if ("upsert" in raw) == ("sql" in raw):
        raise DerivedTableError(f"{where}: declare exactly one of upsert (with from) or sql")
    if "upsert" in raw:
        return _upsert_table(raw, name, description.strip(), declared, where)
    return _sql_table(raw, name, description.strip(), declared, where)


def _upsert_table(
    raw: Mapping[str, Any],
    name: str,
    description: str,
    declared: Mapping[str, frozenset[str]],
    where: str,
) -> DerivedTable:
    for key in ("sql", "refresh", "window"):
        if key in raw:
            raise DerivedTableError(f"{where}: {key} applies to sql tables, not upsert")
    source = raw.get("from")
    if not isinstance(source, str) or source not in declared:
        raise DerivedTableError(
            f"{where}: from must name a declared table ({', '.join(sorted(declared))}), "
            f"got {source!r}"
        )
    columns = declared[source]
    spec = check_keys(raw["upsert"], _UPSERT_KEYS, ("key", "version"), f"{where}: upsert")
    for role in ("key", "version"):
        if spec[role] not in columns:
            raise DerivedTableError(
                f"{where}: upsert {role} {spec[role]!r} is not a top-level column of {source}"
            )
    delete = None
    if spec.get("delete") is not None:
        rule = check_keys(spec["delete"], _DELETE_KEYS, ("field",), f"{where}: upsert delete")
        if rule["field"] not in columns:
            raise DerivedTableError(
                f"{where}: upsert delete field {rule['field']!r} is not a column of {source}"
            )
        if ("equals" in rule) == ("one_of" in rule):
            raise DerivedTableError(f"{where}: upsert delete needs equals or one_of (not both)")
        values = [rule["equals"]] if "equals" in rule else rule["one_of"]
        if not isinstance(values, list) or not values:
            raise DerivedTableError(f"{where}: upsert delete one_of must be a non-empty list")
        delete = DeleteRule(rule["field"], tuple(str(v) for v in values))
    upsert = UpsertSpec(spec["key"], spec["version"], delete)
    return DerivedTable(name, description, (source,), upsert=upsert)


def _sql_table(
    raw: Mapping[str, Any],
    name: str,
    description: str,
    declared: Mapping[str, frozenset[str]],
    where: str,
) -> DerivedTable:
    if "from" in raw:
        raise DerivedTableError(f"{where}: from applies to upsert tables, not sql")
    sql = raw["sql"]
    if not isinstance(sql, str) or not sql.strip():
        raise DerivedTableError(f"{where}: sql must be a Spark SQL query")
    refresh = raw.get("refresh", "full")
    if refresh not in REFRESH_MODES:
        raise DerivedTableError(
            f"{where}: refresh must be one of {', '.join(REFRESH_MODES)}, got {refresh!r}"
        )
    inputs = referenced_tables(sql, where)
    unknown = [table for table in inputs if table not in declared]
    if unknown:
        raise DerivedTableError(
            f"{where}: the SQL reads {unknown[0]!r}, which is not a declared table; declared: "
            f"{', '.join(sorted(declared))}"
        )
    if not inputs:
        raise DerivedTableError(f"{where}: the SQL reads no declared table")
    if refresh != "full" and len(inputs) != 1:
        raise DerivedTableError(
            f"{where}: refresh {refresh} reads exactly one table (the one whose new rows drive "
            f"it), the SQL reads {', '.join(inputs)}; use refresh: full to join tables"
        )
    window = None
    if refresh == "windowed":
        spec = check_keys(raw.get("window"), _WINDOW_KEYS, _WINDOW_KEYS, f"{where}: window")
        if spec["column"] not in declared[inputs[0]]:
            raise DerivedTableError(
                f"{where}: window column {spec['column']!r} is not a column of {inputs[0]}"
            )
        if spec["size"] not in WINDOW_SIZES:
            raise DerivedTableError(
                f"{where}: window size must be one of {', '.join(WINDOW_SIZES)}, got "
                f"{spec['size']!r}"
            )
        window = WindowSpec(spec["column"], spec["size"], str(spec["output"]))
    elif "window" in raw:
        raise DerivedTableError(f"{where}: window applies to refresh: windowed only")
    return DerivedTable(name, description, inputs, sql=sql.strip(), refresh=refresh, window=window)


def referenced_tables(sql: str, where: str) -> tuple[str, ...]:
    """The tables a query reads (sorted), CTE names excluded."""
    try:
        statements = sqlglot.parse(sql, dialect="spark")
    except ParseError as exc:
        first = exc.errors[0] if exc.errors else {}
        at = f" at line {first.get('line')}, column {first.get('col')}" if first else ""
        problem = first.get("description", str(exc)) if first else str(exc)
        raise DerivedTableError(f"{where}: the SQL does not parse{at}: {problem}") from None
    if len(statements) != 1 or not isinstance(statements[0], exp.Query):
        raise DerivedTableError(f"{where}: sql must be one SELECT query")
    query = statements[0]
    ctes = {cte.alias_or_name for cte in query.find_all(exp.CTE)}
    names = {table.name for table in query.find_all(exp.Table) if table.name}
    return tuple(sorted(names - ctes))
