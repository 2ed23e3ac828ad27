"""The Spark resource (dagster-pyspark's lazy resource, extended): uses a session it did not
start without stopping it, and stops one it started."""

from __future__ import annotations

import subprocess
import sys

import dagster as dg
import pytest

from kinesis_lake.defs.resources import PipelineSettingsResource, SparkResource
from kinesis_lake.pipeline.fresh_spark import register_fresh_reads
from kinesis_lake.pipeline.ingest_query import prepare_raw_table
from kinesis_lake.spark.iceberg.sink import SINK_NAME, IcebergDataSource
from kinesis_lake.spark.spark_version import register_data_source
from kinesis_lake_tests.pipeline_helpers import put


def test_a_session_started_elsewhere_is_used_and_left_running(spark):
    with dg.build_resources({"spark": SparkResource(master="local[2]")}) as resources:
        assert resources.spark.session.sparkContext is spark.sparkContext
    # Teardown ran; the shared session must still work.
    assert spark.range(3).count() == 3


def test_an_asset_reads_a_table_fresh_with_the_run_s_own_settings(spark, lake, instance):
    """A user's own asset reads fresh as the README says: the lake's reader registered on
    the run's session with the run's ``settings`` resource (not the environment's: a run
    whose settings were changed at launch must read its own lake). The records are still in
    the stream (no ingestion ran): they are read, decoded and counted."""
    prepare_raw_table(lake.settings)
    put(lake.settings, *({"event_id": f"e{i}", "event_type": "click"} for i in range(3)))

    @dg.asset
    def fresh_raw_count(
        spark: SparkResource, settings: PipelineSettingsResource
    ) -> dg.MaterializeResult:
        session = register_fresh_reads(spark.session, settings.settings())
        frame = session.read.format(SINK_NAME).option("fresh", "true").load("raw_events")
        return dg.MaterializeResult(metadata={"rows": frame.count()})

    try:
        result = dg.materialize([fresh_raw_count], resources=lake.resources, instance=instance)
    finally:
        register_data_source(spark, IcebergDataSource)  # the suite's session, as it was
    materialization = result.asset_materializations_for_node("fresh_raw_count")[0]
    assert materialization.metadata["rows"].value == 3


STARTS_AND_TEARS_DOWN = """
import dagster as dg
from pyspark import SparkContext
from kinesis_lake.defs.resources import SparkResource
from dagster_pyspark import LazyPySparkResource
assert issubclass(SparkResource, LazyPySparkResource)
with dg.build_resources({"spark": SparkResource(master="local[1]", log_dir="logs")}) as r:
    assert r.spark.session is r.spark.spark_session
    print("rows", r.spark.session.range(4).count())
print("after teardown", SparkContext._active_spark_context)
"""


def test_a_session_it_started_is_stopped_at_teardown(tmp_path):
    """In its own process: the suite's shared session must not be the one started."""
    result = subprocess.run(
        [sys.executable, "-c", STARTS_AND_TEARS_DOWN],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "rows 4" in result.stdout
    assert "after teardown None" in result.stdout
    assert (tmp_path / "logs" / "spark.log").exists()


def test_the_kinesis_resource_signs_as_the_role_of_kinesis_role_arn(moto_endpoint, monkeypatch):
    """The backlog sensor and the freshness check read the stream as the Spark source
    does: with KINESIS_ROLE_ARN, as that role (its temporary key signs the calls)."""
    from kinesis_lake.defs.resources import KinesisResource
    from kinesis_lake_tests.kinesis.fault_proxy import FaultProxy

    proxy = FaultProxy(moto_endpoint.url).start()
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL_STS", moto_endpoint.url)  # boto3's own variable
        resource = KinesisResource(
            stream_name="any",
            endpoint_url=proxy.url,
            region_name="us-east-1",
            role_arn="arn:aws:iam::123456789012:role/kinesis-lake-sensor",
        )
        resource.get_client().list_streams()
    finally:
        proxy.stop()

    ((action, key),) = proxy.signed_by
    assert action == "ListStreams"
    assert key.startswith("ASIA"), f"signed by {key!r}, not a temporary role key"


ROLE = "arn:aws:iam::123456789012:role/kinesis-lake-sensor"


def test_keys_set_on_the_kinesis_resource_assume_the_role_and_the_client_is_reused(
    moto_endpoint, monkeypatch
):
    """Keys given to the resource are who assumes KINESIS_ROLE_ARN: they replaced the role
    (every call was signed with them). And a sensor builds the resource every tick: the
    role is assumed once per configuration, not once per tick."""
    from kinesis_lake.defs.resources import KinesisResource
    from kinesis_lake_tests.kinesis.fault_proxy import FaultProxy

    kinesis = FaultProxy(moto_endpoint.url).start()
    sts = FaultProxy(moto_endpoint.url).start()
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL_STS", sts.url)
        for _tick in range(2):
            KinesisResource(
                stream_name="any",
                endpoint_url=kinesis.url,
                region_name="us-east-1",
                role_arn=ROLE,
                aws_access_key_id="AKIARESOURCESOWNKEY1",
                aws_secret_access_key="its-secret",
            ).get_client().list_streams()
    finally:
        kinesis.stop()
        sts.stop()

    (((action, key), calls),) = kinesis.signed_by.items()
    assert action == "ListStreams" and calls == 2
    assert key.startswith("ASIA"), f"signed by {key!r}, not a temporary role key"
    assert {key for _, key in sts.signed_by} == {"AKIARESOURCESOWNKEY1"}
    assert sum(sts.signed_by.values()) == 1


def test_a_role_with_no_credentials_to_assume_it_says_which_variables(moto_endpoint, monkeypatch):
    """With no credentials anywhere, assuming the role failed with an AttributeError."""
    from kinesis_lake.defs.resources import KinesisResource
    from kinesis_lake.kinesis.client import AssumeRoleError

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", moto_endpoint.url)
    resource = KinesisResource(
        stream_name="any", endpoint_url=moto_endpoint.url, region_name="us-east-1", role_arn=ROLE
    )

    with pytest.raises(AssumeRoleError) as failure:
        resource.get_client()

    message = str(failure.value)
    assert "\n" not in message
    assert message.startswith(f"KINESIS_ROLE_ARN={ROLE}: ")
    assert "AWS_ACCESS_KEY_ID" in message and "AWS_PROFILE" in message
