"""Derive against poison records and crashes: no record halts it, and every raw record is
parsed or quarantined exactly once whatever the batches hold and wherever a refresh stopped."""

from __future__ import annotations

import json

from kinesis_lake.pipeline.derive import refresh_downstream
from kinesis_lake.pipeline.ingest import run_ingestion
from kinesis_lake_tests.pipeline_helpers import (
    assert_accounted,
    derive_with_a_failing_commit,
    event,
    ingest_and_derive,
    put,
    table_rows,
)


def test_an_event_time_on_the_last_day_of_9999_does_not_halt_derive(
    spark, kinesalite_endpoint, settings_factory
):
    """Issue 15 defect 1: adding a day or a minute to it raised OverflowError in derive."""
    settings = settings_factory(kinesalite_endpoint)
    ingest_and_derive(spark, settings, event("x", "2024-05-01T10:00:00Z"))
    ingest_and_derive(
        spark,
        settings,
        event("y", "9999-12-31T00:00:00Z"),
        event("z", "9999-12-31T23:59:30Z"),
        event("w", "9999-12-30T23:59:30Z"),
    )
    ingest_and_derive(spark, settings, event("v", "2024-05-01T10:01:00Z"))

    parsed, quarantined = assert_accounted(settings)
    assert sorted(r["event_id"] for r in parsed) == ["v", "w", "x"]
    assert len(quarantined) == 2
    assert all("9999-12-30 in UTC" in r["error"] for r in quarantined)
    assert {r["error_field"] for r in quarantined} == {"event_time"}


def test_duplicate_detection_does_not_depend_on_what_else_the_batch_holds(
    spark, kinesalite_endpoint, settings_factory
):
    """Issue 15 defect 5: a key repeated on another day was quarantined only when its batch
    also touched the original's day. Now the window is declared: key and UTC day."""
    settings = settings_factory(kinesalite_endpoint)
    ingest_and_derive(
        spark,
        settings,
        event("a", "2024-05-01T10:00:00Z"),
        event("b", "2024-05-01T10:00:00Z"),
        event("d", "2024-05-01T10:00:00Z"),
    )
    ingest_and_derive(spark, settings, event("a", "2024-05-02T10:00:00Z"))  # alone
    ingest_and_derive(
        spark,
        settings,
        event("b", "2024-05-02T10:00:00Z"),  # with an event on b's original day
        event("c", "2024-05-01T11:00:00Z"),
        event("d", "2024-05-01T23:59:00Z"),  # same key, same day: a duplicate
    )

    parsed, quarantined = assert_accounted(settings)
    fate = {(r["event_id"], r["event_time"].day): "parsed" for r in parsed}
    fate |= {
        (json.loads(r["payload"])["event_id"], 1 if "05-01" in r["payload"].decode() else 2): "q"
        for r in quarantined
    }
    assert fate[("a", 2)] == fate[("b", 2)] == "parsed", "same record, same fate in any batch"
    assert fate[("d", 1)] == "q"
    assert len(quarantined) == 1
    assert quarantined[0]["error"] == (
        "duplicate event: event_id=d was already parsed with an event time on the same UTC day"
    )


def test_a_long_duplicate_key_is_shown_capped(spark, kinesalite_endpoint, settings_factory):
    """Issue 15 defect 7: the duplicate message printed the whole key."""
    settings = settings_factory(kinesalite_endpoint)
    long_key = "k" * 5000
    ingest_and_derive(
        spark,
        settings,
        event(long_key, "2024-05-01T10:00:00Z"),
        event(long_key, "2024-05-01T10:00:00Z"),
    )
    _, (row,) = assert_accounted(settings)
    assert row["error"] == (
        f"duplicate event: event_id={'k' * 57}... was already parsed with an event time on "
        "the same UTC day"
    )


def test_a_crash_between_the_parsed_and_quarantine_commits_duplicates_nothing(
    spark, kinesalite_endpoint, settings_factory
):
    """Issue 10 defect 4: the re-run found the slice's own events in parsed and quarantined
    every one of them as a duplicate."""
    settings = settings_factory(kinesalite_endpoint)
    ingest_and_derive(spark, settings, event("e1", "2024-05-01T10:00:00Z"), b"not json")
    put(
        settings,
        event("e2", "2024-05-01T10:00:00Z"),
        event("e3", "2024-05-01T10:00:01Z"),
        event("e1", "2024-05-01T10:30:00Z"),  # a true duplicate
        b"{broken",
    )
    run_ingestion(spark, settings)

    crashed = derive_with_a_failing_commit(settings, settings.quarantine_table)

    assert crashed.returncode != 0
    assert f"injected: commit of {settings.quarantine_table} failed" in crashed.stderr
    assert sorted(
        r["event_id"] for r in table_rows(settings, settings.table_identifier("events"))
    ) == [
        "e1",
        "e2",
        "e3",
    ], "the crash point: parsed committed, quarantine did not"
    assert len(table_rows(settings, settings.quarantine_table)) == 1

    refresh_downstream(spark, settings)

    parsed, quarantined = assert_accounted(settings)
    assert sorted(r["event_id"] for r in parsed) == ["e1", "e2", "e3"]
    reasons = sorted(r["error"].split(":")[0] for r in quarantined)
    assert reasons == ["duplicate event", "invalid JSON", "invalid JSON"]


def test_a_keyed_tables_failed_commit_beside_the_quarantines_quarantines_nothing_twice(
    spark, kinesalite_endpoint, settings_factory
):
    """Appends run side by side, so the quarantine's commit can land while the keyed
    table's fails: the next refresh finds the table behind the quarantine and takes the
    backfill path, which must neither quarantine the slice's duplicate again nor lose it."""
    settings = settings_factory(kinesalite_endpoint)
    ingest_and_derive(spark, settings, event("e1", "2024-05-01T10:00:00Z"))
    put(
        settings,
        event("e2", "2024-05-01T10:00:00Z"),
        event("e1", "2024-05-01T10:30:00Z"),  # a true duplicate
        b"{broken",
    )
    run_ingestion(spark, settings)

    crashed = derive_with_a_failing_commit(settings, settings.table_identifier("events"))

    assert crashed.returncode != 0
    assert f"injected: commit of {settings.table_identifier('events')} failed" in crashed.stderr
    assert [r["event_id"] for r in table_rows(settings, settings.table_identifier("events"))] == [
        "e1"
    ], "the crash point: events did not commit"
    assert len(table_rows(settings, settings.quarantine_table)) == 2, "committed beside it"

    refresh_downstream(spark, settings)

    parsed, quarantined = assert_accounted(settings)
    assert sorted(r["event_id"] for r in parsed) == ["e1", "e2"]
    reasons = sorted(r["error"].split(":")[0] for r in quarantined)
    assert reasons == ["duplicate event", "invalid JSON"]
