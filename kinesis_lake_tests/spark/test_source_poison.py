"""A record the source cannot represent lands flagged in the raw table; the rest commit.

Issue 15, defect 2: a well-formed KPL aggregate (valid protobuf and MD5) whose partition
key table holds the bytes ``ff fe`` made Arrow raise in the executor; the micro-batch
failed on every retry, so no shard advanced and the error named no record.
"""

from __future__ import annotations

import hashlib

from kinesis_lake.kinesis.kpl import KPL_MAGIC
from kinesis_lake.kinesis.streams import ensure_stream
from kinesis_lake.pipeline.ingest import run_ingestion
from kinesis_lake_tests.kinesis.helpers import protobuf_field, varint
from kinesis_lake_tests.pipeline_helpers import table_rows
from kinesis_lake_tests.spark.source_helpers import kinesis

SECOND_HALF = str(2**127 + 1)  # an explicit hash key in the second shard's range


def _aggregate_with_binary_key() -> bytes:
    """Two user records, the second keyed by non-UTF-8 bytes (the KPL spec, by hand)."""
    body = protobuf_field(1, b"good-key") + protobuf_field(1, b"\xff\xfe")
    for key_index, data in ((0, b'{"n":"valid"}'), (1, b'{"n":"poisoned"}')):
        body += protobuf_field(3, varint(1 << 3 | 0) + varint(key_index) + protobuf_field(3, data))
    return KPL_MAGIC + body + hashlib.md5(body).digest()


def test_binary_partition_key_is_flagged_and_other_shards_commit(
    spark, kinesalite_endpoint, settings_factory
):
    settings = settings_factory(kinesalite_endpoint, shard_count=2)
    client = kinesis(settings.endpoint_url)
    ensure_stream(client, settings.stream_name, settings.shard_count)
    poisoned = client.put_record(
        StreamName=settings.stream_name,
        Data=_aggregate_with_binary_key(),
        PartitionKey="outer",
        ExplicitHashKey=SECOND_HALF,
    )
    plain = {
        (hash_key, i): client.put_record(
            StreamName=settings.stream_name,
            Data=f'{{"plain":{i}}}'.encode(),
            PartitionKey=f"k{i}",
            ExplicitHashKey=hash_key,
        )
        for hash_key in ("0", SECOND_HALF)
        for i in range(3)
    }
    shards = {put["ShardId"] for put in plain.values()}
    assert len(shards) == 2 and poisoned["ShardId"] in shards

    result = run_ingestion(spark, settings)

    assert result.rows == 8
    rows = {
        (r["shard_id"], r["sequence_number"], r["sub_sequence_number"]): r
        for r in table_rows(settings, settings.raw_table)
    }
    assert len(rows) == 8
    for put in plain.values():
        row = rows[(put["ShardId"], put["SequenceNumber"], 0)]
        assert row["source_error"] is None
    valid = rows[(poisoned["ShardId"], poisoned["SequenceNumber"], 0)]
    assert (valid["partition_key"], valid["data"], valid["source_error"]) == (
        "good-key",
        b'{"n":"valid"}',
        None,
    )
    flagged = rows[(poisoned["ShardId"], poisoned["SequenceNumber"], 1)]
    assert flagged["data"] == b'{"n":"poisoned"}', "the payload is kept byte for byte"
    assert flagged["partition_key"] == "\\xff\\xfe" and flagged["aggregated"]
    assert "not UTF-8" in flagged["source_error"]
    assert poisoned["SequenceNumber"] in flagged["source_error"]
