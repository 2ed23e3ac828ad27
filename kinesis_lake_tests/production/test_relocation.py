"""The local profile's data directory carries everything a run needs to resume elsewhere.

Catalog, warehouse, Spark checkpoint and the source's progress all live in
``KINESIS_LAKE_DATA_DIR``, so restoring that one folder on another machine resumes the
stream exactly once. It must be restored at the same path: Iceberg records absolute
file locations, so a copy at another path would still point into the old folder (and
silently write into it if it still existed). ``open_catalog`` refuses that case loudly.
(The S3 variant, where only the checkpoint folder moves, is in ``test_aws_cluster.py``.)
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import pytest

from kinesis_lake.config import Settings
from kinesis_lake.iceberg.catalog import DataDirMovedError, open_catalog
from kinesis_lake.pipeline.ingest import run_ingestion
from kinesis_lake_tests.pipeline_helpers import produce, run_cli
from kinesis_lake_tests.production.lake_checks import (
    assert_raw_is_the_stream_exactly_once,
    raw_writer_ids,
)
from kinesis_lake_tests.production.profiles import LOCAL_PROFILE, read_profile

FIRST, SECOND = 200, 100


def test_local_data_dir_restored_on_another_machine_resumes_exactly_once(
    spark, moto_endpoint, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    data_dir = tmp_path / "machine-a" / "lake"
    env = {
        **read_profile(LOCAL_PROFILE),
        # What `kinesis-lake dev` fills in: the local endpoint it started.
        "KINESIS_ENDPOINT_URL": moto_endpoint.url,
        "KINESIS_STREAM_NAME": f"local-{uuid.uuid4().hex[:10]}",
        "KINESIS_LAKE_DATA_DIR": str(data_dir),
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    settings = Settings.from_env()
    produce(settings, FIRST, seed=41)
    run_ingestion(spark, settings)  # machine A: the test session's own Spark
    writers = raw_writer_ids(settings)

    # Machine A is gone; its data directory travels as an archive.
    archive = shutil.make_archive(str(tmp_path / "lake"), "gztar", root_dir=data_dir)
    shutil.rmtree(tmp_path / "machine-a")
    # Unpacked at another path, it is refused instead of half-working.
    elsewhere = tmp_path / "machine-b" / "other-path"
    shutil.unpack_archive(archive, elsewhere)
    with pytest.raises(DataDirMovedError, match="moved or copied"):
        open_catalog(settings.catalog_name, data_dir=elsewhere)
    # Unpacked at the same path (the volume mounted where it was), with a new home
    # folder and a new Spark process, it resumes.
    shutil.unpack_archive(archive, data_dir)
    (tmp_path / "machine-b" / "home").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "machine-b" / "home"))
    produce(settings, SECOND, seed=42)

    second = run_cli(settings, "ingest")

    assert second.returncode == 0, second.stderr[-4000:]
    assert_raw_is_the_stream_exactly_once(settings, FIRST + SECOND)
    assert raw_writer_ids(settings) == writers, "the restored checkpoint resumed the same query"
