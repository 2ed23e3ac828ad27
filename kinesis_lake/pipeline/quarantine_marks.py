"""Quarantined records leave the quarantine by being marked resolved once a table holds them.

Reconciliation counts unresolved quarantine rows only, so a record a table holds must not
stay unresolved there, or it counts twice. A row is never deleted: ``resolved_at`` and
``resolved_into`` mark it, and it stays as the history of its first verdict. Two commands
move records: a replay (after the declaration was fixed) and a new table's first refresh,
which fills the table from the whole raw table, records the quarantine holds as taken by
no table included. Both decide with the same rule (:func:`resolvable`) and mark with the
same commit (:func:`mark_resolved`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from functools import reduce

import pyarrow as pa
from pyiceberg.expressions import And, BooleanExpression, EqualTo, IsNull, Or
from pyiceberg.table import Table
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kinesis_lake.events import columns as C
from kinesis_lake.events.tables import quarantine_arrow_schema
from kinesis_lake.iceberg.commit import commit_arrow
from kinesis_lake.spark.routing import QUARANTINE

SOURCE_ERROR_PREFIX = "kinesis source error"
"""Rows the Kinesis source flagged: their payload is not the record, so none ever moves."""
WAS = "__was"
"""A candidate's ``target_table`` when quarantined (null: taken by no table)."""
KEYS = list(C.IDENTITY_COLUMNS)
_TABLE = "__table"


def movable(quarantine: DataFrame, stream_name: str) -> DataFrame:
    """The unresolved rows of ``stream_name`` that a table may take."""
    return quarantine.filter(
        F.col(C.RESOLVED_AT).isNull()
        & (F.col(C.STREAM_NAME) == stream_name)
        & ~F.col(C.ERROR).startswith(SOURCE_ERROR_PREFIX)
    )


def resolvable(candidates: DataFrame, outputs: dict[str, DataFrame], names: list[str]) -> DataFrame:
    """(identity, was, into): the candidates (identity, ``WAS``) that ``names`` now take.

    A row quarantined for one table is resolved when that table takes it; a row no table
    took is resolved when it lands in at least one table and nothing rejects it now.
    """
    typed = reduce(
        DataFrame.unionByName,
        [outputs[name].select(*KEYS, F.lit(name).alias(_TABLE)) for name in names],
    )
    rejected = outputs[QUARANTINE].select(*KEYS, F.col(C.TARGET_TABLE).alias(_TABLE))
    was = candidates.select(*KEYS, WAS)

    def considered(rows: DataFrame) -> DataFrame:
        return rows.join(was, KEYS).where(F.col(WAS).isNull() | (F.col(_TABLE) == F.col(WAS)))

    # A record with no table before: any rejection now (a null target too) keeps it out.
    refused = considered(rejected).select(*KEYS, WAS).distinct()
    landed = (
        considered(typed)
        .groupBy(*KEYS, WAS)
        .agg(F.concat_ws(",", F.sort_array(F.collect_set(_TABLE))).alias(C.RESOLVED_INTO))
    )
    same = [landed[k] == refused[k] for k in KEYS] + [landed[WAS].eqNullSafe(refused[WAS])]
    return landed.join(refused, same, "left_anti")


def mark_resolved(
    unresolved: DataFrame, fixed: DataFrame, quarantine: Table, *, writer_id: str, batch_id: int
) -> int:
    """Rewrite the ``fixed`` rows of ``unresolved`` with ``resolved_at`` / ``resolved_into``
    set, in one commit (idempotent under ``writer_id`` and ``batch_id``).

    Driver-side (copy-on-write through pyiceberg): only the rows that leave quarantine
    travel, and records move after a fix of the declaration, not every batch.
    """
    marked = (
        unresolved.drop(C.RESOLVED_INTO)
        .join(fixed, KEYS)
        .where(F.col(WAS).eqNullSafe(F.col(C.TARGET_TABLE)))
    )
    rows = marked.toArrow()
    if rows.num_rows == 0:
        return 0
    stamp = pa.scalar(datetime.now(UTC), pa.timestamp("us", tz="UTC"))
    keys = rows.select([*KEYS, WAS]).to_pylist()
    resolved = rows.set_column(
        rows.schema.get_field_index(C.RESOLVED_AT),
        C.RESOLVED_AT,
        pa.repeat(stamp, rows.num_rows),
    )
    schema = quarantine_arrow_schema()
    resolved = pa.Table.from_arrays(
        [resolved.column(name).cast(f.type) for name, f in zip(schema.names, schema, strict=True)],
        schema=schema,
    )
    commit_arrow(
        quarantine,
        resolved,
        writer_id=writer_id,
        batch_id=batch_id,
        overwrite_filter=_identity_filter(keys),
    )
    return resolved.num_rows


def _identity_filter(rows: list[dict]) -> BooleanExpression:
    def one(row: dict) -> BooleanExpression:
        target = IsNull(C.TARGET_TABLE) if row[WAS] is None else EqualTo(C.TARGET_TABLE, row[WAS])
        return And(
            EqualTo(C.SHARD_ID, row[C.SHARD_ID]),
            EqualTo(C.SEQUENCE_NUMBER, row[C.SEQUENCE_NUMBER]),
            EqualTo(C.SUB_SEQUENCE_NUMBER, row[C.SUB_SEQUENCE_NUMBER]),
            target,
            IsNull(C.RESOLVED_AT),
        )

    return reduce(Or, (one(row) for row in rows))
