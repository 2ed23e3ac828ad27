"""Create a table, or evolve an existing one towards the schema the code now declares.

Jobs call :func:`ensure_table` at startup, so deploying code with a new optional column
is all it takes to add the column: Iceberg adds it in metadata only, with no data
rewrite, and old files read it as null. Changes Iceberg cannot make in place are
refused up front with an error that says what to do, instead of failing later inside a
commit or silently producing files the table cannot read.

The partition spec and sort order are used when the table is created; an existing
table keeps its own (changing partitioning is a deliberate migration, not a deploy).
"""

from __future__ import annotations

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError, ResolveError
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionSpec
from pyiceberg.schema import Schema, assign_fresh_schema_ids, index_by_name, promote
from pyiceberg.table import Table, Transaction
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER, SortOrder
from pyiceberg.table.update.schema import UpdateSchema
from pyiceberg.types import DecimalType, IcebergType, ListType, MapType, StructType

from kinesis_lake.errors import TableError

# Evolution commits only conflict with another process evolving the same table at the
# same moment (two jobs starting together); a couple of fresh attempts settle it.
_EVOLVE_ATTEMPTS = 3


class SchemaEvolutionError(TableError, ValueError):
    """The declared schema cannot be reached from the table's schema in place."""


def ensure_table(
    catalog: Catalog,
    identifier: str,
    schema: Schema,
    *,
    partition_spec: PartitionSpec | None = None,
    sort_order: SortOrder | None = None,
    properties: dict[str, str] | None = None,
) -> Table:
    """Return table ``identifier`` with ``schema``'s columns and ``properties`` applied.

    Missing table: created. Existing table: new columns are added by name, allowed type
    promotions (int -> long, float -> double, wider decimals) applied, and properties
    it does not have yet are set (values a user changed on the table are kept).

    Raises:
        SchemaEvolutionError: a column's type cannot be promoted, a required column is
            missing from ``schema``, or ``schema`` makes a column required that the
            table has as optional (or adds a new required column).
    """
    wanted_properties = dict(properties or {})
    try:
        table = catalog.load_table(identifier)
    except NoSuchTableError:
        # Loading first avoids a failed create, which would leave a metadata file behind.
        return catalog.create_table_if_not_exists(
            identifier,
            schema,
            partition_spec=partition_spec or UNPARTITIONED_PARTITION_SPEC,
            sort_order=sort_order or UNSORTED_SORT_ORDER,
            properties=wanted_properties,
        )

    for attempt in range(1, _EVOLVE_ATTEMPTS + 1):
        missing = {k: v for k, v in wanted_properties.items() if k not in table.properties}
        try:
            with table.transaction() as tx:
                _evolution(tx, identifier, schema).commit()
                if missing:
                    tx.set_properties(missing)
        except CommitFailedException:
            if attempt == _EVOLVE_ATTEMPTS:
                raise
            table.refresh()
        else:
            break
    return table


def evolved_schema(table: Table, schema: Schema) -> Schema:
    """The schema ``table`` has once :func:`ensure_table` evolved it to ``schema``, without
    evolving it: what a fresh read gives before the refresh that commits the evolution has
    run (new columns last, widened types, columns ``schema`` dropped kept). The same
    evolution, so the two never differ; its column ids are those the commit would assign.

    Raises:
        SchemaEvolutionError: as :func:`ensure_table` would.
    """
    return _evolution(table.transaction(), ".".join(table.name()), schema)._apply()


def _evolution(tx: Transaction, identifier: str, schema: Schema) -> UpdateSchema:
    """The schema update that brings ``tx``'s table to ``schema`` (by name), not applied."""
    problems = schema_incompatibilities(tx.table_metadata.schema(), schema)
    if problems:
        raise SchemaEvolutionError(
            f"Table {identifier} cannot be evolved to the declared schema:\n- "
            + "\n- ".join(problems)
        )
    return tx.update_schema().union_by_name(schema)


def ensure_table_for_arrow(catalog: Catalog, identifier: str, columns: pa.Schema) -> Table:
    """``ensure_table`` for columns known only as Arrow: a query's result."""
    # The conversion create_table itself applies to an Arrow schema. It leaves every id
    # -1, and columns are matched by id within a schema: number them.
    schema = assign_fresh_schema_ids(Catalog._convert_schema_if_needed(columns))
    return ensure_table(catalog, identifier, schema)


def schema_incompatibilities(existing: Schema, desired: Schema) -> list[str]:
    """Why ``existing`` cannot evolve into ``desired`` in place; empty when it can.

    Columns are matched by full name (``a.b`` for nested fields), as ``union_by_name``
    matches them.
    """
    existing_ids = index_by_name(existing)
    desired_ids = index_by_name(desired)
    problems = []
    for name, desired_id in desired_ids.items():
        want = desired.find_field(desired_id)
        existing_id = existing_ids.get(name)
        if existing_id is None:
            parent = name.rpartition(".")[0]
            # Children of a new struct arrive with it; only a required new column is a problem.
            if want.required and (not parent or parent in existing_ids):
                problems.append(
                    f"new column '{name}' ({want.field_type}) is declared required, but rows "
                    "already in the table have no value for it. Declare it optional."
                )
            continue
        have = existing.find_field(existing_id)
        if not _types_compatible(have.field_type, want.field_type):
            problems.append(
                f"column '{name}' is {have.field_type} in the table and {want.field_type} in "
                "the declared schema, and Iceberg cannot promote one to the other. Keep the "
                f"type {have.field_type}, or add a new column with the new type and migrate."
            )
        if want.required and not have.required:
            problems.append(
                f"column '{name}' ({have.field_type}) is optional in the table but required in "
                "the declared schema; existing rows may hold nulls. Declare it optional."
            )
    for name, existing_id in existing_ids.items():
        have = existing.find_field(existing_id)
        parent = name.rpartition(".")[0]
        if name not in desired_ids and have.required and (not parent or parent in desired_ids):
            problems.append(
                f"required column '{name}' ({have.field_type}) is missing from the declared "
                "schema, so new files could not fill it. Keep the column in the schema, or "
                "make it optional on the table first (update_schema().make_column_optional)."
            )
    return problems


def _types_compatible(have: IcebergType, want: IcebergType) -> bool:
    """Same type, or one promotes to the other (a narrower declaration keeps the wider)."""
    if have == want:
        return True
    if have.is_primitive != want.is_primitive:
        return False
    if not have.is_primitive:
        # Same kind of nested type: its children are compared by name on their own.
        return type(have) is type(want)
    return _promotes(have, want) or _promotes(want, have)


def _promotes(narrow: IcebergType, wide: IcebergType) -> bool:
    if isinstance(narrow, DecimalType) and isinstance(wide, DecimalType):
        # The Iceberg spec widens precision only, at the same scale; pyiceberg 0.12's
        # promote() also accepts a new scale, which would misread every stored value.
        return narrow.scale == wide.scale and narrow.precision <= wide.precision
    try:
        promote(narrow, wide)
    except ResolveError:
        return False
    return True


def type_text(field_type: IcebergType) -> str:
    """A type as people read it, nested ones included, without field ids (which a catalog
    assigns afresh, so they differ between equal declarations)."""
    if isinstance(field_type, StructType):
        fields = ", ".join(
            f"{f.name}: {'required ' if f.required else ''}{type_text(f.field_type)}"
            for f in field_type.fields
        )
        return f"struct<{fields}>"
    if isinstance(field_type, ListType):
        required = "required " if field_type.element_required else ""
        return f"list<{required}{type_text(field_type.element_type)}>"
    if isinstance(field_type, MapType):
        return f"map<{type_text(field_type.key_type)}, {type_text(field_type.value_type)}>"
    return str(field_type)
