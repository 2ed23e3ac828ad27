"""The ``kinesis`` source's AWS options: a role to assume (``roleArn``, against moto's
STS) and where its progress records go.

A ``FaultProxy`` in front of moto's Kinesis records which access key signed each call,
as IAM would see it: every call of the driver and of the executors must carry the
role's temporary key, none the caller's own. moto's ``/moto-api/data.json`` lists the
sessions its STS handed out, so the test knows the role's keys without asking our code.
"""

from __future__ import annotations

import json
import urllib.request
import uuid
from collections.abc import Iterator

import pytest
from pyspark.errors import AnalysisException

from kinesis_lake.kinesis.fault_proxy import FaultProxy
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


def _sessions_handed_out(sts_url: str, session_name: str) -> set[str]:
    with urllib.request.urlopen(f"{sts_url}/moto-api/data.json", timeout=30) as response:
        state = json.load(response)
    return {
        role["access_key_id"]
        for role in state.get("sts", {}).get("AssumedRole", [])
        if role["session_name"] == session_name and role["role_arn"] == ROLE_ARN
    }


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
    role_keys = _sessions_handed_out(moto_endpoint.url, session_name)
    assert role_keys, "the source never assumed the role"
    signers = {key for (_, key) in proxy.signed_by}
    actions = {action for (action, _) in proxy.signed_by}
    assert {"GetShardIterator", "GetRecords"} <= actions, actions
    assert signers <= role_keys, f"calls signed by keys other than the role's: {signers}"


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
    assert f"Could not assume roleArn={ROLE_ARN}" in message
    assert "stsEndpointUrl=http://127.0.0.1:9" in message


def test_role_options_without_a_role_are_refused(spark, moto_endpoint, tmp_path):
    options = source_options(moto_endpoint.url, "any", tmp_path / "meta", roleSessionName="orphan")

    with pytest.raises(Exception, match="roleSessionName needs roleArn"):
        spark.readStream.format("kinesis").options(**options).load()


def test_a_defaulted_metadata_path_is_named_when_the_query_starts(moto_endpoint, caplog):
    """Spark tells a Python source nothing of the query's checkpoint, so the progress
    records cannot default beside it: the source says where they went instead."""
    from kinesis_lake.spark.kinesis_source import KinesisDataSource

    stream = new_stream(moto_endpoint.url, shards=1)
    source = KinesisDataSource({"streamName": stream, "endpointUrl": moto_endpoint.url})

    with caplog.at_level("WARNING", logger="kinesis_lake.spark.kinesis_source"):
        source.streamReader(None)  # type: ignore[arg-type]

    (warning,) = caplog.messages
    assert f"progress records of stream {stream} go to" in warning
    assert source.parsed.metadata_path in warning


def test_no_region_names_the_region_option(moto_endpoint, monkeypatch):
    from kinesis_lake.spark.kinesis_source import KinesisDataSource
    from kinesis_lake.spark.kinesis_source_options import KinesisOptionError

    monkeypatch.delenv("AWS_REGION")
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    with pytest.raises(KinesisOptionError, match=r"set \.option\('regionName'"):
        KinesisDataSource({"streamName": "any", "endpointUrl": moto_endpoint.url})
