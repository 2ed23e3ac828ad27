"""Apache Iceberg's Java implementation and ``spark.read`` through the lake's batch reader
read every table of the demo's declared lake (the clickstream: nested structs, lists,
hourly and daily partitions, the quarantine, the aggregate, the upsert table after
merge-on-read refreshes (position delete files) and its tombstones, the windowed SQL
table after window replacements) as pyiceberg reads it. The lake is built once for both.
Iceberg Java also
reads a table declared from an Avro schema of every type the project maps (issue 35),
written through the pipeline from Avro records fastavro wrote, value for value."""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from datetime import date, datetime
from decimal import Decimal
from operator import itemgetter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.table import Table

from kinesis_lake.config import Settings
from kinesis_lake.events.declaration_file import load_declaration
from kinesis_lake.kinesis.client import kinesis_client
from kinesis_lake.kinesis.producer import put_records, sample_events
from kinesis_lake.kinesis.streams import ensure_stream
from kinesis_lake.pipeline.derive import refresh_downstream
from kinesis_lake.pipeline.ingest import run_ingestion
from kinesis_lake.pipeline.lake import lake_streams, open_lake
from kinesis_lake.spark.iceberg.sink import SINK_NAME
from kinesis_lake_tests.events.avro_records import MAPPED, mapped_record
from kinesis_lake_tests.events.registry import avro_datum
from kinesis_lake_tests.interop.iceberg_java import read_with_iceberg_java
from kinesis_lake_tests.lake_settings import make_settings
from kinesis_lake_tests.pipeline_helpers import put

CLICKSTREAM = Path(__file__).resolve().parents[2] / "schemas" / "clickstream.yaml"
MAPPED_DECLARATION = """\
streams:
  - {{name: {stream}, format: avro, schema_file: mapped.avsc}}
tables:
  - {{name: mapped, schema_file: mapped.avsc, dedup: id, event_time_field: at}}
"""


@pytest.fixture(scope="module")
def demo_lake(spark, kinesalite_endpoint, tmp_path_factory) -> tuple[Settings, dict[str, Table]]:
    settings = replace(
        make_settings(tmp_path_factory.mktemp("demo-lake"), kinesalite_endpoint.url),
        event_schema_path=CLICKSTREAM,
    )
    client = kinesis_client(settings.endpoint_url, settings.region)
    ensure_stream(client, settings.stream_name, settings.shard_count)
    events = sample_events(600, malformed_every=30, unrouted_every=50, seed=8)
    for part in (events[:300], events[300:]):  # the second refresh rewrites and replaces
        put_records(client, settings.stream_name, part)
        run_ingestion(spark, settings)
        refresh_downstream(spark, settings)

    catalog = open_lake(settings)
    declaration = load_declaration(CLICKSTREAM)
    names = [
        "raw_events",
        *declaration.names,
        "events_quarantine",
        "event_counts_per_minute",
        *(table.name for table in declaration.derived),
        *(table.tombstones for table in declaration.derived if table.upsert),
    ]
    return settings, {name: catalog.load_table(settings.table_identifier(name)) for name in names}


@pytest.fixture(scope="module")
def mapped_table(spark, kinesalite_endpoint, tmp_path_factory) -> tuple[Table, list[dict]]:
    """The Avro-declared table after one ingestion of ``MAPPED`` records, and the records."""
    folder = tmp_path_factory.mktemp("avro-lake")
    (folder / "mapped.avsc").write_text(json.dumps(MAPPED))
    declaration = MAPPED_DECLARATION.format(stream=f"avro-{uuid.uuid4().hex[:10]}")
    settings = make_settings(folder / "data", kinesalite_endpoint.url, declaration=declaration)
    (stream,) = lake_streams(settings, load_declaration(settings.event_schema_path))
    records = [mapped_record(index) for index in range(6)]
    put(stream, *(avro_datum(MAPPED, record) for record in records))
    run_ingestion(spark, stream)
    refresh_downstream(spark, settings)
    return open_lake(settings).load_table(settings.table_identifier("mapped")), records


def test_iceberg_java_reads_a_table_declared_from_an_avro_schema(mapped_table):
    table, records = mapped_table
    rows = sorted(table.scan().to_arrow().to_pylist(), key=lambda row: row["id"])
    # pyarrow gives a map as (key, value) pairs, and the table drops no field of the schema
    stored = [{**row, "counts": dict(row["counts"])} for row in rows]
    assert [{name: row[name] for name in records[0]} for row in stored] == records

    (found,) = read_with_iceberg_java([table.metadata_location]).values()

    assert found["rows"] == len(records)
    java_rows = sorted((json.loads(row) for row in found["rendered"]), key=lambda r: r["id"])
    assert [{name: row[name] for name in records[0]} for row in java_rows] == [
        {name: _as_spark_renders(value) for name, value in record.items()} for record in records
    ]


def _as_spark_renders(value: Any) -> Any:
    """``value`` as Spark's ``to_json`` renders it with java_read.py's options."""
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%dT%H:%M:%S.%f") + ("Z" if value.tzinfo else "")
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, dict):
        return {key: _as_spark_renders(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_as_spark_renders(item) for item in value]
    return value


def test_iceberg_java_reads_every_demo_table_with_pyicebergs_row_counts(demo_lake):
    _, tables = demo_lake
    expected = {t.metadata_location: len(t.scan().to_arrow()) for t in tables.values()}

    java = read_with_iceberg_java(list(expected))

    assert {m: found["rows"] for m, found in java.items()} == expected
    assert all(count > 0 for count in expected.values()), expected
    # The upsert table is merge-on-read: Java must apply the position deletes (the files
    # hold the replaced rows too) and give exactly pyiceberg's rows, value for value.
    profiles = tables["user_profiles"]
    summary = profiles.current_snapshot().summary
    assert int(summary["total-position-deletes"]) > 0
    assert int(summary["total-records"]) > expected[profiles.metadata_location]
    java_rows = [json.loads(row) for row in java[profiles.metadata_location]["rendered"]]
    pyiceberg_rows = [_as_spark_renders(row) for row in profiles.scan().to_arrow().to_pylist()]
    by_user = itemgetter("user_id")
    assert sorted(java_rows, key=by_user) == sorted(pyiceberg_rows, key=by_user)
    assert all(found["json_chars"] > 0 for found in java.values())


def _rows(table: pa.Table) -> list[str]:
    """Order-free, type-tolerant form of every row (Spark's Arrow types differ slightly)."""
    return sorted(json.dumps(row, sort_keys=True, default=str) for row in table.to_pylist())


def test_spark_read_of_every_demo_table_matches_pyiceberg(spark, demo_lake):
    settings, tables = demo_lake
    for name, table in tables.items():
        frame = (
            spark.read.format(SINK_NAME)
            .option("dataDir", str(settings.data_dir))
            .option("namespace", settings.namespace)
            .load(name)
        )
        expected = table.scan().to_arrow()
        assert frame.columns == expected.column_names, name
        assert _rows(frame.toArrow()) == _rows(expected), name
