"""Configuration errors fail at ``.load()``, before any query starts, naming the fix."""

from __future__ import annotations

import pytest
from pyspark.errors import AnalysisException

from kinesis_lake.kinesis.start_positions import StartPosition
from kinesis_lake.spark.datasource_api import ReadAllAvailable, ReadMaxBytes, ReadMaxRows
from kinesis_lake.spark.kinesis.options import KinesisOptionError, KinesisSourceOptions
from kinesis_lake.spark.kinesis.source import KinesisStreamReader, batch_caps
from kinesis_lake_tests.spark.source_helpers import REGION, new_stream

CASES = [
    pytest.param({"colour": "blue"}, ["Unknown option 'colour'", "startingPosition"], id="unknown"),
    pytest.param(
        {"startingPosition": "earliest"},
        ["startingPosition='earliest'", "trim_horizon, latest, at_timestamp", "JSON"],
        id="position",
    ),
    pytest.param(
        {"startingPosition": "at_timestamp"}, ["startingTimestamp", "ISO-8601"], id="no-timestamp"
    ),
    pytest.param(
        {"startingPosition": "at_timestamp", "startingTimestamp": "yesterday"},
        ["startingTimestamp='yesterday'", "epoch milliseconds"],
        id="bad-timestamp",
    ),
    pytest.param(
        {"startingPosition": "trim_horizon", "startingTimestamp": "1700000000000"},
        ["only used with startingPosition=at_timestamp"],
        id="timestamp-without-at_timestamp",
    ),
    pytest.param(
        {"startingPosition": '{"shardId-000000000000": 12}'},
        ["decimal sequence-number strings"],
        id="json-number",
    ),
    pytest.param({"startingPosition": "{oops"}, ["not valid JSON"], id="json-syntax"),
    pytest.param(
        {"startingPosition": '{"shardId-000000000007": "1"}'},
        ["shardId-000000000007", "shardId-000000000000, shardId-000000000001"],
        id="json-unknown-shard",
    ),
    pytest.param(
        {"maxRecordsPerShard": "0"}, ["'maxRecordsPerShard'='0'", "whole number >= 1"], id="zero"
    ),
    pytest.param(
        {"maxRecordsPerBatch": "lots"}, ["'maxRecordsPerBatch'='lots'", ">= 1"], id="not-a-number"
    ),
    pytest.param(
        {"minCallIntervalMs": "50"}, ["'minCallIntervalMs'='50'", ">= 200"], id="too-many-calls"
    ),
    pytest.param({"failOnDataLoss": "maybe"}, ["'failOnDataLoss'", "true or false"], id="bool"),
    pytest.param(
        {"consumerType": "fanout"}, ["'consumerType'='fanout'", "polling, efo"], id="consumer"
    ),
    pytest.param(
        {"consumerType": "efo"}, ["'consumerType'='efo'", "'metadataPath'"], id="efo-shared"
    ),
    pytest.param(
        {"consumerType": "efo", "consumerName": " "},
        ["'consumerType'='efo'", "'consumerName'"],
        id="efo-empty-name",
    ),
    pytest.param(
        {"consumerName": "mine"}, ["'consumerName'", "consumerType=efo only"], id="name-polling"
    ),
    pytest.param(
        {"streamName": "no-such-stream"},
        ["Option 'streamName'", "'no-such-stream' does not exist"],
        id="stream-missing",
    ),
]


@pytest.fixture(scope="module")
def stream(kinesalite_endpoint) -> str:
    return new_stream(kinesalite_endpoint.url, shards=2)


@pytest.mark.parametrize(("options", "expected"), CASES)
def test_a_bad_option_fails_at_load_naming_the_option_and_allowed_values(
    spark, kinesalite_endpoint, stream, options, expected
):
    reader = (
        spark.readStream.format("kinesis")
        .option("streamName", stream)
        .option("endpointUrl", kinesalite_endpoint.url)
        .option("regionName", REGION)
        .options(**options)
    )
    with pytest.raises(AnalysisException) as raised:
        reader.load()
    message = str(raised.value)
    assert "KinesisOptionError" in message
    for part in expected:
        assert part in message


def test_a_missing_stream_name_is_refused():
    with pytest.raises(KinesisOptionError, match="'streamName' is required"):
        KinesisSourceOptions.parse({"regionName": REGION})


def test_option_names_are_case_insensitive_and_defaults_apply():
    parsed = KinesisSourceOptions.parse({"STREAMNAME": "s", "maxrecordspershard": "7"})
    assert parsed.stream_name == "s"
    assert parsed.max_records_per_shard == 7
    assert parsed.max_records_per_batch is None
    assert parsed.fail_on_data_loss is True
    assert parsed.starting_position == StartPosition("LATEST")
    assert parsed.consumer_type == "polling"


@pytest.mark.parametrize("value", ["0", "1MB", "-5", "1.5"])
def test_a_bad_byte_cap_names_the_option_and_the_accepted_form(value):
    for name in ("maxBytesPerShard", "maxBytesPerBatch"):
        with pytest.raises(KinesisOptionError) as raised:
            KinesisSourceOptions.parse({"streamName": "s", name: value})
        assert f"{name!r}={value!r}" in str(raised.value)
        assert "whole number of bytes >= 1, such as 1048576" in str(raised.value)


def test_byte_caps_become_spark_read_limits_and_the_plans_budgets():
    """Spark takes one read limit from a Python source: records win, and the byte cap
    rides beside them; ReadAllAvailable (Trigger.Once) lifts both batch caps."""
    both = KinesisSourceOptions.parse(
        {"streamName": "s", "maxRecordsPerBatch": "50", "maxBytesPerBatch": "4096"}
    )
    bytes_only = KinesisSourceOptions.parse(
        {"streamName": "s", "maxBytesPerBatch": "4096", "maxBytesPerShard": "1024"}
    )
    assert bytes_only.max_bytes_per_shard == 1024
    assert both.max_bytes_per_shard is None
    default = KinesisStreamReader(bytes_only).getDefaultReadLimit()
    assert isinstance(default, ReadMaxBytes)
    assert batch_caps(default, bytes_only.max_bytes_per_batch) == (None, 4096)
    rows = KinesisStreamReader(both).getDefaultReadLimit()
    assert isinstance(rows, ReadMaxRows)
    assert batch_caps(rows, both.max_bytes_per_batch) == (50, 4096)
    assert batch_caps(ReadAllAvailable(), 4096) == (None, None)


def test_each_query_gets_its_own_default_consumer_name():
    """A consumer holds one subscription per shard: two queries must not share one."""
    efo = {"streamName": "s", "consumerType": "efo"}
    first = KinesisSourceOptions.parse({**efo, "metadataPath": "/meta/a"})
    second = KinesisSourceOptions.parse({**efo, "metadataPath": "/meta/b"})
    named = KinesisSourceOptions.parse({**efo, "consumerName": "mine"})
    assert first.consumer_name != second.consumer_name
    assert first.consumer_name.startswith("kinesis-lake-") and first.consumer_name_defaulted
    assert (named.consumer_name, named.consumer_name_defaulted) == ("mine", False)


@pytest.mark.parametrize(
    ("text", "expected_ms"),
    [("1700000000123", 1_700_000_000_123), ("2023-11-14T22:13:20.123Z", 1_700_000_000_123)],
)
def test_at_timestamp_takes_iso_8601_or_epoch_milliseconds(text, expected_ms):
    parsed = KinesisSourceOptions.parse(
        {"streamName": "s", "startingPosition": "AT_TIMESTAMP", "startingTimestamp": text}
    )
    assert parsed.starting_position == StartPosition.at_timestamp(expected_ms)
    assert parsed.initial_start(now_ms=5) == (parsed.starting_position,) * 2


def test_latest_is_pinned_when_the_initial_offset_is_made_and_new_shards_read_from_the_start():
    parsed = KinesisSourceOptions.parse({"streamName": "s", "startingPosition": "latest"})
    assert parsed.initial_start(now_ms=1234) == (
        StartPosition.at_timestamp(1234),
        StartPosition.trim_horizon(),
    )
