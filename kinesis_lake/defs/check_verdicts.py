"""Checks evaluated inside a step and recorded as executions of their own.

Dagster dates a check that a run plans by the run's creation: a run's checks showed a
time before the commit they judged (a plain ingestion run: seconds; a lingering one:
minutes). Where a step knows its commit landed, it evaluates the checks itself and records
each verdict as a runless evaluation naming the materialization it judged, so each is its
own execution, dated when it was recorded. (Evaluations of a check inside one run share
one execution, dated when the first was planned or recorded.)

Invariant: a check planned by the run is left to the run (``planned_checks``), so no
check is evaluated twice for one commit.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import dagster as dg
from dagster._core.definitions.asset_checks.asset_check_evaluation import (
    AssetCheckEvaluationTargetMaterializationData,
)


def evaluate_check(
    check: dg.AssetChecksDefinition,
    resources: dict[str, Any],
    instance: dg.DagsterInstance,
) -> dg.AssetCheckEvaluation:
    """Run one check in this process: its verdict on the check's asset's latest
    materialization, to be recorded with ``record_verdicts`` (its own execution, dated
    when recorded)."""
    key = check.check_key
    latest = instance.fetch_materializations(key.asset_key, limit=1).records
    target = (
        AssetCheckEvaluationTargetMaterializationData(
            storage_id=latest[0].storage_id,
            run_id=latest[0].run_id,
            timestamp=latest[0].timestamp,
        )
        if latest
        else None
    )
    blocking = any(spec.blocking for spec in check.check_specs)
    try:
        result = check(dg.build_asset_check_context(instance=instance, resources=resources))
        assert isinstance(result, dg.AssetCheckResult)
        passed, severity = result.passed, result.severity
        metadata, description = result.metadata, result.description
    except Exception as error:  # a check that raises is a failed check, with its reason
        passed, severity, metadata = False, dg.AssetCheckSeverity.ERROR, {}
        description = f"The check raised {type(error).__name__}: {error}"
    return dg.AssetCheckEvaluation(
        asset_key=key.asset_key,
        check_name=key.name,
        passed=passed,
        metadata=metadata,
        severity=severity,
        description=description,
        target_materialization_data=target,
        blocking=blocking,
    )


def record_verdicts(
    verdicts: Iterable[dg.AssetCheckEvaluation], instance: dg.DagsterInstance
) -> None:
    for verdict in verdicts:
        instance.report_runless_asset_event(verdict)


def planned_checks(context: dg.AssetExecutionContext) -> set[dg.AssetCheckKey]:
    """The checks this run executes as its own steps (a run launched from the UI plans the
    checks of the assets it materializes; our ingestion jobs plan none)."""
    selected = context.run.asset_check_selection
    if selected is not None:
        return set(selected)
    return set(context.job_def.asset_layer.asset_graph.asset_check_keys)
