"""write_data_files: Parquet files add_files can take, one partition value per file."""

from __future__ import annotations

import dataclasses
import pickle
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.table import Table

from kinesis_lake.iceberg.commit import commit_files
from kinesis_lake.iceberg.data_files import TableWriteTarget, delete_files, write_data_files
from kinesis_lake_tests.iceberg.helpers import keys_of, raw_batch


def _local(path: str) -> Path:
    return Path(path.removeprefix("file://"))


def _data_files_on_disk(table: Table) -> list[Path]:
    return sorted(_local(table.location()).joinpath("data").rglob("*.parquet"))


def test_rows_spanning_three_days_become_three_single_partition_files(raw: Table) -> None:
    days = [raw_batch(range(0, 50), day=0), raw_batch(range(50, 80), day=1)]
    batch = pa.concat_batches([*days, raw_batch(range(80, 100), day=2)])
    target = TableWriteTarget.from_table(raw)

    written = write_data_files(target, [batch], file_prefix="t-0")
    outcome = commit_files(raw, written, writer_id="w", batch_id=0)
    paths = [file.path for file in written]

    assert len(paths) == 3
    assert all(p.startswith(f"{target.location}/data/") for p in paths)
    assert outcome.rows == 100
    partitions = sorted(task.file.partition[0] for task in raw.scan().plan_files())
    assert len(set(partitions)) == 3
    # Partition pruning keeps every row reachable: each day's filter finds exactly its rows.
    counts = [
        raw.scan(
            row_filter=f"approximate_arrival_timestamp >= '2024-05-0{d}T00:00:00+00:00' and "
            f"approximate_arrival_timestamp < '2024-05-0{d + 1}T00:00:00+00:00'"
        )
        .to_arrow()
        .num_rows
        for d in (1, 2, 3)
    ]
    assert counts == [50, 30, 20]
    assert keys_of(raw) == list(range(100))


def test_files_carry_statistics_zstd_and_microsecond_timestamps(raw: Table) -> None:
    target = TableWriteTarget.from_table(raw)
    (written,) = write_data_files(target, [raw_batch(range(10))], file_prefix="t-0")
    path = written.path

    metadata = pq.read_metadata(_local(path))
    columns = [metadata.row_group(0).column(i) for i in range(metadata.num_columns)]
    assert all(c.is_stats_set for c in columns)
    assert {c.compression for c in columns} == {"ZSTD"}
    arrow = pq.read_schema(_local(path))
    assert arrow.field("approximate_arrival_timestamp").type == pa.timestamp("us", tz="UTC")
    assert arrow.field("stream_name").metadata[b"PARQUET:field_id"] == b"1"
    # What the writer reports is what is on disk: the commit trusts it without reading.
    assert written.size_bytes == _local(path).stat().st_size
    assert written.footer.to_dict()["row_groups"] == metadata.to_dict()["row_groups"]
    assert pickle.loads(pickle.dumps(written)).footer.num_rows == 10


def test_files_roll_over_at_the_target_size(raw: Table) -> None:
    target = dataclasses.replace(TableWriteTarget.from_table(raw), target_file_size_bytes=4096)
    batches = [raw_batch(range(i * 200, (i + 1) * 200)) for i in range(10)]

    written = write_data_files(target, batches, file_prefix="t-0")
    commit_files(raw, written, writer_id="w", batch_id=0)

    assert len(written) > 2
    assert len({_local(f.path).parent for f in written}) == 1
    assert keys_of(raw) == list(range(2000))


def test_empty_input_writes_nothing(raw: Table) -> None:
    target = TableWriteTarget.from_table(raw)
    assert write_data_files(target, [], file_prefix="t-0") == []
    assert write_data_files(target, [raw_batch([])], file_prefix="t-1") == []
    assert _data_files_on_disk(raw) == []


def test_a_failing_input_leaves_no_files_behind(raw: Table) -> None:
    def batches() -> Iterator[pa.RecordBatch]:
        yield raw_batch(range(10), day=0)
        yield raw_batch(range(10, 20), day=1)
        raise RuntimeError("executor lost its input")

    with pytest.raises(RuntimeError, match="executor lost"):
        write_data_files(TableWriteTarget.from_table(raw), batches(), file_prefix="t-0")

    assert _data_files_on_disk(raw) == []


def test_batches_are_matched_to_the_table_schema(raw: Table) -> None:
    target = TableWriteTarget.from_table(raw)
    batch = raw_batch(range(3))
    # Spark hands over nullable columns, in its own order, without the optional column.
    loose = pa.RecordBatch.from_arrays(
        [batch.column(n) for n in reversed(batch.schema.names) if n != "source_error"],
        names=[n for n in reversed(batch.schema.names) if n != "source_error"],
    )
    (written,) = write_data_files(target, [loose], file_prefix="t-0")
    assert pq.read_schema(_local(written.path)).names == batch.schema.names

    with_null = loose.set_column(0, "batch_id", pa.array([1, None, 3], pa.int64()))
    with pytest.raises(ValueError, match="'batch_id' has 1 null"):
        write_data_files(target, [with_null], file_prefix="t-1")
    extra = batch.append_column("surprise", pa.array([1, 2, 3]))
    with pytest.raises(ValueError, match="surprise"):
        write_data_files(target, [extra], file_prefix="t-2")


def test_an_existing_file_is_never_overwritten(raw: Table) -> None:
    target = TableWriteTarget.from_table(raw)
    write_data_files(target, [raw_batch(range(3))], file_prefix="same")
    with pytest.raises(FileExistsError):
        write_data_files(target, [raw_batch(range(3))], file_prefix="same")


def test_target_pickles_small_and_keeps_secrets_out_of_repr(raw: Table) -> None:
    target = TableWriteTarget.from_table(raw)
    secret = dataclasses.replace(target, io_properties={"s3.secret-access-key": "hunter2"})

    assert pickle.loads(pickle.dumps(secret)) == secret
    assert len(pickle.dumps(target)) < 4096
    assert "hunter2" not in repr(secret)
    # The catalog's own properties (a database URI may hold a password) are not shipped.
    assert "uri" not in target.io_properties
    assert target.partition_fields == (("approximate_arrival_timestamp", "day"),)
    assert target.arrow_schema().names[0] == "stream_name"


def test_delete_files_is_idempotent(raw: Table) -> None:
    target = TableWriteTarget.from_table(raw)
    paths = [f.path for f in write_data_files(target, [raw_batch(range(3))], file_prefix="t-0")]

    delete_files(target.io_properties, target.location, paths)
    delete_files(target.io_properties, target.location, paths)

    assert _data_files_on_disk(raw) == []


def test_file_names_hold_no_character_hadoop_paths_refuse(raw: Table) -> None:
    """Iceberg Java failed on ``derive:r-1-...parquet`` ("Relative path in absolute URI")."""
    target = TableWriteTarget.from_table(raw)
    (written,) = write_data_files(target, [raw_batch([1])], file_prefix="derive:raw events/1")
    assert written.path.rsplit("/", 1)[1] == "derive-raw-events-1-00000.parquet"
