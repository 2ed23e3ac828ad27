"""Benchmark 14: what decoding Avro and Protobuf costs against JSON, per record, on the
executors' path (issue 35: "at comparable cost per record").

The same demo events, as JSON, as Avro behind the Glue Schema Registry's header (plain and
zlib-compressed) and as Protobuf (``format: protobuf`` with ``schemas/clickstream_event.proto``,
and behind the registry's header: message index, then the message), the schema versions
registered in a moto Glue on 127.0.0.1, go through
:func:`kinesis_lake.events.parse.route_events` in Arrow batches of the Spark source's size,
with the shipped declaration (``schemas/clickstream.yaml``) and its variants: decoded,
routed to the five tables, typed. No Spark, no Kinesis: this is the per-record work an
executor does between the reader and the writer. A warm-up pass fetches the schema version
and parses the readers (once per worker in the pipeline); rounds alternate the variants so a
drift of the shared machine's load hits them alike, and each variant's figure is its median
round. Every variant must route every record to the same tables, or the comparison is void.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any
from uuid import UUID

import boto3
import pyarrow as pa
from google.protobuf import json_format

from benchmarks.context import BenchContext
from benchmarks.machine import load_now
from benchmarks.stats import ratio
from kinesis_lake.events.declaration import LakeDeclaration
from kinesis_lake.events.declaration_file import load_declaration
from kinesis_lake.events.glue_registry import COMPRESSION_NONE
from kinesis_lake.events.parse import route_events
from kinesis_lake.events.payload_formats import GLUE_SCHEMA_REGISTRY, PROTOBUF, PayloadFormat
from kinesis_lake.events.proto_schemas import all_messages, compile_proto_file, message_class
from kinesis_lake.iceberg.raw_table import RAW_ARROW_SCHEMA
from kinesis_lake.kinesis.endpoint import LocalKinesisEndpoint
from kinesis_lake.kinesis.producer import Entry, sample_events
from kinesis_lake.pipeline.encoded_events import declared_in_format, demo_payloads, framed

NAME = "decode_cost"
SPARK_MASTERS: tuple[str, ...] = ()  # no Spark: the executors' code, called directly
RECORDS = {"quick": 20_000, "full": 200_000}
BATCH_ROWS = 10_000
"""Rows per Arrow batch: Spark's spark.sql.execution.arrow.maxRecordsPerBatch default."""
ROUNDS = {"quick": 3, "full": 5}
STREAM = "bench-decode"
REGION = "us-east-1"
SHIPPED = Path(__file__).resolve().parents[1] / "schemas" / "clickstream.yaml"
DEMO_PROTO = SHIPPED.with_name("clickstream_event.proto")
PROTO_MESSAGE = "kinesis_lake.demo.ClickstreamEvent"
START_MS = 1_700_000_000_000


def _batches(entries: list[Entry]) -> list[pa.RecordBatch]:
    """Raw rows as the Kinesis source hands them to the parser, ``BATCH_ROWS`` a batch."""
    batches = []
    for start in range(0, len(entries), BATCH_ROWS):
        part = entries[start : start + BATCH_ROWS]
        size = len(part)
        stamps = pa.array([START_MS * 1000] * size, pa.timestamp("us", tz="UTC"))
        columns = {
            "stream_name": pa.array([STREAM] * size),
            "shard_id": pa.array(["shardId-000000000000"] * size),
            "sequence_number": pa.array([str(start + i + 1) for i in range(size)]),
            "sub_sequence_number": pa.array([0] * size, pa.int64()),
            "partition_key": pa.array([key for key, _ in part]),
            "approximate_arrival_timestamp": stamps,
            "data": pa.array([data for _, data in part], pa.binary()),
            "aggregated": pa.array([False] * size),
            "source_error": pa.array([None] * size, pa.string()),
            "ingested_at": stamps,
            "batch_id": pa.array([0] * size, pa.int64()),
        }
        arrays = [columns[field.name] for field in RAW_ARROW_SCHEMA]
        batches.append(pa.RecordBatch.from_arrays(arrays, schema=RAW_ARROW_SCHEMA))
    return batches


def _route_all(batches: list[pa.RecordBatch], declaration: LakeDeclaration) -> dict[str, int]:
    """Rows per table (and quarantined) over every batch."""
    counts: dict[str, int] = {}
    for batch in batches:
        routed = route_events(batch, declaration)
        for name, table in routed.tables.items():
            counts[name] = counts.get(name, 0) + table.num_rows
        counts["quarantine"] = counts.get("quarantine", 0) + routed.quarantine.num_rows
    return counts


def _protobuf_entries(json_entries: list[Entry], version: UUID | None) -> list[Entry]:
    """The JSON events as ``ClickstreamEvent`` messages (a heartbeat's send time as its event
    time, as in the Avro events); behind the registry's header when ``version`` is given:
    the message's index among the schema's messages sorted by full name, as a varint, then
    the message (the registry's Protobuf serializer's body)."""
    schema = compile_proto_file(DEMO_PROTO, DEMO_PROTO.name)
    descriptor = schema.message(PROTO_MESSAGE)
    cls = message_class(descriptor)
    index = sorted(m.full_name for m in all_messages(schema.file())).index(PROTO_MESSAGE)
    assert index < 0x80, "one varint byte"
    entries = []
    for key, data in json_entries:
        event = json.loads(data)
        if "sent_at" in event:
            event["event_time"] = event.pop("sent_at")
        body = json_format.ParseDict(event, cls()).SerializeToString()
        if version is not None:
            body = framed(version, bytes([index]) + body, COMPRESSION_NONE)
        entries.append((key, body))
    return entries


def _registered_proto(registry_url: str) -> UUID:
    """The demo .proto's version in the moto registry: the first of a new schema."""
    glue = boto3.client("glue", region_name=REGION, endpoint_url=registry_url)
    glue.create_registry(RegistryName="bench-decode-proto")
    answer = glue.create_schema(
        RegistryId={"RegistryName": "bench-decode-proto"},
        SchemaName="clickstream",
        DataFormat="PROTOBUF",
        Compatibility="BACKWARD",
        SchemaDefinition=DEMO_PROTO.read_text(encoding="utf-8"),
    )
    return UUID(answer["SchemaVersionId"])


def _variants(
    ctx: BenchContext, records: int, registry_url: str
) -> dict[str, tuple[list[pa.RecordBatch], LakeDeclaration]]:
    registry = {"region": REGION, "endpoint_url": registry_url}
    scratch = ctx.scratch(NAME)
    glue_file = scratch / "clickstream_glue.yaml"
    glue_file.write_text(
        declared_in_format(SHIPPED, GLUE_SCHEMA_REGISTRY, STREAM, "raw_events", registry)
    )
    proto_file = scratch / "clickstream_protobuf.yaml"
    proto_file.write_text(
        declared_in_format(SHIPPED, PROTOBUF, STREAM, "raw_events", schema_file=DEMO_PROTO)
    )
    # A registry stream's Protobuf versions are read by their own .proto: the Avro
    # reader's schema of the variant applies to Avro versions only.
    glue_declaration = load_declaration(glue_file)
    fmt = PayloadFormat(GLUE_SCHEMA_REGISTRY, None, REGION, registry_url)
    json_entries = sample_events(records, unrouted_every=100, seed=11, start_ms=START_MS)
    entries = {
        "json": json_entries,
        **{
            label: demo_payloads(
                fmt,
                STREAM,
                records,
                unrouted_every=100,
                seed=11,
                start_ms=START_MS,
                zlib_compressed=zlib,
            )
            for label, zlib in (("avro_registry", False), ("avro_registry_zlib", True))
        },
        "protobuf": _protobuf_entries(json_entries, None),
        "protobuf_registry": _protobuf_entries(json_entries, _registered_proto(registry_url)),
    }
    declarations = {
        "json": load_declaration(SHIPPED),
        "protobuf": load_declaration(proto_file),
    }
    return {
        label: (_batches(produced), declarations.get(label, glue_declaration))
        for label, produced in entries.items()
    }


def run(ctx: BenchContext) -> dict[str, Any]:
    records = max(BATCH_ROWS, int(RECORDS[ctx.mode] * ctx.scale))
    rounds = ROUNDS[ctx.mode]
    with LocalKinesisEndpoint("moto") as registry:
        variants = _variants(ctx, records, registry.url)
        outcomes = {label: _route_all(*variant) for label, variant in variants.items()}  # warm-up
        if len({tuple(sorted(counts.items())) for counts in outcomes.values()}) != 1:
            raise RuntimeError(f"the variants route the same records differently: {outcomes}")
        seconds: dict[str, list[float]] = {label: [] for label in variants}
        for round_number in range(rounds):
            order = list(variants) if round_number % 2 == 0 else list(variants)[::-1]
            for label in order:
                began = time.perf_counter()
                _route_all(*variants[label])
                seconds[label].append(round(time.perf_counter() - began, 3))
    rates = {label: round(records / statistics.median(runs)) for label, runs in seconds.items()}
    payload_bytes = {
        label: sum(batch.column("data").nbytes for batch in batches)
        for label, (batches, _) in variants.items()
    }
    return {
        "records": records,
        "batch_rows": BATCH_ROWS,
        "rounds": rounds,
        "seconds": seconds,
        "records_per_second": rates,
        "payload_bytes": payload_bytes,
        "routed": outcomes["json"],
        "ratio": ratio(rates["avro_registry"], rates["json"]),
        "ratio_zlib": ratio(rates["avro_registry_zlib"], rates["json"]),
        "ratio_protobuf": ratio(rates["protobuf"], rates["json"]),
        "ratio_protobuf_registry": ratio(rates["protobuf_registry"], rates["json"]),
        "target": "comparable to JSON (issue 35)",
        "verdict": "measured",
        "load_average": load_now(),
        "notes": (
            f"ratio = records/s of Avro behind the Glue Schema Registry header / records/s "
            "of JSON (ratio_protobuf: plain Protobuf; ratio_protobuf_registry: Protobuf "
            f"behind the header), the same {records:,} demo events through route_events "
            f"(decode, route to five tables, type) in {BATCH_ROWS:,}-row Arrow batches; "
            f"median of {rounds} alternating rounds after a warm-up pass (schema versions "
            "fetched, readers parsed)."
        ),
    }
