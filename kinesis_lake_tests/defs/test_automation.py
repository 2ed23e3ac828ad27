"""Declarative automation: the derived tables follow raw_events, unless raw is blocked."""

from __future__ import annotations

import dagster as dg

from kinesis_lake.definitions import defs

RAW = dg.AssetKey("raw_events")
DERIVED = [dg.AssetKey(n) for n in ("events", "events_quarantine", "event_counts_per_minute")]


def _raw_ingested(instance: dg.DagsterInstance, *, duplicates_check_passed: bool = True) -> None:
    """What an ingest_raw_events run records: the materialization, then its checks."""
    instance.report_runless_asset_event(dg.AssetMaterialization(RAW))
    instance.report_runless_asset_event(
        dg.AssetCheckEvaluation(
            asset_key=RAW, check_name="no_duplicate_records", passed=duplicates_check_passed
        )
    )


def _requested(result) -> set[dg.AssetKey]:
    return {key for key in [RAW, *DERIVED] if result.get_num_requested(key)}


def test_derived_tables_are_requested_after_a_checked_raw_materialization(instance):
    first = dg.evaluate_automation_conditions(defs=defs, instance=instance)
    # Raw has never been materialized: nothing to derive from yet.
    assert _requested(first) == set()

    _raw_ingested(instance)
    second = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=first.cursor)
    assert _requested(second) == set(DERIVED)

    # Once requested, the same raw update is not requested again.
    third = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=second.cursor)
    assert _requested(third) == set()


def test_raw_is_never_auto_materialized(instance):
    _raw_ingested(instance)
    for key in DERIVED:
        instance.report_runless_asset_event(dg.AssetMaterialization(key))
    cursor = None
    for _ in range(2):
        result = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=cursor)
        cursor = result.cursor
        assert RAW not in _requested(result)


def test_a_failed_blocking_check_on_raw_holds_the_derived_tables(instance):
    first = dg.evaluate_automation_conditions(defs=defs, instance=instance)
    _raw_ingested(instance, duplicates_check_passed=False)
    held = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=first.cursor)
    assert _requested(held) == set()

    # The duplicates are fixed and the check re-run: the pending raw update flows on.
    instance.report_runless_asset_event(
        dg.AssetCheckEvaluation(asset_key=RAW, check_name="no_duplicate_records", passed=True)
    )
    released = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=held.cursor)
    assert _requested(released) == set(DERIVED)


def test_a_raw_materialization_whose_blocking_check_never_ran_is_held(instance):
    # Every ingestion run records raw_events' checks before it ends; this guards hand-made
    # updates.
    first = dg.evaluate_automation_conditions(defs=defs, instance=instance)
    instance.report_runless_asset_event(dg.AssetMaterialization(RAW))
    held = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=first.cursor)
    assert _requested(held) == set()


def test_a_failed_non_blocking_check_does_not_hold_them(instance):
    first = dg.evaluate_automation_conditions(defs=defs, instance=instance)
    _raw_ingested(instance)
    instance.report_runless_asset_event(
        dg.AssetCheckEvaluation(asset_key=RAW, check_name="fresh_relative_to_stream", passed=False)
    )
    result = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=first.cursor)
    assert _requested(result) == set(DERIVED)


def test_the_downstream_commits_of_a_lingering_run_request_no_derive_run(instance):
    """A lingering ingestion run brings the downstream tables along itself (defs/follow.py),
    one table after another. Its run plans raw only: the aggregate, whose input (events)
    the run had just refreshed, looked ready to the automation, which requested a derive
    run that queued behind the run's refresh and then found nothing new (seen in make dev
    after each burst). Nothing downstream is requested while raw is being written, nor
    after, once the run caught every table up."""
    first = dg.evaluate_automation_conditions(defs=defs, instance=instance)
    lingering = instance.create_run_for_job(  # it plans raw, so raw is "in progress"
        defs.resolve_job_def("ingest_raw_events"),
        asset_selection=frozenset({RAW}),
        status=dg.DagsterRunStatus.STARTED,
    )
    _raw_ingested(instance)
    for key in DERIVED[:2]:  # the follower's commits: events, then the quarantine
        instance.report_runless_asset_event(dg.AssetMaterialization(key))
    during = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=first.cursor)
    assert _requested(during) == set()

    instance.report_runless_asset_event(dg.AssetMaterialization(DERIVED[2]))
    instance.report_run_canceled(lingering)
    after = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=during.cursor)
    assert _requested(after) == set()
