"""Quarantine replay through real Spark: after the declaration is fixed, the records it now
takes move into their tables exactly once (also after a crash in the middle), are marked
resolved, and every raw row is still accounted for."""

from __future__ import annotations

from kinesis_lake.config import Settings
from kinesis_lake.iceberg.query import table_history
from kinesis_lake.pipeline.derive import refresh_downstream
from kinesis_lake.pipeline.ingest import run_ingestion
from kinesis_lake.pipeline.lake import open_lake
from kinesis_lake.pipeline.reconcile import quarantine_ratio
from kinesis_lake.pipeline.replay import replay_quarantine
from kinesis_lake_tests.pipeline.declared_lakes import (
    REPLAY_AFTER,
    REPLAY_BEFORE,
    REPLAY_RECORDS,
)
from kinesis_lake_tests.pipeline_helpers import (
    assert_reconciled,
    derive_with_a_failing_commit,
    put,
    run_cli,
    table_ids,
    table_rows,
)

DECLARATION = REPLAY_BEFORE  # the lake of the ``settings`` fixture (conftest)


def _quarantine(settings: Settings) -> dict[tuple[str | None, bool], int]:
    counts: dict[tuple[str | None, bool], int] = {}
    for row in table_rows(settings, settings.quarantine_table):
        key = (row["target_table"], row["resolved_at"] is not None)
        counts[key] = counts.get(key, 0) + 1
    return counts


def _assert_accounted(settings: Settings) -> None:
    assert_reconciled(settings, ("page_views", "purchases", "signups"))
    catalog = open_lake(settings)
    raw = catalog.load_table(settings.raw_table)
    assert quarantine_ratio([raw], catalog.load_table(settings.quarantine_table)).quarantined == 2


def _fix(settings: Settings) -> None:
    settings.event_schema_path.write_text(REPLAY_AFTER)


def test_replay_moves_what_the_fixed_declaration_takes_exactly_once(spark, settings):
    put(settings, *REPLAY_RECORDS)
    run_ingestion(spark, settings)
    refresh_downstream(spark, settings)
    assert _quarantine(settings) == {
        ("page_views", False): 1,
        ("purchases", False): 1,
        (None, False): 2,
    }

    _fix(settings)
    refresh_downstream(spark, settings)  # creates signups and backfills it from raw
    result = replay_quarantine(spark, settings)

    assert (result.candidates, result.resolved, result.still_quarantined) == (3, 1, 2)
    # A new table's first refresh reads raw from the start: s1 reached signups that way, and
    # that refresh marked its no-route row resolved, so the replay moves p2 alone.
    assert result.written == {"page_views": 0, "purchases": 1, "signups": 0}
    assert table_ids(settings, "purchases") == ["p1", "p2"]
    assert table_ids(settings, "signups") == ["s1"]
    purchases = open_lake(settings).load_table(settings.table_identifier("purchases"))
    assert table_history(purchases)[-1]["writer_id"] == "replay:events_quarantine"
    assert _quarantine(settings) == {
        ("page_views", False): 1,
        ("purchases", True): 1,
        (None, True): 1,
        (None, False): 1,
    }
    resolved = {r["resolved_into"] for r in table_rows(settings, settings.quarantine_table)}
    assert resolved == {None, "purchases", "signups"}
    counts = table_rows(settings, settings.aggregate_table)
    assert sum(r["event_count"] for r in counts) == 2, "the replayed purchase is counted"
    _assert_accounted(settings)

    again = replay_quarantine(spark, settings)
    assert (again.candidates, again.resolved) == (2, 0)
    assert table_ids(settings, "purchases") == ["p1", "p2"]


def test_a_replay_killed_before_marking_moves_nothing_twice(spark, settings):
    put(settings, *REPLAY_RECORDS)
    run_ingestion(spark, settings)
    refresh_downstream(spark, settings)
    _fix(settings)
    refresh_downstream(spark, settings)

    crashed = derive_with_a_failing_commit(
        settings, settings.quarantine_table, job="replay.replay_quarantine"
    )

    assert crashed.returncode != 0
    assert "injected: commit of" in crashed.stderr, crashed.stderr[-3000:]
    assert table_ids(settings, "purchases") == ["p1", "p2"], "appended before the crash"
    assert ("purchases", True) not in _quarantine(settings), "the marking commit did not land"

    replayed = run_cli(settings, "replay")

    assert replayed.returncode == 0, replayed.stderr[-3000:]
    assert replayed.stdout.strip().splitlines()[-1] == (
        "replayed 3 quarantined records: 1 resolved, 2 still quarantined"
    )
    assert table_ids(settings, "purchases") == ["p1", "p2"]
    assert table_ids(settings, "signups") == ["s1"]
    _assert_accounted(settings)
