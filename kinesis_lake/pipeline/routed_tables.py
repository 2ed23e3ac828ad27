"""A routed table created or evolved to its declaration, remembering the registry schema
version it follows.

A table declared from a registry schema (``registry_schema:``) evolves whenever the registry
has a new version and the declaration is loaded again: a new optional field becomes a
column, ``int`` widens to ``long``, ``float`` to ``double``, as for a new declared field. A
change Iceberg cannot make in place must then say which versions are involved, or the person
reading it cannot tell which registration did it: so the version a table was last evolved to
is kept on the table (``FOLLOWS_PROPERTY``) and named beside the new one.
"""

from __future__ import annotations

from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from kinesis_lake.events.declaration import TableDeclaration
from kinesis_lake.events.tables import parsed_partition_spec, parsed_table_schema
from kinesis_lake.iceberg.tables import SchemaEvolutionError, ensure_table

FOLLOWS_PROPERTY = "kinesis-lake.schema-version"
"""The registry schema version a table declared from the registry was last evolved to."""


def ensure_routed_table(catalog: Catalog, identifier: str, table: TableDeclaration) -> Table:
    """``identifier`` created, or evolved to ``table``'s fields; refused naming the table,
    the column and, for a registry schema, the version it follows and the new one."""
    schema = parsed_table_schema(table.schema)
    origin = table.origin
    try:
        loaded = ensure_table(
            catalog,
            identifier,
            schema,
            partition_spec=parsed_partition_spec(schema, table.partition),
        )
    except SchemaEvolutionError as exc:
        if origin is None or origin.version is None:
            raise
        follows = catalog.load_table(identifier).properties.get(FOLLOWS_PROPERTY, "an earlier one")
        raise SchemaEvolutionError(
            f"table {table.name!r} follows {origin.label}, and version {origin.version} (the "
            f"registry's now) is not compatible with version {follows} (the table's): {exc}\n"
            f"Register a version compatible with {follows}, or pin the table to it "
            f"(registry_schema: version: {follows})"
        ) from None
    version = None if origin is None or origin.version is None else str(origin.version)
    if version is not None and loaded.properties.get(FOLLOWS_PROPERTY) != version:
        with loaded.transaction() as tx:
            tx.set_properties({FOLLOWS_PROPERTY: version})
    return loaded
