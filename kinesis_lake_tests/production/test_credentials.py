"""Objects that carry storage credentials to executors never print them.

Executor tasks hold the table's FileIO properties (S3 keys when a deployment configures
them) because executors have no catalog connection. Their reprs leave those out, so a
task that lands in a log line, an error report or a debugger's locals carries no secret.
"""

from __future__ import annotations

import pyarrow as pa

from kinesis_lake.iceberg.data_files import TableWriteTarget
from kinesis_lake.spark.iceberg.files_reader import FileTask

SECRET = "aws-secret-never-printed"
IO_PROPERTIES = {"s3.access-key-id": "key-id", "s3.secret-access-key": SECRET}


def test_executor_tasks_never_print_storage_credentials() -> None:
    schema = pa.schema([pa.field("id", pa.int64())]).serialize().to_pybytes()
    target = TableWriteTarget(
        identifier="lake.raw_events",
        location="s3://lake/warehouse/raw_events",
        io_properties=IO_PROPERTIES,
        partition_fields=(),
        target_file_size_bytes=1,
        arrow_schema_ipc=schema,
    )
    task = FileTask(f"{target.location}/data/f.parquet", target.location, IO_PROPERTIES, schema)

    for printed in (repr(target), str(target), repr(task), str(task), repr([task])):
        assert SECRET not in printed
    assert "raw_events" in repr(target) and "f.parquet" in repr(task)
