"""dagster-aws's Pipes clients for EMR Serverless and Glue, failing a job run that did not
succeed in one line that names the run, its cause and what to do.

dagster-aws 0.29 fails both, but says too little for the operator who opens the failed
Dagster step: EMR Serverless only "EMR Serverless job failed" (the state details go to the
log), Glue the status and Glue's error message on lines of their own. Only the wait is
wrapped; starting the run, the Pipes session and the log readers stay the library's.
(EMR on EC2: :mod:`.emr_client`.)
"""

from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from dagster_aws.pipes import PipesEMRServerlessClient, PipesGlueClient

from kinesis_lake.errors import KinesisLakeError

WHAT_TO_DO = "Fix the cause and materialize again: the next run goes on after the last commit."


class JobRunFailedError(KinesisLakeError):
    """A job run launched through Pipes ended without succeeding."""


class PipesEMRServerlessJobClient(PipesEMRServerlessClient):
    """``PipesEMRServerlessClient`` raising :class:`JobRunFailedError` for a failed run."""

    def _wait_for_completion(self, context: Any, start_response: Any) -> Any:
        try:
            return super()._wait_for_completion(context, start_response)
        except RuntimeError as failed:  # the library's bare "job failed"
            application, run_id = start_response["applicationId"], start_response["jobRunId"]
            try:
                run = self.client.get_job_run(applicationId=application, jobRunId=run_id)
            except (BotoCoreError, ClientError) as unread:  # throttled, say: keep the line
                state, details, name = "FAILED or CANCELLED", f"its details unread ({unread})", ""
            else:
                job_run = run["jobRun"]
                state, details = job_run["state"], _one_line(job_run.get("stateDetails"))
                name = job_run.get("name", "")
            raise JobRunFailedError(
                f"EMR Serverless job run {run_id} ('{name}') of application {application} "
                f"ended {state}: {details}. {WHAT_TO_DO}"
            ) from failed


class PipesGlueJobClient(PipesGlueClient):
    """``PipesGlueClient`` raising :class:`JobRunFailedError` for a run that did not succeed."""

    def _wait_for_job_run_completion(self, job_name: str, run_id: str) -> Any:
        response = super()._wait_for_job_run_completion(job_name, run_id)
        run = response["JobRun"]
        if run["JobRunState"] != "SUCCEEDED":
            raise JobRunFailedError(
                f"Glue job {job_name} run {run_id} ended {run['JobRunState']}: "
                f"{_one_line(run.get('ErrorMessage'))} (its logs: the job's "
                f"/aws-glue/jobs/error log group, stream {run_id}). {WHAT_TO_DO}"
            )
        return response


def _one_line(text: str | None) -> str:
    """The first line of an AWS message (a Glue error may carry a stack trace)."""
    if not text:
        return "no cause given"
    return text.strip().splitlines()[0]
