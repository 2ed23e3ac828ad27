"""What "the lake is right" means, checked the same way by every production-shaped test.

Truth comes from outside the code under test: the stream as bare boto3 reads it
(``stream_truth``) and SQL over the committed tables (``run_sql``, what a user queries).
"""

from __future__ import annotations

import json
from collections import Counter

import boto3

from kinesis_lake.config import Settings
from kinesis_lake.iceberg.catalog import open_catalog
from kinesis_lake.iceberg.query import run_sql
from kinesis_lake.iceberg.summary import WRITER_ID
from kinesis_lake_tests.pipeline_helpers import raw_keys, stream_truth


def assert_raw_is_the_stream_exactly_once(settings: Settings, expected: int) -> None:
    """Every record of the stream is in the raw table once; nothing else is."""
    keys = raw_keys(settings)
    duplicates = [key for key, count in Counter(keys).items() if count > 1]
    assert not duplicates, f"{len(duplicates)} records committed more than once"
    assert {(shard, sequence) for shard, sequence, _ in keys} == stream_truth(settings)
    assert len(keys) == expected


def assert_derived_tables_add_up(settings: Settings, *, raw: int, malformed: int) -> None:
    """Queried as a user would: parsed + quarantined = raw, and the counts sum to parsed."""
    catalog = open_catalog(settings.catalog_name, data_dir=settings.data_dir)
    counts = run_sql(
        catalog,
        settings.namespace,
        """
        SELECT
          (SELECT count(*) FROM raw_events) AS raw,
          (SELECT count(*) FROM events) AS parsed,
          (SELECT count(*) FROM events_quarantine) AS quarantined,
          (SELECT sum(event_count) FROM event_counts_per_minute) AS counted
        """,
    ).to_pylist()[0]
    assert counts == {
        "raw": raw,
        "parsed": raw - malformed,
        "quarantined": malformed,
        "counted": raw - malformed,
    }


def data_file_paths(settings: Settings, table: str) -> list[str]:
    catalog = open_catalog(settings.catalog_name, data_dir=settings.data_dir)
    return [task.file.file_path for task in catalog.load_table(table).scan().plan_files()]


def all_tables(settings: Settings) -> list[str]:
    return [
        settings.raw_table,
        settings.table_identifier("events"),
        settings.quarantine_table,
        settings.aggregate_table,
    ]


def raw_writer_ids(settings: Settings) -> set[str]:
    """Who committed the raw table's snapshots: the Spark query id of each checkpoint."""
    catalog = open_catalog(settings.catalog_name, data_dir=settings.data_dir)
    table = catalog.load_table(settings.raw_table)
    return {
        snapshot.summary[WRITER_ID]
        for snapshot in table.snapshots()
        if snapshot.summary is not None and WRITER_ID in snapshot.summary.additional_properties
    }


def assert_athena_can_query(settings: Settings, glue_tables: list[dict]) -> None:
    """What Athena needs of a Glue table to query it as Iceberg (its documented
    requirements; Athena itself cannot run here): table parameter ``table_type`` ICEBERG,
    ``metadata_location`` at an Iceberg format-version 2 metadata file in S3, Parquet data
    files, and the columns listed in the Glue schema (for the console and DDL tools)."""
    s3 = boto3.client("s3", region_name=settings.region)
    catalog = open_catalog(settings.catalog_name, data_dir=settings.data_dir)
    with_files = set()
    for glue_table in glue_tables:
        name = glue_table["Name"]
        assert glue_table["TableType"] == "EXTERNAL_TABLE", name
        assert glue_table["Parameters"]["table_type"].upper() == "ICEBERG", name
        bucket, _, key = glue_table["Parameters"]["metadata_location"][5:].partition("/")
        metadata = json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
        assert metadata["format-version"] == 2, name
        table = catalog.load_table(f"{settings.namespace}.{name}")
        columns = [c["Name"] for c in glue_table["StorageDescriptor"]["Columns"]]
        assert columns == [field.name for field in table.schema().fields], name
        formats = {task.file.file_format.name for task in table.scan().plan_files()}
        assert formats <= {"PARQUET"}, (name, formats)  # empty tables have no files at all
        if formats:
            with_files.add(name)
    # Not vacuous: the raw table, at least, holds Parquet files.
    assert settings.raw_table.rsplit(".", 1)[1] in with_files, with_files
