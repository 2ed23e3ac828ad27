"""Repeated events of a keyed routed table: the first occurrence is kept, the repeats quarantined.

Producers retry, so the same event can arrive twice, with the same event time. The dedup
window is declared, not accidental: two events are the same event when they share the key
and the UTC day of their event time; the same key on another day is another event.

Invariant: a record's verdict depends only on the records before it in Kinesis order
(shard, then sequence number as an integer, then sub-sequence), never on what else its
batch holds, so a re-run after a crash reaches the first run's verdicts. The lookup reads
only the table's day partitions the new events fall in: the cost follows the new data.
"""

from __future__ import annotations

from datetime import timedelta

from pyiceberg.expressions import AlwaysFalse, And, GreaterThanOrEqual, LessThan, Or
from pyiceberg.table import Table
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from kinesis_lake.events import columns as C
from kinesis_lake.events.schema import EventSchema
from kinesis_lake.pipeline.refresh import from_micros, iso
from kinesis_lake.spark.iceberg.files_reader import read_table_files

_KEY_EXCERPT_CHARS = 60


def deduplicate(
    spark: SparkSession,
    rows: DataFrame,
    raw_rows: DataFrame,
    table_name: str,
    schema: EventSchema,
    table: Table,
) -> tuple[DataFrame, DataFrame]:
    """Split a table's new rows into the first occurrence of each key and day, and the
    repeats as quarantine rows (with ``table_name`` as their target).

    Producers retry, so the same event can arrive twice, with the same event time. The dedup
    window is declared, not accidental: two events are the same event when they share the key
    and the UTC day of their event time. The first occurrence wins in Kinesis order (shard, then
    sequence number as an integer, then sub-sequence); later ones, in this slice or already in
    the table, are quarantined with the reason rather than dropped, so every raw row is still
    accounted for. The outcome of a record therefore depends only on the records before it,
    never on what else its batch holds, and the lookup reads only the table's day partitions
    the new events fall in: the cost follows the new data. The same key on another day is
    another event.

    A row already in the table that *is* the record being judged (same Kinesis identity) does
    not count as an earlier occurrence: after a crash between the table's and the quarantine's
    commits, the quarantine-only re-run must reach the verdicts of the first run, not
    quarantine every event it finds already written.
    """
    key = schema.event_key
    assert key is not None
    valid = rows.withColumn("__day", _day(C.EVENT_TIMESTAMP))
    order = Window.partitionBy(key, "__day").orderBy(
        C.SHARD_ID, F.length(C.SEQUENCE_NUMBER), C.SEQUENCE_NUMBER, C.SUB_SEQUENCE_NUMBER
    )
    ranked = valid.withColumn("__rank", F.row_number().over(order))
    earlier = _written_in_days(spark, valid, table, key)
    identity = F.struct(*C.IDENTITY_COLUMNS)
    if earlier is not None:
        # The day partitions hold every key of those days; only the new rows' keys can
        # match, and on a busy day they are few: drop the rest before the aggregation.
        # (No broadcast hint: a backfill's new keys can be millions; Spark decides.)
        new_keys = valid.select(key, "__day").distinct()
        occurrences = (
            earlier.join(new_keys, [key, "__day"], "left_semi")
            .groupBy(key, "__day")
            .agg(F.collect_set(identity).alias("__ids"))
        )
        ranked = ranked.join(occurrences, [key, "__day"], "left")
        seen = F.size(F.array_except("__ids", F.array(identity))) > 0
    else:
        seen = F.lit(False)
    duplicate = (F.col("__rank") > 1) | F.coalesce(seen, F.lit(False))
    payloads = raw_rows.select(*C.IDENTITY_COLUMNS, F.col(C.DATA).alias("__payload"))
    shown = F.col(key).cast("string")
    shown = F.when(
        F.length(shown) > _KEY_EXCERPT_CHARS,
        F.concat(F.substring(shown, 1, _KEY_EXCERPT_CHARS - 3), F.lit("...")),
    ).otherwise(shown)
    repeats = (
        ranked.filter(duplicate)
        .join(payloads, list(C.IDENTITY_COLUMNS), "left")
        .withColumn(C.PAYLOAD, F.col("__payload"))
        .withColumn(
            C.ERROR,
            F.format_string(
                f"duplicate event: {key}=%s was already parsed with an event time on the same "
                "UTC day",
                shown,
            ),
        )
        .withColumn(C.ERROR_FIELD, F.lit(key))
        .withColumn(C.QUARANTINED_AT, F.current_timestamp())
        .withColumn(C.TARGET_TABLE, F.lit(table_name))
        .withColumn(C.RESOLVED_AT, F.lit(None).cast("timestamp"))
        .withColumn(C.RESOLVED_INTO, F.lit(None).cast("string"))
    )
    firsts = ranked.filter(~duplicate).select(*rows.columns)
    return firsts, repeats


def _day(column: str) -> Column:
    """The UTC day of a timestamp column (the Spark session's time zone is UTC)."""
    return F.date_trunc("day", column)


def _written_in_days(
    spark: SparkSession, new_events: DataFrame, parsed: Table, key: str
) -> DataFrame | None:
    """Key, day and identity of the table's rows in the days new events fall into."""
    day_micros = [row[0] for row in new_events.select(F.unix_micros("__day")).distinct().collect()]
    if not day_micros or parsed.current_snapshot() is None:
        return None
    days = [from_micros(m) for m in day_micros]
    row_filter = Or(
        *(
            And(
                GreaterThanOrEqual(C.EVENT_TIMESTAMP, iso(day)),
                LessThan(C.EVENT_TIMESTAMP, iso(day + timedelta(days=1))),
            )
            for day in days
        ),
        AlwaysFalse(),
    )
    files = [task.file.file_path for task in parsed.scan(row_filter=row_filter).plan_files()]
    if not files:
        return None
    earlier = read_table_files(spark, parsed, files)
    return earlier.select(key, *C.IDENTITY_COLUMNS, _day(C.EVENT_TIMESTAMP).alias("__day"))
