"""The Iceberg sink's options: one documented table, unknown keys refused, one default home."""

from __future__ import annotations

from pathlib import Path

import pytest

from kinesis_lake.config import Settings
from kinesis_lake.spark.iceberg.options import OPTIONS, IcebergSinkOptionError, SinkOptions
from kinesis_lake.spark.iceberg.sink import SINK_NAME, IcebergDataSource


def test_an_unknown_option_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(IcebergSinkOptionError, match=r"'dataDirectory'.*known: table, catalog"):
        SinkOptions.parse({"table": "lake.raw", "dataDirectory": "/tmp/x"})


def test_every_option_of_the_table_is_accepted_in_any_case() -> None:
    options = {name.upper(): "1" for name in OPTIONS}
    options |= {"TABLE": "lake.raw", "POSITIONCOLUMNS": "a,b", "summary.Team": "data"}
    options |= {"WRITERPROPERTY.source-uuid": "u"}
    parsed = SinkOptions.parse(options)
    assert parsed.summary == {"Team": "data"}
    assert parsed.writer_properties == {"source-uuid": "u"}
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


def test_a_write_to_a_bare_table_name_is_refused_unless_the_namespace_is_given(
    spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bare name took its namespace from the environment of whichever process planned
    the write, so the same job could write into another namespace on another machine."""
    monkeypatch.delenv("KINESIS_LAKE_NAMESPACE", raising=False)
    frame = spark.range(1)
    writer = (
        frame.write.format(SINK_NAME)
        .option("dataDir", str(tmp_path))
        .option("writerId", "w")
        .option("batchId", "0")
        .mode("append")
    )
    with pytest.raises(Exception, match=r"'raw' would go to kinesis_lake\.raw") as failure:
        writer.option("table", "raw").save()
    assert "option 'namespace'" in str(failure.value)


def test_reading_a_missing_table_names_the_namespace_it_looked_in(
    spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KINESIS_LAKE_NAMESPACE", raising=False)
    reader = spark.read.format(SINK_NAME).option("dataDir", str(tmp_path))
    with pytest.raises(
        Exception, match=r"No table kinesis_lake\.nope \(a bare name, read in"
    ) as failure:
        reader.load("nope")
    assert "the default namespace" in str(failure.value)


def test_option_fresh_on_the_bare_tables_reader_fails_naming_the_registration() -> None:
    """Reading the stream's tail is the pipeline's: the bare source must not ignore it."""
    source = IcebergDataSource({"path": "raw_events", "FRESH": "True"})
    with pytest.raises(IcebergSinkOptionError, match=r"register_fresh_reads\(spark, settings\)"):
        source.schema()
