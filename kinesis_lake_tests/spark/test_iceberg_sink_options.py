"""The Iceberg sink's options: one documented table, unknown keys refused, one default home."""

from __future__ import annotations

from pathlib import Path

import pytest

from kinesis_lake.config import Settings
from kinesis_lake.spark.iceberg_sink import (
    OPTIONS,
    SINK_NAME,
    IcebergSinkOptionError,
    SinkOptions,
)


def test_an_unknown_option_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(IcebergSinkOptionError, match=r"'dataDirectory'.*known: table, catalog"):
        SinkOptions.parse({"table": "lake.raw", "dataDirectory": "/tmp/x"})


def test_every_option_of_the_table_is_accepted_in_any_case() -> None:
    options = {name.upper(): "1" for name in OPTIONS}
    options |= {"TABLE": "lake.raw", "POSITIONCOLUMNS": "a,b", "summary.Team": "data"}
    parsed = SinkOptions.parse(options)
    assert parsed.summary == {"Team": "data"}
    assert parsed.batch_id == 1


def test_the_default_home_is_the_settings_default_whatever_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert SinkOptions.parse({"table": "lake.raw"}).data_dir == Settings().data_dir


def test_a_spark_write_with_a_misspelt_option_fails_naming_it(spark, tmp_path: Path) -> None:
    frame = spark.range(1)
    with pytest.raises(Exception, match=r"Unknown option.*'tabel'"):
        (
            frame.write.format(SINK_NAME)
            .option("tabel", "lake.raw")
            .option("table", "lake.raw")
            .option("dataDir", str(tmp_path))
            .mode("append")
            .save()
        )
