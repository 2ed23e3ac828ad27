"""The same code against an S3 warehouse (moto on 127.0.0.1), configured the pyiceberg way."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from moto.server import ThreadedMotoServer
from pyarrow.fs import FileSelector, S3FileSystem

from kinesis_lake.iceberg.catalog import ensure_namespace, open_catalog
from kinesis_lake.iceberg.data_files import TableWriteTarget, write_data_files
from kinesis_lake.iceberg.maintenance import compact, expire_snapshots, remove_orphan_files
from kinesis_lake.iceberg.raw_table import ensure_raw_table
from kinesis_lake_tests.iceberg.helpers import RAW, ingest, keys_of, raw_batch

CREDENTIALS = {"access-key-id": "testing", "secret-access-key": "testing", "region": "us-east-1"}


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    ).create_bucket(Bucket="lake")
    yield endpoint
    server.stop()


def test_ingest_compact_and_clean_an_s3_table(
    s3_endpoint: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    prefix = "PYICEBERG_CATALOG__KINESIS_LAKE__"
    monkeypatch.setenv(f"{prefix}URI", f"sqlite:///{tmp_path}/catalog.db")
    monkeypatch.setenv(f"{prefix}WAREHOUSE", f"s3://lake/{tmp_path.name}")
    monkeypatch.setenv(f"{prefix}S3__ENDPOINT", s3_endpoint)
    for key, value in CREDENTIALS.items():
        monkeypatch.setenv(f"{prefix}S3__{key.upper().replace('-', '_')}", value)
    catalog = open_catalog(data_dir=tmp_path / "unused")
    ensure_namespace(catalog, "lake")
    table = ensure_raw_table(catalog, RAW)

    for batch_id in range(3):
        ingest(table, "w", batch_id, range(batch_id * 10, batch_id * 10 + 10), day=batch_id % 2)
    target = TableWriteTarget.from_table(table)
    stray = write_data_files(target, [raw_batch(range(900, 905))], file_prefix="died")
    compacted = compact(table, target_file_size_bytes=64 * 1024 * 1024)
    expire_snapshots(table, older_than_ms=int(time.time() * 1000) + 1, retain_last=1)
    removed = remove_orphan_files(table, older_than_ms=int(time.time() * 1000) + 1)

    assert target.location.startswith("s3://lake/")
    assert set(target.io_properties) == {f"s3.{key}" for key in CREDENTIALS} | {"s3.endpoint"}
    assert compacted.files_rewritten == 2
    assert removed.orphans_removed > 3
    assert keys_of(table) == list(range(30))
    s3 = S3FileSystem(
        access_key="testing",
        secret_key="testing",
        region="us-east-1",
        endpoint_override=s3_endpoint,
    )
    left = {
        f"s3://{info.path}"
        for info in s3.get_file_info(FileSelector(f"lake/{tmp_path.name}", recursive=True))
        if info.is_file
    }
    assert not {file.path for file in stray} & left
    assert {task.file.file_path for task in table.scan().plan_files()} <= left
