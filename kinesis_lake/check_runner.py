"""``kinesis-lake check``: the definitions' asset checks, run against the configured lake.

A data team's CI runs this after a deploy or on a schedule: nothing is materialized, each
check runs once in this process (Dagster executes a selection of checks alone), every
outcome is one line, and JUnit XML, which CI systems display as test results, is written
on request. A check that fails with ERROR severity (or raises) fails the command; one
that fails with WARN severity does not, unless warnings are asked to.

With ``$DAGSTER_HOME`` set, the checks that read run history (ingestion advancing, data
loss reported by the last ingestion) read that instance; otherwise an empty ephemeral one.
"""

from __future__ import annotations

import os
import time
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import dagster as dg

from kinesis_lake.config import Settings
from kinesis_lake.defs.build import build_definitions
from kinesis_lake.errors import ConfigurationError

PASSED, WARNED, FAILED = "PASS", "WARN", "FAIL"


@dataclass(frozen=True)
class CheckOutcome:
    key: str
    """``asset:check``, as Dagster's UI and ``--select`` spell it."""
    status: str
    description: str


def _selected(defs: dg.Definitions, select: Sequence[str]) -> list[dg.AssetCheckKey]:
    every = sorted(defs.resolve_asset_graph().asset_check_keys, key=lambda k: k.to_user_string())
    if not select:
        return every
    chosen = [
        key
        for key in every
        if any(
            pattern in (key.to_user_string(), key.asset_key.to_user_string(), key.name)
            for pattern in select
        )
    ]
    unknown = [
        pattern
        for pattern in select
        if not any(
            pattern in (k.to_user_string(), k.asset_key.to_user_string(), k.name) for k in every
        )
    ]
    if unknown:
        names = ", ".join(k.to_user_string() for k in every)
        raise ConfigurationError(
            f"--select {unknown[0]!r} matches no check; give an asset, a check name or "
            f"asset:check among: {names}"
        )
    return chosen


def _console_log_level(debug: bool) -> dict[str, object]:
    """Run config for Dagster's console logger: its DEBUG event log (run start, every step's
    outputs, ...) is a hundred lines per run that bury the command's one line per check, so
    only warnings and errors show, unless ``--debug`` asks for the whole log."""
    level = "DEBUG" if debug else "WARNING"
    return {"loggers": {"console": {"config": {"log_level": level}}}}


def run_checks(
    settings: Settings, select: Sequence[str] = (), *, debug: bool = False
) -> list[CheckOutcome]:
    """Run the selected checks once; an outcome per check, in key order."""
    defs = build_definitions(settings)
    keys = _selected(defs, select)
    instance = (
        dg.DagsterInstance.get()
        if os.environ.get("DAGSTER_HOME")
        else dg.DagsterInstance.ephemeral()
    )
    with instance:
        result = dg.materialize(
            [
                *(
                    a
                    for a in defs.assets or []
                    if isinstance(a, dg.AssetsDefinition | dg.AssetSpec)
                ),
                *(defs.asset_checks or []),
            ],
            selection=dg.AssetSelection.checks(*keys),
            resources=defs.resources,
            instance=instance,
            raise_on_error=False,
            run_config=_console_log_level(debug),
        )
    found: dict[str, CheckOutcome] = {}
    for evaluation in result.get_asset_check_evaluations():
        key = f"{evaluation.asset_key.to_user_string()}:{evaluation.check_name}"
        if evaluation.passed:
            status = PASSED
        elif evaluation.severity == dg.AssetCheckSeverity.WARN:
            status = WARNED
        else:
            status = FAILED
        found[key] = CheckOutcome(key, status, evaluation.description or "")
    outcomes = []
    for check in keys:
        key = check.to_user_string()
        outcomes.append(
            found.get(key)
            or CheckOutcome(
                key,
                FAILED,
                "the check raised an error (on stderr above; --debug: Dagster's whole log)",
            )
        )
    return outcomes


def write_junit(
    outcomes: Sequence[CheckOutcome], path: Path, seconds: float, *, warnings_fail: bool
) -> None:
    """One ``testcase`` per check (class: the asset). A WARN is a passing case with its
    message in ``system-out``, unless warnings fail: then it is a failure, as in the exit."""
    failing = {FAILED, WARNED} if warnings_fail else {FAILED}
    root = ET.Element("testsuites")
    suite = ET.SubElement(
        root,
        "testsuite",
        name="kinesis-lake asset checks",
        tests=str(len(outcomes)),
        failures=str(sum(o.status in failing for o in outcomes)),
        errors="0",
        time=f"{seconds:.3f}",
    )
    for outcome in outcomes:
        asset, _, name = outcome.key.rpartition(":")
        case = ET.SubElement(suite, "testcase", classname=asset, name=name, time="0")
        if outcome.status in failing:
            failure = ET.SubElement(
                case, "failure", message=outcome.description, type=outcome.status
            )
            failure.text = outcome.description
        else:
            ET.SubElement(case, "system-out").text = f"{outcome.status}: {outcome.description}"
    path.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)


def check_command(
    settings: Settings,
    select: Sequence[str],
    junit_xml: Path | None,
    *,
    warnings_fail: bool,
    debug: bool = False,
) -> int:
    """Print one line per check, write JUnit XML if asked; the exit status to use."""
    started = time.monotonic()
    outcomes = run_checks(settings, select, debug=debug)
    for outcome in outcomes:
        print(f"{outcome.status}  {outcome.key}  {outcome.description}", flush=True)
    counts = {s: sum(o.status == s for o in outcomes) for s in (PASSED, WARNED, FAILED)}
    print(f"{counts[PASSED]} passed, {counts[WARNED]} warned, {counts[FAILED]} failed")
    if junit_xml is not None:
        seconds = time.monotonic() - started
        write_junit(outcomes, junit_xml, seconds, warnings_fail=warnings_fail)
    failing = {FAILED, WARNED} if warnings_fail else {FAILED}
    return 1 if any(outcome.status in failing for outcome in outcomes) else 0
