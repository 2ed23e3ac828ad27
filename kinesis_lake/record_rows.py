"""A Kinesis user record as a row: the columns the ``kinesis`` source gives Spark and the
raw table stores first, identity and arrival first.

The source (``spark/kinesis/arrow.py``) and the raw table (``iceberg/raw_table.py``, which
adds the sink's stamps) must agree column for column, type for type: a record the source
emits is appended to the table as it is. They live in different layers that may not import
each other (the Spark source must not load pyiceberg), so the columns are defined once
here, at the bottom with ``errors``, and both build on them.
"""

from __future__ import annotations

import pyarrow as pa

UTC_MICROS = pa.timestamp("us", tz="UTC")

RECORD_ARROW_SCHEMA = pa.schema(
    [
        pa.field("stream_name", pa.string(), nullable=False),
        pa.field("shard_id", pa.string(), nullable=False),
        pa.field("sequence_number", pa.string(), nullable=False),
        pa.field("sub_sequence_number", pa.int64(), nullable=False),
        pa.field("partition_key", pa.string(), nullable=False),
        pa.field("approximate_arrival_timestamp", UTC_MICROS, nullable=False),
        pa.field("data", pa.binary(), nullable=False),
        pa.field("aggregated", pa.bool_(), nullable=False),
        pa.field("source_error", pa.string(), nullable=True),
    ]
)
