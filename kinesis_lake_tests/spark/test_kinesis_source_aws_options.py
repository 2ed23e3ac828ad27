"""The ``kinesis`` source's AWS options: a role to assume (``roleArn``, against moto's
STS) and where its progress records go.

A ``FaultProxy`` in front of moto's Kinesis records which access key signed each call,
as IAM would see it: every call of the driver and of the executors must carry the
role's temporary key, none the caller's own. moto's STS says whose each key is
(GetCallerIdentity answers for the key that signs it; moto checks no signature), so the
test learns the keys' owners without asking our code.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import boto3
import pytest
from pyspark.errors import AnalysisException

from kinesis_lake_tests.kinesis.fault_proxy import FaultProxy
from kinesis_lake_tests.spark.source_helpers import (
    keyed_events,
    new_stream,
    payloads,
    put,
    run_source,
    source_options,
)

ROLE_ARN = "arn:aws:iam::123456789012:role/kinesis-lake-reader"


@pytest.fixture
def proxy(moto_endpoint) -> Iterator[FaultProxy]:
    fault_proxy = FaultProxy(moto_endpoint.url).start()
    yield fault_proxy
    fault_proxy.stop()


def _identity(sts_url: str, access_key: str) -> str:
    """Whose ``access_key`` is, by moto's STS (it looks keys up, it checks no signature)."""
    sts = boto3.client(
        "sts",
        endpoint_url=sts_url,
        region_name="us-east-1",
        aws_access_key_id=access_key,
        aws_secret_access_key="unchecked",
    )
    return sts.get_caller_identity()["Arn"]


def test_every_kinesis_call_of_driver_and_executors_is_signed_as_the_assumed_role(
    spark, moto_endpoint, proxy, tmp_path
):
    stream = new_stream(moto_endpoint.url, shards=2)
    events = keyed_events("r", keys=4, per_key=3)
    put(moto_endpoint.url, stream, events)
    session_name = f"kinesis-lake-test-{uuid.uuid4().hex[:8]}"

    rows = run_source(
        spark,
        source_options(
            proxy.url,
            stream,
            tmp_path / "meta",
            roleArn=ROLE_ARN,
            roleSessionName=session_name,
            stsEndpointUrl=moto_endpoint.url,
        ),
        tmp_path / "checkpoint",
    )

    assert sorted(payloads(rows)) == sorted(data.decode() for _, data in events)
    actions = {action for (action, _) in proxy.signed_by}
    assert {"GetShardIterator", "GetRecords"} <= actions, actions
    signers = {key: _identity(moto_endpoint.url, key) for (_, key) in proxy.signed_by}
    role = f"arn:aws:sts::123456789012:assumed-role/kinesis-lake-reader/{session_name}"
    assert set(signers.values()) == {role}, signers


def test_an_unreachable_sts_endpoint_fails_naming_the_role_options(spark, moto_endpoint, tmp_path):
    stream = new_stream(moto_endpoint.url, shards=1)
    options = source_options(
        moto_endpoint.url,
        stream,
        tmp_path / "meta",
        roleArn=ROLE_ARN,
        stsEndpointUrl="http://127.0.0.1:9",
    )

    with pytest.raises(AnalysisException) as failure:  # when the query is defined
        run_source(spark, options, tmp_path / "checkpoint")

    message = str(failure.value)
    assert f"roleArn={ROLE_ARN}: could not assume the role" in message
    assert "through stsEndpointUrl=http://127.0.0.1:9" in message


def test_role_options_without_a_role_are_refused(spark, moto_endpoint, tmp_path):
    options = source_options(moto_endpoint.url, "any", tmp_path / "meta", roleSessionName="orphan")

    with pytest.raises(Exception, match="roleSessionName needs roleArn"):
        spark.readStream.format("kinesis").options(**options).load()


def test_a_defaulted_metadata_path_is_named_when_the_query_starts(moto_endpoint, caplog):
    """Spark tells a Python source nothing of the query's checkpoint, so the progress
    records cannot default beside it: the source says where they went instead."""
    from kinesis_lake.spark.kinesis.source import KinesisDataSource

    stream = new_stream(moto_endpoint.url, shards=1)
    source = KinesisDataSource({"streamName": stream, "endpointUrl": moto_endpoint.url})

    with caplog.at_level("WARNING", logger="kinesis_lake.spark.kinesis.source"):
        source.streamReader(None)  # type: ignore[arg-type]

    (warning,) = caplog.messages
    assert f"progress records of stream {stream} go to" in warning
    assert source.parsed.metadata_path in warning


def test_no_region_names_the_region_option(moto_endpoint, monkeypatch):
    from kinesis_lake.spark.kinesis.options import KinesisOptionError
    from kinesis_lake.spark.kinesis.source import KinesisDataSource

    monkeypatch.delenv("AWS_REGION")
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    with pytest.raises(KinesisOptionError, match=r"set \.option\('regionName'"):
        KinesisDataSource({"streamName": "any", "endpointUrl": moto_endpoint.url})
