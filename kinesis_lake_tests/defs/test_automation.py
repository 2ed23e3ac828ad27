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
    # Every job runs raw_events' checks in the same run; this guards hand-made updates.
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
