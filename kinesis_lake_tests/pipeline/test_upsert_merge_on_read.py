"""Merge-on-read upserts read exactly as copy-on-write ones, through every reader we have.

Two upsert tables of one declaration read the same source: ``user_profiles`` refreshes
merge-on-read (position delete files, the default) and ``user_profiles_cow`` was set back to
copy-on-write after its first refresh. Both get the same records (updates, deletes, late
older versions, repeats) through real Kinesis, Spark and Iceberg, and must hold the same
rows through pyiceberg, our Spark table reader, ``kinesis-lake query`` (DuckDB), a ``full``
SQL table over the upsert table, and after maintenance folded the deletes.
"""

from __future__ import annotations

from typing import Any

from pyiceberg.table import Table

from kinesis_lake.config import Settings
from kinesis_lake.iceberg.query import run_sql
from kinesis_lake.pipeline.lake import open_lake, table_stats
from kinesis_lake.pipeline.maintain import MaintenancePolicy, run_maintenance
from kinesis_lake.pipeline.upsert import UPDATE_MODE, merge_on_read
from kinesis_lake.spark.iceberg.sink import SINK_NAME
from kinesis_lake_tests.pipeline.declared_lakes import PROFILES, profile
from kinesis_lake_tests.pipeline_helpers import ingest_and_derive

DECLARATION = (
    PROFILES
    + """\
  - name: user_profiles_cow
    from: profile_updates
    upsert: {key: user_id, version: version, delete: {field: op, equals: delete}}
  - name: profile_count
    sql: SELECT count(*) AS profiles, count(DISTINCT user_id) AS users FROM user_profiles
    refresh: full
"""
)

BATCHES = [
    [profile("bob", 1), profile("cid", 2), profile("dee", 1), profile("eve", 1)],
    [
        profile("ann", 2),
        profile("bob", 3, op="delete"),
        profile("cid", 1),  # older: loses
        profile("eve", 1, email="again@example.com"),  # a tie: the later record wins
    ],
    [profile("bob", 2), profile("ann", 3), profile("fay", 1), profile("dee", 2)],
    [profile("bob", 4, email="back@example.com"), profile("dee", 5, op="delete")],
]


def _table(settings: Settings, name: str) -> Table:
    return open_lake(settings).load_table(settings.table_identifier(name))


def _sorted(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda row: row["user_id"])


def _pyiceberg_rows(table: Table) -> list[dict[str, Any]]:
    table.refresh()
    return _sorted(table.scan().to_arrow().to_pylist())


def _spark_rows(spark, settings: Settings, name: str) -> list[dict[str, Any]]:
    frame = (
        spark.read.format(SINK_NAME)
        .option("dataDir", str(settings.data_dir))
        .option("namespace", settings.namespace)
        .load(name)
    )
    return _sorted(frame.toArrow().to_pylist())


def _query_rows(settings: Settings, name: str) -> list[dict[str, Any]]:
    return _sorted(
        run_sql(open_lake(settings), settings.namespace, f"SELECT * FROM {name}").to_pylist()
    )


def _assert_every_reader_agrees(spark, settings: Settings) -> list[dict[str, Any]]:
    expected = _pyiceberg_rows(_table(settings, "user_profiles_cow"))
    merged = _table(settings, "user_profiles")
    assert _pyiceberg_rows(merged) == expected
    assert _spark_rows(spark, settings, "user_profiles") == expected
    assert _query_rows(settings, "user_profiles") == expected
    assert table_stats(merged).rows == len(expected)  # not total-records: it counts deletes
    count = _table(settings, "profile_count").scan().to_arrow().to_pylist()
    assert count == [{"profiles": len(expected), "users": len(expected)}]
    return expected


def test_merge_on_read_refreshes_read_as_copy_on_write_ones_everywhere(spark, settings):
    ingest_and_derive(spark, settings, *BATCHES[0])
    cow = _table(settings, "user_profiles_cow")
    with cow.transaction() as tx:
        tx.set_properties({UPDATE_MODE: "copy-on-write"})
    assert merge_on_read(_table(settings, "user_profiles"))
    # A refresh a minute adds a manifest a minute: merged early, as the raw table's are.
    assert (
        _table(settings, "user_profiles").properties["commit.manifest.min-count-to-merge"] == "10"
    )
    assert not merge_on_read(_table(settings, "user_profiles_cow"))

    for batch in BATCHES[1:]:
        ingest_and_derive(spark, settings, *batch)
        _assert_every_reader_agrees(spark, settings)

    merged = _table(settings, "user_profiles")
    summary = merged.current_snapshot().summary
    assert int(summary["total-position-deletes"]) > 0, "the refreshes wrote row deletes"
    assert int(summary["total-records"]) > table_stats(merged).rows
    assert (
        int(
            _table(settings, "user_profiles_cow")
            .current_snapshot()
            .summary.get("total-delete-files", "0")
        )
        == 0
    )
    assert {r["user_id"] for r in _pyiceberg_rows(merged)} == {"ann", "bob", "cid", "eve", "fay"}

    folded = run_maintenance(settings, "user_profiles", MaintenancePolicy())
    assert folded.files_rewritten > 0
    merged.refresh()
    assert all(not task.delete_files for task in merged.scan().plan_files())
    assert merged.current_snapshot().summary["total-position-deletes"] == "0"
    _assert_every_reader_agrees(spark, settings)

    ingest_and_derive(spark, settings, profile("ann", 9, email="after@example.com"))
    rows = _assert_every_reader_agrees(spark, settings)
    assert {r["user_id"]: r["email"] for r in rows}["ann"] == "after@example.com"
