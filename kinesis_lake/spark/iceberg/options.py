"""Options of the ``kinesis_lake_iceberg`` data source, parsed without importing Iceberg.

Spark parses them in every process that creates the data source (see
:mod:`kinesis_lake.spark.iceberg.sink`), most of which never open the table: the catalog
is imported only when a table is loaded.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

from kinesis_lake.errors import ConfigurationError
from kinesis_lake.iceberg.defaults import DEFAULT_CATALOG_NAME, DEFAULT_NAMESPACE, default_data_dir

if TYPE_CHECKING:
    from pyiceberg.table import Table


class IcebergSinkOptionError(ConfigurationError):
    """An option of the Iceberg sink is missing, unknown or malformed."""


# option name (as users write it) -> (default, description). Spark passes keys in any case.
OPTIONS: dict[str, tuple[str | None, str]] = {
    "table": (
        None,
        "Table to write or read, as 'namespace.name' or a name in 'namespace' (required; "
        ".save(name) and .load(name) work too). Writes refuse a bare name without option "
        "'namespace': its namespace would come from the planning process's environment.",
    ),
    "catalog": (DEFAULT_CATALOG_NAME, "pyiceberg catalog name."),
    "dataDir": (
        str(default_data_dir()),
        "Home of the embedded default catalog and warehouse (when the catalog has no "
        "configuration of its own).",
    ),
    "writerId": (None, "Writer identity for the commit protocol; default the query's id."),
    "batchIdColumn": (None, "A column to fill with the micro-batch id."),
    "batchId": (None, "Batch writes: the id to commit under (required with writerId)."),
    "positionColumns": (
        None,
        "'<shard column>,<sequence number column>': record and guard committed positions.",
    ),
    "checkpointLocation": (None, "Spark's own streaming checkpoint (read by Spark)."),
    "queryName": (None, "The streaming query's name (Spark passes .queryName() here)."),
}
READ_OPTIONS: dict[str, tuple[str | None, str]] = {
    "snapshot-id": (None, "Reads: the snapshot to read (time travel by id)."),
    "as-of-timestamp": (
        None,
        "Reads: the snapshot current at this time (epoch milliseconds or ISO-8601).",
    ),
    "columns": (None, "Reads: comma-separated top-level columns to read (default all)."),
    "filter": (
        None,
        "Reads: an Iceberg row filter (pyiceberg syntax): only matching rows are read, from "
        "only the partitions and files whose statistics can hold them.",
    ),
    "fresh": (
        None,
        "Reads: 'true' reads the table fresh (its snapshot plus its stream's uncommitted "
        "tail); needs the lake's registration (kinesis_lake.pipeline.fresh_spark).",
    ),
    "freshMaxRecords": (None, "Fresh reads: Kinesis records read at most (default 100000)."),
    "freshMaxAge": (
        None,
        "Fresh reads: seconds; a shard whose oldest uncommitted record is older is left out.",
    ),
    "namespace": (
        None,
        "Reads: namespace of a bare table name (default KINESIS_LAKE_NAMESPACE, else "
        f"{DEFAULT_NAMESPACE}).",
    ),
}


_SUMMARY_PREFIX = "summary."
"""Options ``summary.<key>`` become extra snapshot-summary entries."""
_WRITER_PROPERTY_PREFIX = "writerproperty."
"""Options ``writerProperty.<name>`` become the writer's own table properties
(``kinesis-lake.writer.<writer id>.<name>``), committed with its watermark."""
_PREFIXES = (_SUMMARY_PREFIX, _WRITER_PROPERTY_PREFIX)
OPTIONS.update(READ_OPTIONS)
_KNOWN = {name.lower() for name in OPTIONS} | {"path"}


def qualified(name: str, namespace: str | None) -> tuple[str, str | None]:
    """``raw_events`` -> ``<namespace>.raw_events``, and where that namespace came from
    (None for a name that was qualified already)."""
    if "." in name:
        return name, None
    if namespace:
        return f"{namespace}.{name}", "option 'namespace'"
    if os.environ.get("KINESIS_LAKE_NAMESPACE"):
        return f"{os.environ['KINESIS_LAKE_NAMESPACE']}.{name}", "KINESIS_LAKE_NAMESPACE"
    return f"{DEFAULT_NAMESPACE}.{name}", "the default namespace"


@dataclass(frozen=True)
class SinkOptions:
    table: str
    catalog: str
    data_dir: Path
    writer_id: str | None
    batch_id_column: str | None
    batch_id: int | None
    position_columns: tuple[str, str] | None = None
    summary: dict[str, str] = field(default_factory=dict)
    writer_properties: dict[str, str] = field(default_factory=dict)
    namespace_from: str | None = None
    """Where a bare table name's namespace came from; None when the name was qualified."""

    @classmethod
    def parse(cls, options: dict[str, str]) -> SinkOptions:
        lowered = {k.lower(): v for k, v in options.items()}
        unknown = sorted(
            key
            for key in options
            if key.lower() not in _KNOWN and not key.lower().startswith(_PREFIXES)
        )
        if unknown:
            raise IcebergSinkOptionError(
                f"Unknown option(s) {', '.join(map(repr, unknown))} of the Iceberg sink; known: "
                f"{', '.join(OPTIONS)}, {_SUMMARY_PREFIX}<key> and writerProperty.<name>."
            )
        table = lowered.get("table") or lowered.get("path")
        if not table:
            raise IcebergSinkOptionError(
                "Option 'table' is required: a table as 'namespace.name' or a name in the "
                "namespace of option 'namespace' (e.g. .load('raw_events'))."
            )
        table, namespace_from = qualified(table, lowered.get("namespace"))
        batch_id = lowered.get("batchid")
        if batch_id is not None and not batch_id.lstrip("-").isdigit():
            raise IcebergSinkOptionError(f"Option 'batchId'={batch_id!r} must be an integer.")
        data_dir = lowered.get("datadir")
        positions = lowered.get("positioncolumns")
        position_columns = None
        if positions:
            parts = tuple(p.strip() for p in positions.split(","))
            if len(parts) != 2 or not all(parts):
                raise IcebergSinkOptionError(
                    f"Option 'positionColumns'={positions!r} must name two columns: "
                    "'<shard column>,<sequence number column>'."
                )
            position_columns = (parts[0], parts[1])
        return cls(
            table=table,
            catalog=lowered.get("catalog") or DEFAULT_CATALOG_NAME,
            data_dir=Path(data_dir) if data_dir else default_data_dir(),
            writer_id=lowered.get("writerid"),
            batch_id_column=lowered.get("batchidcolumn"),
            batch_id=int(batch_id) if batch_id is not None else None,
            position_columns=position_columns,
            summary={
                key[len(_SUMMARY_PREFIX) :]: value
                for key, value in options.items()
                if key.lower().startswith(_SUMMARY_PREFIX)
            },
            writer_properties={
                key[len(_WRITER_PROPERTY_PREFIX) :]: value
                for key, value in options.items()
                if key.lower().startswith(_WRITER_PROPERTY_PREFIX)
            },
            namespace_from=namespace_from,
        )

    def load_table(self) -> Table:
        from kinesis_lake.iceberg.catalog import open_catalog

        catalog = open_catalog(self.catalog, data_dir=self.data_dir)
        try:
            return catalog.load_table(self.table)
        except NoSuchTableError:
            namespace = self.table.rsplit(".", 1)[0]
            try:
                names = sorted(".".join(t) for t in catalog.list_tables(namespace))
            except NoSuchNamespaceError:
                names = []
            looked = f" (a bare name, read in {self.namespace_from})" if self.namespace_from else ""
            raise IcebergSinkOptionError(
                f"No table {self.table}{looked} in catalog {self.catalog}; "
                + (f"it has: {', '.join(names)}." if names else f"{namespace} has no tables.")
            ) from None

    def load_table_to_write(self) -> Table:
        """Writes take no namespace from the environment: the same job planned on another
        machine would write into another namespace."""
        if self.namespace_from not in (None, "option 'namespace'"):
            bare = self.table.rsplit(".", 1)[1]
            raise IcebergSinkOptionError(
                f"Writes name their namespace: {bare!r} would go to {self.table} (from "
                f"{self.namespace_from}); write 'namespace.{bare}' or set option 'namespace'."
            )
        return self.load_table()
