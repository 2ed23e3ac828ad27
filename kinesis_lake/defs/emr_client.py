"""dagster-aws's Pipes client for EMR on EC2, waiting as long as the step runs and failing
in one line that names the cluster, the cause and the step's log.

dagster-aws 0.29's ``PipesEMRClient`` waits for the cluster with boto3's waiters at their
defaults: 60 polls 30 s apart, so a step longer than 30 minutes (a backlog's ingestion)
failed the asset while the cluster went on writing. A failed step (``ActionOnFailure``
ends the cluster ``TERMINATED_WITH_ERRORS``) surfaced only as the waiter's "terminal
failure state", and the client's own state check compares the state, a string, with enum
members, so it never fires. Only the wait is replaced; starting the cluster, the Pipes
session and the log readers stay the library's.
"""

import time
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from dagster_aws.pipes import PipesEMRClient

from kinesis_lake.errors import KinesisLakeError

ENDED = ("TERMINATED", "TERMINATED_WITH_ERRORS")
STEP_FAILED = ("FAILED", "CANCELLED", "INTERRUPTED")
FAILED_POLLS_TOLERATED = 10
"""Polls in a row that may fail (after boto3's own retries) before the wait gives up."""


class EMRStepFailedError(KinesisLakeError):
    """The transient cluster's step did not complete."""


class PipesEMRStepClient(PipesEMRClient):
    """``PipesEMRClient`` whose wait polls every ``poll_seconds`` until the cluster ends,
    however long the step runs, and raises :class:`EMRStepFailedError` if it failed."""

    def __init__(self, *, poll_seconds: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._poll_seconds = poll_seconds

    def _wait_for_completion(self, context: Any, response: Any) -> Any:
        cluster_id = response["JobFlowId"]
        failed_polls = 0
        while True:
            try:
                described = self._client.describe_cluster(ClusterId=cluster_id)
            except (BotoCoreError, ClientError, OSError) as exc:
                # Hours of polling meet a throttle or a dropped connection; failing the asset
                # then would leave the cluster writing unattended.
                failed_polls += 1
                if failed_polls > FAILED_POLLS_TOLERATED:
                    raise
                context.log.warning(f"[pipes] EMR cluster {cluster_id}: poll failed: {exc}")
                time.sleep(self._poll_seconds)
                continue
            failed_polls = 0
            state = described["Cluster"]["Status"]["State"]
            if state in ENDED:
                break
            time.sleep(self._poll_seconds)
        context.log.info(f"[pipes] EMR cluster {cluster_id} ended {state}")
        steps = self._client.list_steps(ClusterId=cluster_id)["Steps"]
        failed = [step for step in steps if step["Status"]["State"] in STEP_FAILED]
        if state == "TERMINATED_WITH_ERRORS" or failed:
            raise EMRStepFailedError(failure_line(described["Cluster"], failed))
        return described


def failure_line(cluster: dict, failed: list[dict]) -> str:
    """What failed, why, where its log is and what to do, in one line."""
    status = cluster["Status"]
    reason = status.get("StateChangeReason", {}).get("Message") or "no reason given"
    line = f"EMR cluster {cluster['Id']} ended {status['State']} ({reason})"
    for step in failed:
        details = step["Status"].get("FailureDetails", {})
        cause = details.get("Message") or details.get("Reason") or "no cause given"
        log = details.get("LogFile") or _step_logs(cluster, step["Id"])
        line += f"; step '{step['Name']}' {step['Status']['State']}: {cause}; its log: {log}"
    return (
        f"{line}. Fix the cause and materialize again: the next run goes on after the last commit."
    )


def _step_logs(cluster: dict, step_id: str) -> str:
    log_uri = cluster.get("LogUri")
    if not log_uri:
        return "not kept (set KINESIS_LAKE_EMR_LOG_URI to keep the step's logs)"
    return f"{log_uri.rstrip('/')}/{cluster['Id']}/steps/{step_id}/"
