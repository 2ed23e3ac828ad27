"""Launching the raw and derived assets on EMR Serverless, EMR on EC2 and Glue, on moto.

moto plays AWS (the shared moto server, which every test here reaches through
AWS_ENDPOINT_URL). It accepts the job and records it, but runs nothing; so a botocore hook
on the call that starts the job plays the cluster: it reads the job back from moto, takes
the Dagster Pipes parameters from where that platform gives them to the driver (the
driver's environment in the job's Spark settings, the cluster's configurations, the Glue
job's arguments), opens Pipes as the entry point does, and reports a materialization
through the S3 bucket. The asset's materialization must then carry that metadata.
"""

from __future__ import annotations

import inspect
import json
import shlex
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import dagster as dg
import pytest
from botocore.awsrequest import AWSResponse
from botocore.exceptions import ClientError
from dagster_pipes import PipesContext

from kinesis_lake.config import SettingsError
from kinesis_lake.defs.derived_assets import derived_tables_asset
from kinesis_lake.defs.emr_client import PipesEMRStepClient
from kinesis_lake.defs.launch import LaunchResource, launched
from kinesis_lake.defs.raw_assets import raw_asset
from kinesis_lake.defs.resources import PipelineSettingsResource
from kinesis_lake.defs.streams import DEFAULT_STREAM
from kinesis_lake.events.declaration_file import load_declaration
from kinesis_lake.submit import parse_invocation, pipes_session

PACKAGE = "s3://lake-package/kinesis-lake"
PIPES_BUCKET = "lake-pipes"
REPORTED = {"rows_added": 42, "dagster/row_count": 1042, "skipped_ranges": 0, "batches": 3}


@pytest.fixture
def aws(moto_endpoint, monkeypatch: pytest.MonkeyPatch, tmp_path) -> Iterator[dict[str, str]]:
    """moto for every AWS call, the package and Pipes buckets, and the lake's settings."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint.url)
    boto3.setup_default_session()  # a session of this test's own: the cluster hooks on it
    s3 = boto3.client("s3")
    for bucket in ("lake-package", PIPES_BUCKET):
        s3.create_bucket(Bucket=bucket)
    env = {
        "KINESIS_STREAM_NAME": "clicks",
        "KINESIS_LAKE_DATA_DIR": str(tmp_path / "data"),
        "KINESIS_MAX_RECORDS_PER_SHARD": "5000",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    yield env
    boto3.DEFAULT_SESSION = None


@pytest.fixture
def short_log_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    """A failed job sends no closing Pipes message, so Dagster's reader waits out its grace
    for late logs (10 s) before the step fails; moto's job has no logs to wait for."""
    import dagster._core.pipes.utils as pipes_utils

    monkeypatch.setattr(pipes_utils, "WAIT_FOR_LOGS_AFTER_EXECUTION_INTERVAL", 0)


def play_cluster(event: str, job: Callable[[dict], tuple[list[str], dict[str, str]]]) -> list:
    """Hook the call that starts a job: ``job(parsed response)`` returns the driver's
    arguments and environment; the hook then reports REPORTED through Pipes for each asset
    in the job's context. Returns the list of (arguments, environment) the cluster saw."""
    seen: list[tuple[list[str], dict[str, str]]] = []

    def run(parsed: dict, **_: Any) -> None:
        argv, environment = job(parsed)
        seen.append((argv, environment))
        from_arguments = parse_invocation(argv)[2]
        params = from_arguments or {
            k: v for k, v in environment.items() if k.startswith("DAGSTER_PIPES_")
        }
        with pipes_session(params) as pipes:
            for key in pipes.asset_keys:
                pipes.report_asset_materialization(asset_key=key, metadata=REPORTED)
        PipesContext._instance = None  # the job's process ends here: its context with it

    assert boto3.DEFAULT_SESSION is not None
    boto3.DEFAULT_SESSION.events.register(event, run)
    return seen


def declaration_name() -> str:
    from kinesis_lake.config import Settings

    return Settings.from_env().event_schema_path.name


def materialize(asset: dg.AssetsDefinition, launch: LaunchResource) -> dg.ExecuteInProcessResult:
    return dg.materialize(
        [asset],
        resources={"settings": PipelineSettingsResource.from_env(), "launch": launch},
    )


def emr_serverless_launch() -> tuple[str, dg.AssetsDefinition, LaunchResource]:
    """An EMR Serverless application on moto, and the raw asset launched there."""
    application = boto3.client("emr-serverless").create_application(
        name="lake",
        releaseLabel="emr-7.0.0",
        type="SPARK",  # moto knows no emr-spark-8.0.0
    )["applicationId"]
    launch = LaunchResource(
        launcher="emr_serverless",
        package_uri=PACKAGE,
        pipes_bucket=PIPES_BUCKET,
        emr_serverless_application_id=application,
        job_role_arn="arn:aws:iam::123456789012:role/lake-job",
    )
    asset = launched(
        raw_asset(DEFAULT_STREAM), DEFAULT_STREAM, env={"KINESIS_LAKE_LAUNCHER": "emr_serverless"}
    )
    return application, asset, launch


def glue_launch() -> tuple[dg.AssetsDefinition, LaunchResource]:
    """The Glue job on moto, and the raw asset launched as its runs."""
    boto3.client("glue").create_job(
        Name="kinesis-lake",
        Role="arn:aws:iam::123456789012:role/lake-glue",
        Command={"Name": "glueetl", "ScriptLocation": f"{PACKAGE}/kinesis_lake_submit.py"},
        GlueVersion="6.0",
    )
    launch = LaunchResource(
        launcher="glue",
        package_uri=PACKAGE,
        pipes_bucket=PIPES_BUCKET,
        glue_job_name="kinesis-lake",
    )
    asset = launched(
        raw_asset(DEFAULT_STREAM), DEFAULT_STREAM, env={"KINESIS_LAKE_LAUNCHER": "glue"}
    )
    return asset, launch


def failure_of(asset: dg.AssetsDefinition, launch: LaunchResource) -> str:
    """What the failed materialization of ``asset`` says."""
    with pytest.raises(Exception) as raised:
        materialize(asset, launch)
    return str(raised.value)


def emr_serverless_job(parsed: dict) -> tuple[list[str], dict[str, str]]:
    run = boto3.client("emr-serverless").get_job_run(
        applicationId=parsed["applicationId"], jobRunId=parsed["jobRunId"]
    )["jobRun"]
    submit = run["jobDriver"]["sparkSubmit"]
    conf = dict(
        part.split("=", 1) for part in shlex.split(submit["sparkSubmitParameters"]) if "=" in part
    )
    prefix = "spark.emr-serverless.driverEnv."
    environment = {k.removeprefix(prefix): v for k, v in conf.items() if k.startswith(prefix)}
    return list(submit["entryPointArguments"]), {**environment, "conf": json.dumps(conf)}


def answer_dashboards() -> None:
    """Answer GetDashboardForJobRun, an API moto lacks, with a made-up address."""

    def dashboard(**_: Any) -> tuple[AWSResponse, dict]:
        return AWSResponse("", 200, {}, None), {"url": "https://dashboard.example/run"}

    assert boto3.DEFAULT_SESSION is not None
    boto3.DEFAULT_SESSION.events.register(
        "before-call.emr-serverless.GetDashboardForJobRun", dashboard
    )


def test_the_raw_asset_runs_as_an_emr_serverless_job_and_reports_back(aws) -> None:
    application, asset, launch = emr_serverless_launch()
    seen = play_cluster("after-call.emr-serverless.StartJobRun", emr_serverless_job)

    result = materialize(asset, launch)

    ((argv, environment),) = seen
    command, forwarded, _ = parse_invocation(argv)
    assert command == ["ingest", "--stream", "clicks"]
    assert forwarded["KINESIS_STREAM_NAME"] == "clicks"
    assert forwarded["KINESIS_MAX_RECORDS_PER_SHARD"] == "5000"
    assert forwarded["KINESIS_LAKE_EVENT_SCHEMA"] == declaration_name()
    assert "KINESIS_LAKE_DATA_DIR" not in forwarded  # a path of the Dagster machine
    conf = json.loads(environment["conf"])
    assert conf["spark.archives"] == f"{PACKAGE}/kinesis_lake_env.tar.gz#environment"
    assert conf["spark.files"] == f"{PACKAGE}/{declaration_name()}"
    assert environment["PYSPARK_PYTHON"] == "./environment/bin/python"
    assert conf["spark.executorEnv.PYSPARK_PYTHON"] == "./environment/bin/python"
    run = boto3.client("emr-serverless").list_job_runs(applicationId=application)["jobRuns"]
    assert len(run) == 1
    (materialization,) = result.asset_materializations_for_node(asset.op.name)
    assert {k: materialization.metadata[k].value for k in REPORTED} == REPORTED


def test_the_derived_tables_run_as_one_emr_step_on_a_transient_cluster(aws) -> None:
    emr = boto3.client("emr")

    def step(parsed: dict) -> tuple[list[str], dict[str, str]]:
        cluster = emr.describe_cluster(ClusterId=parsed["JobFlowId"])["Cluster"]
        (only,) = emr.list_steps(ClusterId=parsed["JobFlowId"])["Steps"]
        args = only["Config"]["Args"]
        entry = args.index(f"{PACKAGE}/kinesis_lake_submit.py")
        defaults = next(
            c["Properties"]
            for c in cluster["Configurations"]
            if c["Classification"] == "spark-defaults"
        )
        prefix = "spark.yarn.appMasterEnv."
        environment = {
            k.removeprefix(prefix): v for k, v in defaults.items() if k.startswith(prefix)
        }
        return args[entry + 1 :], {**environment, "submit": json.dumps(args[:entry])}

    seen = play_cluster("after-call.emr.RunJobFlow", step)
    described: list[str] = []

    def step_done(parsed: dict, **_: Any) -> None:
        """The cluster ends once Dagster saw it running (its second DescribeCluster)."""
        described.append(parsed["Cluster"]["Status"]["State"])
        if len(described) == 2:
            emr.terminate_job_flows(JobFlowIds=[parsed["Cluster"]["Id"]])

    assert boto3.DEFAULT_SESSION is not None
    boto3.DEFAULT_SESSION.events.register("after-call.emr.DescribeCluster", step_done)
    launch = LaunchResource(
        launcher="emr", package_uri=PACKAGE, pipes_bucket=PIPES_BUCKET, emr_poll_seconds=1
    )
    from kinesis_lake.config import Settings

    declaration = load_declaration(Settings.from_env().event_schema_path)
    asset = launched(
        derived_tables_asset(declaration, "kinesis_lake", [DEFAULT_STREAM]),
        env={"KINESIS_LAKE_LAUNCHER": "emr"},
    )

    result = materialize(asset, launch)

    ((argv, environment),) = seen
    assert parse_invocation(argv)[0] == ["derive"]
    submit = json.loads(environment["submit"])
    assert submit[:3] == ["spark-submit", "--deploy-mode", "cluster"]
    assert (
        submit[submit.index("--archives") + 1] == f"{PACKAGE}/kinesis_lake_env.tar.gz#environment"
    )
    assert "spark.yarn.appMasterEnv.PYSPARK_PYTHON=./environment/bin/python" in submit
    materialized = {
        m.asset_key.to_user_string(): m
        for m in result.asset_materializations_for_node(asset.op.name)
    }
    assert set(materialized) == {key.to_user_string() for key in asset.keys}
    assert all(m.metadata["rows_added"].value == 42 for m in materialized.values())


def test_the_raw_asset_runs_as_a_glue_job_whose_context_is_in_s3(aws) -> None:
    asset, launch = glue_launch()
    glue = boto3.client("glue")

    def job_run(parsed: dict) -> tuple[list[str], dict[str, str]]:
        run = glue.get_job_run(JobName="kinesis-lake", RunId=parsed["JobRunId"])["JobRun"]
        argv = [part for pair in run["Arguments"].items() for part in pair]
        return ["--JOB_ID", "j_1", *argv], {"extra-files": run["Arguments"]["--extra-files"]}

    seen = play_cluster("after-call.glue.StartJobRun", job_run)

    result = materialize(asset, launch)

    ((argv, environment),) = seen
    assert parse_invocation(argv)[0] == ["ingest", "--stream", "clicks"]
    assert environment["extra-files"] == f"{PACKAGE}/{declaration_name()}"
    (materialization,) = result.asset_materializations_for_node(asset.op.name)
    assert materialization.metadata["dagster/row_count"].value == 1042


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"KINESIS_LAKE_LAUNCHER": "emr-serverless"}, "use one of in_process, emr_serverless"),
        (
            {"KINESIS_LAKE_LAUNCHER": "emr_serverless", "KINESIS_LAKE_PACKAGE_URI": PACKAGE},
            "needs KINESIS_LAKE_PIPES_BUCKET: set it to a bucket",
        ),
        (
            {
                "KINESIS_LAKE_LAUNCHER": "emr",
                "KINESIS_LAKE_PACKAGE_URI": PACKAGE,
                "KINESIS_LAKE_PIPES_BUCKET": PIPES_BUCKET,
                "KINESIS_LAKE_EMR_POLL_SECONDS": "0",
            },
            "KINESIS_LAKE_EMR_POLL_SECONDS=0: set it to a whole number of seconds >= 1",
        ),
        (
            {
                "KINESIS_LAKE_LAUNCHER": "glue",
                "KINESIS_LAKE_PACKAGE_URI": "/tmp/package",
                "KINESIS_LAKE_PIPES_BUCKET": PIPES_BUCKET,
                "KINESIS_LAKE_GLUE_JOB_NAME": "kinesis-lake",
            },
            "KINESIS_LAKE_PACKAGE_URI=/tmp/package: use the s3:// folder",
        ),
    ],
)
def test_a_launcher_set_up_wrong_fails_when_the_definitions_load(env, message) -> None:
    with pytest.raises(SettingsError, match=message):
        LaunchResource.from_env(env)


def test_in_process_keeps_the_asset_as_it_is() -> None:
    asset = raw_asset(DEFAULT_STREAM)
    assert launched(asset, DEFAULT_STREAM, env={}) is asset
    assert LaunchResource.from_env({}).launcher == "in_process"


def test_a_failed_emr_step_fails_the_asset_naming_the_cluster_the_cause_and_the_log(
    aws, short_log_grace
) -> None:
    """The step's driver fails before it reports anything, and ActionOnFailure ends the
    cluster TERMINATED_WITH_ERRORS. moto runs no step, so the hooks play that ending as
    EMR reports it. dagster-aws's client met it only through its waiter's 'terminal
    failure state' (its own state check compares a string with enum members and never
    fires); the operator must learn which cluster, why, and where the log is."""
    emr = boto3.client("emr")
    described: list[str] = []
    log = "s3://lake-logs/j-failed/steps/s-1/stderr.gz"

    def cluster_fails(parsed: dict, **_: Any) -> None:
        cluster = parsed["Cluster"]
        described.append(cluster["Status"]["State"])
        if len(described) == 2:
            emr.terminate_job_flows(JobFlowIds=[cluster["Id"]])
        if cluster["Status"]["State"] == "TERMINATED":
            cluster["Status"]["State"] = "TERMINATED_WITH_ERRORS"
            cluster["Status"]["StateChangeReason"] = {
                "Code": "STEP_FAILURE",
                "Message": "Shut down as step failed",
            }

    def step_fails(parsed: dict, **_: Any) -> None:
        for step in parsed["Steps"]:
            step["Status"]["State"] = "FAILED"
            step["Status"]["FailureDetails"] = {"Reason": "Unknown Error.", "LogFile": log}

    assert boto3.DEFAULT_SESSION is not None
    boto3.DEFAULT_SESSION.events.register("after-call.emr.DescribeCluster", cluster_fails)
    boto3.DEFAULT_SESSION.events.register("after-call.emr.ListSteps", step_fails)
    launch = LaunchResource(
        launcher="emr", package_uri=PACKAGE, pipes_bucket=PIPES_BUCKET, emr_poll_seconds=1
    )
    asset = launched(
        raw_asset(DEFAULT_STREAM), DEFAULT_STREAM, env={"KINESIS_LAKE_LAUNCHER": "emr"}
    )

    message = failure_of(asset, launch)
    assert "TERMINATED_WITH_ERRORS" in message and "Shut down as step failed" in message
    assert "ingest --stream clicks" in message and "FAILED" in message and log in message
    assert message.count("\n") == 0  # one line: what failed, why, where to look, what to do


def test_the_emr_wait_replaced_is_the_one_dagster_aws_still_calls() -> None:
    """PipesEMRStepClient replaces a private method of dagster-aws's client; an upgrade that
    renamed it would bring back the 30-minute waiter without a word."""
    from dagster_aws.pipes import PipesEMRClient

    assert "self._wait_for_completion(" in inspect.getsource(PipesEMRClient.run)
    assert PipesEMRStepClient._wait_for_completion is not PipesEMRClient._wait_for_completion


def test_a_failed_poll_during_a_long_step_is_asked_again_not_fatal(aws) -> None:
    """Hours of polling meet a throttle or a dropped connection: the asset must not fail
    (the cluster would go on writing, unattended) while the cluster can still be asked."""
    emr = boto3.client("emr")
    cluster_id = emr.run_job_flow(
        Name="long",
        ReleaseLabel="emr-7.0.0",
        Instances={"InstanceCount": 1, "KeepJobFlowAliveWhenNoSteps": False},
        JobFlowRole="EMR_EC2_DefaultRole",
        ServiceRole="EMR_DefaultRole",
    )["JobFlowId"]
    polls: list[int] = []

    def flaky(**_: Any) -> None:
        polls.append(1)
        if len(polls) in (1, 2):
            raise ConnectionResetError("the connection dropped mid-poll")
        if len(polls) == 3:
            emr.terminate_job_flows(JobFlowIds=[cluster_id])

    assert boto3.DEFAULT_SESSION is not None
    boto3.DEFAULT_SESSION.events.register("before-call.emr.DescribeCluster", flaky)
    client = PipesEMRStepClient(
        client=boto3.client("emr"), message_reader=dg.PipesTempFileMessageReader(), poll_seconds=0
    )
    context = dg.build_asset_context()

    described = client._wait_for_completion(context, {"JobFlowId": cluster_id})

    assert described["Cluster"]["Status"]["State"] == "TERMINATED"
    assert len(polls) == 3  # two polls failed; the third found the cluster ended


def test_a_failed_emr_serverless_job_run_fails_the_asset_in_one_line_saying_what_to_do(
    aws, short_log_grace
) -> None:
    """dagster-aws's client fails a FAILED job run with only 'EMR Serverless job failed';
    the operator must learn which run of which application failed, why, and what to do."""
    application, asset, launch = emr_serverless_launch()

    def run_fails(parsed: dict, **_: Any) -> None:
        parsed["jobRun"]["state"] = "FAILED"
        parsed["jobRun"]["stateDetails"] = "Job failed, please check complete logs in S3."

    assert boto3.DEFAULT_SESSION is not None
    boto3.DEFAULT_SESSION.events.register("after-call.emr-serverless.GetJobRun", run_fails)
    answer_dashboards()

    message = failure_of(asset, launch)
    assert application in message and "FAILED" in message and "ingest --stream clicks" in message
    assert "please check complete logs in S3" in message and "materialize again" in message
    assert message.count("\n") == 0


def test_a_failed_glue_job_run_fails_the_asset_in_one_line_saying_what_to_do(
    aws, short_log_grace
) -> None:
    """dagster-aws's client fails a FAILED Glue run with the status and Glue's message on
    lines of their own, and nothing on what to do next."""
    asset, launch = glue_launch()

    def run_fails(parsed: dict, **_: Any) -> None:
        parsed["JobRun"]["JobRunState"] = "FAILED"
        parsed["JobRun"]["ErrorMessage"] = "An error occurred while calling o97.start.\nTrace"

    assert boto3.DEFAULT_SESSION is not None
    boto3.DEFAULT_SESSION.events.register("after-call.glue.GetJobRun", run_fails)

    message = failure_of(asset, launch)
    assert "Glue job kinesis-lake run" in message and "FAILED" in message
    assert "An error occurred while calling o97.start." in message
    assert "materialize again" in message and message.count("\n") == 0


def test_a_failed_emr_serverless_run_whose_details_cannot_be_read_still_fails_in_one_line(
    aws, short_log_grace
) -> None:
    """Real EMR Serverless throttles GetJobRun: the call that reads a failed run's details
    must not turn the one line into a ThrottlingException trace that hides which run failed."""
    application, asset, launch = emr_serverless_launch()
    failed: list[int] = []

    def run_fails(parsed: dict, **_: Any) -> None:
        parsed["jobRun"]["state"] = "FAILED"
        failed.append(1)

    def throttled_once_failed(**_: Any) -> None:
        if failed:
            error = {"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}}
            raise ClientError(error, "GetJobRun")

    assert boto3.DEFAULT_SESSION is not None
    boto3.DEFAULT_SESSION.events.register("after-call.emr-serverless.GetJobRun", run_fails)
    boto3.DEFAULT_SESSION.events.register(
        "before-call.emr-serverless.GetJobRun", throttled_once_failed
    )
    answer_dashboards()

    message = failure_of(asset, launch)
    assert application in message and "FAILED" in message and "Rate exceeded" in message
    assert "materialize again" in message and message.count("\n") == 0
