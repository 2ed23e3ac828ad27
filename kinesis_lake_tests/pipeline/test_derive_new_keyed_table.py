"""A keyed (deduplicated) table added to a stream that has run for a while (issue 31,
suspected c).

Its first refresh reads the whole raw table while the quarantine reads only what is new,
so the two are refreshed in separate passes. The quarantine's duplicate verdicts for the
new table were computed against it as it was before its backfill (empty): a repeat of a
key the backfill had just written landed in neither the table nor the quarantine.
"""

from __future__ import annotations

import json

from kinesis_lake.config import Settings
from kinesis_lake.pipeline.derive import refresh_downstream
from kinesis_lake.pipeline.ingest import run_ingestion
from kinesis_lake.pipeline.replay import replay_quarantine
from kinesis_lake_tests.pipeline.declared_lakes import (
    AT,
    EVENTS_ONLY,
    ONLY_PAGES_AND_ORDERS,
    ORDERS_AND_REFUNDS,
    WITH_KEYED_ORDERS,
    order,
)
from kinesis_lake_tests.pipeline_helpers import (
    assert_reconciled,
    derive_with_a_failing_commit,
    ingest_and_derive,
    put,
    table_rows,
)

DECLARATION = EVENTS_ONLY  # the lake of the ``settings`` fixture (conftest)


def _fates(settings: Settings) -> tuple[list[str], list[str]]:
    """The orders table's ids, and the payloads quarantined as its duplicates."""
    orders = sorted(r["id"] for r in table_rows(settings, settings.table_identifier("orders")))
    repeats = sorted(
        r["payload"].decode()
        for r in table_rows(settings, settings.quarantine_table)
        if r["target_table"] == "orders" and r["error"].startswith("duplicate event")
    )
    return orders, repeats


def test_a_repeat_arriving_with_a_new_keyed_tables_backfill_is_quarantined(spark, settings):
    ingest_and_derive(spark, settings, order("a", 1), order("b", 1))
    settings.event_schema_path.write_text(WITH_KEYED_ORDERS)

    ingest_and_derive(spark, settings, order("a", 2), order("c", 1))

    orders, repeats = _fates(settings)
    assert orders == ["a", "b", "c"]
    assert len(repeats) == 1 and '"copy": 2' in repeats[0], repeats
    assert_reconciled(settings, ("events", "orders"))


def test_a_new_keyed_tables_rejections_among_earlier_records_are_quarantined_once(spark, settings):
    """The raw records the quarantine judged before the table existed: the table's repeats
    and schema rejections among them are quarantined for it, except records quarantined as
    taken by no table (a replay judges those again)."""
    settings.event_schema_path.write_text(ONLY_PAGES_AND_ORDERS)
    ingest_and_derive(
        spark,
        settings,
        order("a", 1),
        order("a", 2),  # a repeat, judged before orders existed
        {"id": "x", "type": "order"},  # no time: orders will reject it
        {"id": "r", "type": "refund", "at": AT},  # no table takes refunds yet
        {"id": "y", "type": "refund"},  # neither, and orders will reject it
    )
    settings.event_schema_path.write_text(ORDERS_AND_REFUNDS)

    ingest_and_derive(spark, settings, order("a", 3), order("c", 1))
    replayed = replay_quarantine(spark, settings)

    orders, repeats = _fates(settings)
    assert orders == ["a", "c", "r"]
    assert [json.loads(payload)["copy"] for payload in repeats] == [2, 3]
    rejected = [
        (json.loads(r["payload"])["id"], r["target_table"], r["resolved_at"] is None)
        for r in table_rows(settings, settings.quarantine_table)
        if not r["error"].startswith("duplicate event")
    ]
    assert sorted(rejected) == [("r", None, False), ("x", "orders", True), ("y", None, True)]
    # r left the quarantine with the backfill that took it: the replay found nothing to move
    assert (replayed.candidates, replayed.resolved) == (4, 0)
    assert_reconciled(settings, ("events", "orders"))


def test_a_crash_between_a_new_keyed_tables_backfill_commits_quarantines_nothing_twice(
    spark, settings
):
    """The backfill commits the quarantine's part first, then the table: a refresh dying
    between the two repeats the pass, and must neither quarantine the table's rejections
    again nor lose its rows."""
    ingest_and_derive(spark, settings, order("a", 1), order("b", 1), order("b", 2))
    settings.event_schema_path.write_text(WITH_KEYED_ORDERS)
    put(settings, order("a", 2), order("c", 1))
    run_ingestion(spark, settings)

    crashed = derive_with_a_failing_commit(settings, settings.table_identifier("orders"))

    assert crashed.returncode != 0
    assert "injected: commit of" in crashed.stderr, crashed.stderr[-3000:]
    assert _fates(settings) == ([], ['{"id": "b", "type": "order", "at": "' + AT + '", "copy": 2}'])

    refresh_downstream(spark, settings)

    orders, repeats = _fates(settings)
    assert orders == ["a", "b", "c"]
    assert sorted(json.loads(payload)["copy"] for payload in repeats) == [2, 2], repeats
    assert_reconciled(settings, ("events", "orders"))
