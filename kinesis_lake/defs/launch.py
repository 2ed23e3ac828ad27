"""Where the ingestion and derive assets run: in the Dagster step, or on AWS through Pipes.

``KINESIS_LAKE_LAUNCHER`` chooses: ``in_process`` (the default: the step starts Spark
itself), ``emr_serverless`` (a job run on an EMR Serverless application), ``emr`` (a
transient EMR on EC2 cluster that runs one ``spark-submit`` step and terminates) or
``glue`` (a run of a Glue job). The remote launchers run ``make package``'s entry point
(``kinesis_lake.submit``) from ``KINESIS_LAKE_PACKAGE_URI`` with the packed virtualenv,
through dagster-aws's Pipes clients, and the job reports what it changed back as the
asset's materialization metadata (the keys of the in-process assets), so the UI, the
checks and the sensors read the same keys in both modes.

Pipes messages travel through S3 (``KINESIS_LAKE_PIPES_BUCKET``) for all three: one bucket
to grant, and the same writer on the remote side. The context goes in the driver's
environment (EMR Serverless, EMR) or, for Glue, whose jobs have none to set, as an S3
object in the same bucket. The lake's settings go as the job's ``--kinesis-lake-env``
argument: the ones set for Dagster, less the local data folder, so the job reads the same
stream and tables. See docs/operations.md for each platform's one-time set-up.
"""

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import boto3
import dagster as dg
from pydantic import Field

from kinesis_lake.config import SETTINGS, SettingsError
from kinesis_lake.defs.resources import PipelineSettingsResource
from kinesis_lake.defs.streams import StreamKeys

LAUNCHERS = ("in_process", "emr_serverless", "emr", "glue")
ENV_ARCHIVE = "kinesis_lake_env.tar.gz"
ENTRY_POINT = "kinesis_lake_submit.py"
ENVIRONMENT_PYTHON = "./environment/bin/python"
NOT_FORWARDED = {"data_dir", "event_schema_path"}
"""Settings that name this machine's files: the job keeps its own data folder, and gets the
declaration file as a file shipped beside the package."""

VARIABLES = {
    "launcher": "KINESIS_LAKE_LAUNCHER",
    "package_uri": "KINESIS_LAKE_PACKAGE_URI",
    "pipes_bucket": "KINESIS_LAKE_PIPES_BUCKET",
    "region": "AWS_REGION",
    "emr_serverless_application_id": "KINESIS_LAKE_EMR_SERVERLESS_APPLICATION_ID",
    "job_role_arn": "KINESIS_LAKE_JOB_ROLE_ARN",
    "emr_release_label": "KINESIS_LAKE_EMR_RELEASE_LABEL",
    "emr_instance_type": "KINESIS_LAKE_EMR_INSTANCE_TYPE",
    "emr_instance_count": "KINESIS_LAKE_EMR_INSTANCE_COUNT",
    "emr_service_role": "KINESIS_LAKE_EMR_SERVICE_ROLE",
    "emr_instance_profile": "KINESIS_LAKE_EMR_INSTANCE_PROFILE",
    "emr_log_uri": "KINESIS_LAKE_EMR_LOG_URI",
    "emr_poll_seconds": "KINESIS_LAKE_EMR_POLL_SECONDS",
    "glue_job_name": "KINESIS_LAKE_GLUE_JOB_NAME",
}

REQUIRED = {
    "emr_serverless": {
        "package_uri": "the s3:// folder you uploaded build/package/ to (make package)",
        "pipes_bucket": "a bucket the job role may write and Dagster may read",
        "emr_serverless_application_id": "the application's id (aws emr-serverless "
        "list-applications)",
        "job_role_arn": "the job runtime role's ARN (docs/operations.md lists its policy)",
    },
    "emr": {
        "package_uri": "the s3:// folder you uploaded build/package/ to (make package)",
        "pipes_bucket": "a bucket the cluster's instance profile may write and Dagster read",
    },
    "glue": {
        "package_uri": "the s3:// folder you uploaded build/package/ to (make package)",
        "pipes_bucket": "a bucket the job's role may read and write, and Dagster too",
        "glue_job_name": "the Glue 6.0 job created as docs/operations.md shows",
    },
}


class LaunchResource(dg.ConfigurableResource):
    """Where the raw and derived assets run (``KINESIS_LAKE_LAUNCHER``) and what a remote
    launch needs; each field defaults from the variable its description names."""

    launcher: str = Field(
        default="in_process",
        description="KINESIS_LAKE_LAUNCHER: in_process, emr_serverless, emr or glue.",
    )
    package_uri: str | None = Field(
        default=None,
        description="KINESIS_LAKE_PACKAGE_URI: s3:// folder holding make package's "
        f"{ENTRY_POINT}, {ENV_ARCHIVE}, dist/ and the declaration file.",
    )
    pipes_bucket: str | None = Field(
        default=None,
        description="KINESIS_LAKE_PIPES_BUCKET: S3 bucket for the Pipes messages (and Glue's "
        "context).",
    )
    region: str | None = Field(default=None, description="AWS_REGION of the launch calls.")
    emr_serverless_application_id: str | None = Field(
        default=None, description="KINESIS_LAKE_EMR_SERVERLESS_APPLICATION_ID."
    )
    job_role_arn: str | None = Field(
        default=None,
        description="KINESIS_LAKE_JOB_ROLE_ARN: the EMR Serverless job runtime role.",
    )
    emr_release_label: str = Field(
        default="emr-spark-8.0.0",
        description="KINESIS_LAKE_EMR_RELEASE_LABEL: Spark 4.0.2 (docs/operations.md).",
    )
    emr_instance_type: str = Field(
        default="m6i.xlarge", description="KINESIS_LAKE_EMR_INSTANCE_TYPE."
    )
    emr_instance_count: int = Field(
        default=3, description="KINESIS_LAKE_EMR_INSTANCE_COUNT: primary plus core nodes."
    )
    emr_service_role: str = Field(
        default="EMR_DefaultRole", description="KINESIS_LAKE_EMR_SERVICE_ROLE."
    )
    emr_instance_profile: str = Field(
        default="EMR_EC2_DefaultRole",
        description="KINESIS_LAKE_EMR_INSTANCE_PROFILE: the nodes' role (reads the stream, "
        "writes the lake and the Pipes bucket).",
    )
    emr_log_uri: str | None = Field(
        default=None, description="KINESIS_LAKE_EMR_LOG_URI: where EMR keeps the step's logs."
    )
    emr_poll_seconds: int = Field(
        default=30,
        description="KINESIS_LAKE_EMR_POLL_SECONDS: how often to ask whether the cluster ended.",
    )
    glue_job_name: str | None = Field(default=None, description="KINESIS_LAKE_GLUE_JOB_NAME.")
    spark_conf: dict[str, str] = Field(
        default_factory=dict, description="Extra Spark settings for the remote job."
    )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "LaunchResource":
        """Fields from their variables (as ``dg.EnvVar``, so the UI shows the source);
        a bad combination fails here, when Dagster loads the definitions."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for field, variable in VARIABLES.items():
            if env.get(variable):
                kind = cls.model_fields[field].annotation
                values[field] = dg.EnvVar.int(variable) if kind is int else dg.EnvVar(variable)
        resource = cls(**values)
        resolved = cls(**{f: _parsed(cls, f, env[VARIABLES[f]]) for f in values})
        resolved.check()
        return resource

    def check(self) -> None:
        """Fail in one line naming the variable and what to set it to."""
        if self.launcher not in LAUNCHERS:
            raise SettingsError(
                f"KINESIS_LAKE_LAUNCHER={self.launcher!r}: use one of {', '.join(LAUNCHERS)}"
            )
        for field, fix in REQUIRED.get(self.launcher, {}).items():
            if not getattr(self, field):
                raise SettingsError(
                    f"KINESIS_LAKE_LAUNCHER={self.launcher} needs {VARIABLES[field]}: set it "
                    f"to {fix}"
                )
        if self.emr_poll_seconds < 1:
            raise SettingsError(
                f"KINESIS_LAKE_EMR_POLL_SECONDS={self.emr_poll_seconds}: set it to a whole "
                "number of seconds >= 1 (default 30)"
            )
        if self.package_uri and not self.package_uri.startswith("s3://"):
            raise SettingsError(
                f"KINESIS_LAKE_PACKAGE_URI={self.package_uri}: use the s3:// folder that "
                "holds make package's outputs"
            )

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        self.check()  # config changed in the UI is checked before anything is launched

    @property
    def remote(self) -> bool:
        return self.launcher != "in_process"

    def run(
        self,
        context: dg.AssetExecutionContext,
        command: list[str],
        settings: PipelineSettingsResource,
    ) -> dg.PipesClientCompletedInvocation:
        """Launch ``command`` (``ingest --stream S`` or ``derive``) and wait for it; the
        invocation holds what the job reported. The settings set on ``settings`` are
        forwarded to the job."""
        package = self.package_uri.rstrip("/") if self.package_uri else ""
        schema = settings.settings().event_schema_path.name
        declaration = f"{package}/{schema}"
        configured = {spec.attribute: getattr(settings, spec.attribute) for spec in SETTINGS}
        arguments = [
            *command,
            "--kinesis-lake-env",
            json.dumps(forwarded_settings(configured, schema)),
        ]
        s3 = self._client("s3")
        messages = _s3_message_reader(self.pipes_bucket or "", s3)
        if self.launcher == "emr_serverless":
            return self._emr_serverless(context, package, declaration, arguments, messages)
        if self.launcher == "emr":
            return self._emr(context, package, declaration, arguments, messages)
        return self._glue(context, package, declaration, arguments, messages, s3)

    def _client(self, service: str) -> Any:
        return boto3.client(service, region_name=self.region)

    def _python_conf(self) -> dict[str, str]:
        return {"spark.executorEnv.PYSPARK_PYTHON": ENVIRONMENT_PYTHON, **self.spark_conf}

    def _emr_serverless(
        self, context, package: str, declaration: str, arguments: list[str], messages
    ) -> dg.PipesClientCompletedInvocation:
        from kinesis_lake.defs.job_run_clients import PipesEMRServerlessJobClient

        conf = {
            "spark.archives": f"{package}/{ENV_ARCHIVE}#environment",
            "spark.files": declaration,
            "spark.emr-serverless.driverEnv.PYSPARK_DRIVER_PYTHON": ENVIRONMENT_PYTHON,
            "spark.emr-serverless.driverEnv.PYSPARK_PYTHON": ENVIRONMENT_PYTHON,
            **self._python_conf(),
        }
        client = PipesEMRServerlessJobClient(
            client=self._client("emr-serverless"), message_reader=messages
        )
        return client.run(
            context=context,
            start_job_run_params={
                "applicationId": self.emr_serverless_application_id or "",
                "executionRoleArn": self.job_role_arn or "",
                "name": f"kinesis-lake {' '.join(arguments[:3])}",
                "jobDriver": {
                    "sparkSubmit": {
                        "entryPoint": f"{package}/{ENTRY_POINT}",
                        "entryPointArguments": arguments,
                        "sparkSubmitParameters": " ".join(
                            f"--conf {key}={value}" for key, value in conf.items()
                        ),
                    }
                },
            },
        )

    def _emr(
        self, context, package: str, declaration: str, arguments: list[str], messages
    ) -> dg.PipesClientCompletedInvocation:
        from kinesis_lake.defs.emr_client import PipesEMRStepClient

        conf = {"spark.yarn.appMasterEnv.PYSPARK_PYTHON": ENVIRONMENT_PYTHON, **self._python_conf()}
        submit = [
            "spark-submit",
            "--deploy-mode",
            "cluster",
            "--archives",
            f"{package}/{ENV_ARCHIVE}#environment",
            "--files",
            declaration,
            *(part for key, value in conf.items() for part in ("--conf", f"{key}={value}")),
            f"{package}/{ENTRY_POINT}",
            *arguments,
        ]
        instances: dict[str, Any] = {
            "InstanceGroups": [
                {
                    "InstanceRole": "MASTER",
                    "InstanceType": self.emr_instance_type,
                    "InstanceCount": 1,
                },
                {
                    "InstanceRole": "CORE",
                    "InstanceType": self.emr_instance_type,
                    "InstanceCount": max(1, self.emr_instance_count - 1),
                },
            ],
            "KeepJobFlowAliveWhenNoSteps": False,
        }
        params: dict[str, Any] = {
            "Name": f"kinesis-lake {' '.join(arguments[:3])}",
            "ReleaseLabel": self.emr_release_label,
            "Applications": [{"Name": "Spark"}],
            "Instances": instances,
            "Steps": [
                {
                    "Name": " ".join(arguments[:3]),
                    "ActionOnFailure": "TERMINATE_CLUSTER",
                    "HadoopJarStep": {"Jar": "command-runner.jar", "Args": submit},
                }
            ],
            "ServiceRole": self.emr_service_role,
            "JobFlowRole": self.emr_instance_profile,
        }
        if self.emr_log_uri:
            params["LogUri"] = self.emr_log_uri
        client = PipesEMRStepClient(
            client=self._client("emr"),
            message_reader=messages,
            poll_seconds=self.emr_poll_seconds,
        )
        return client.run(context=context, run_job_flow_params=params)

    def _glue(
        self, context, package: str, declaration: str, arguments: list[str], messages, s3
    ) -> dg.PipesClientCompletedInvocation:
        import shlex

        from dagster_aws.pipes import PipesS3ContextInjector

        from kinesis_lake.defs.job_run_clients import PipesGlueJobClient

        command, env = arguments[:-2], arguments[-1]
        client = PipesGlueJobClient(
            client=self._client("glue"),
            context_injector=PipesS3ContextInjector(bucket=self.pipes_bucket or "", client=s3),
            message_reader=messages,
        )
        return client.run(
            context=context,
            start_job_run_params={
                "JobName": self.glue_job_name or "",
                "Arguments": {
                    "--kinesis-lake-args": shlex.join(command),
                    "--kinesis-lake-env": env,
                    "--extra-files": declaration,
                },
            },
        )


def launched(
    asset: dg.AssetsDefinition,
    keys: StreamKeys | None = None,
    env: Mapping[str, str] | None = None,
) -> dg.AssetsDefinition:
    """``asset`` itself while ``KINESIS_LAKE_LAUNCHER`` is ``in_process``; otherwise its twin
    (same keys, specs, pool and automation) whose step launches the job remotely and yields
    what the job reported: ``ingest --stream S`` for a stream's raw table (``keys``),
    ``derive`` for the downstream tables. Decided when Dagster loads the definitions."""
    env = os.environ if env is None else env
    if env.get(VARIABLES["launcher"], "in_process") == "in_process":
        return asset

    order: dict[dg.AssetKey | None, int] = {s.key: i for i, s in enumerate(asset.specs)}

    @dg.multi_asset(
        name=asset.op.name,
        specs=list(asset.specs),
        pool=asset.op.pool,
        description=asset.op.description,
    )
    def remote(
        context: dg.AssetExecutionContext,
        settings: PipelineSettingsResource,
        launch: LaunchResource,
    ):
        if keys is None:
            command = ["derive"]
        else:
            command = ["ingest", "--stream", keys.settings(settings.settings()).stream_name]
        results = launch.run(context, command, settings).get_results()
        # A multi-asset yields in dependency order, as its specs list them.
        yield from sorted(results, key=lambda result: order.get(result.asset_key, len(order)))

    return remote


def _parsed(cls: type["LaunchResource"], field: str, raw: str) -> Any:
    return int(raw) if cls.model_fields[field].annotation is int else raw


def _s3_message_reader(bucket: str, client: Any) -> Any:
    from dagster_aws.pipes import PipesS3MessageReader

    return PipesS3MessageReader(bucket=bucket, client=client, interval=2)


def forwarded_settings(configured: Mapping[str, Any], declaration_name: str) -> dict[str, str]:
    """The lake's settings that were set (the settings resource's fields away from their
    defaults), as variables, for a job on another machine; the declaration is the file of
    that name shipped beside the package."""
    env: dict[str, str] = {}
    for spec in SETTINGS:
        value = configured.get(spec.attribute)
        if spec.attribute in NOT_FORWARDED or value in (None, "") or value == spec.default:
            continue
        env[spec.variable] = str(value).lower() if isinstance(value, bool) else str(value)
    env["KINESIS_LAKE_EVENT_SCHEMA"] = Path(declaration_name).name
    return env
