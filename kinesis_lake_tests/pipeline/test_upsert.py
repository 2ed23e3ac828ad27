"""Upsert tables through real Kinesis, Spark and Iceberg: the current row per key.

Records are put one by one on one partition key, so Kinesis order is put order; the
plain-Python model of "latest version per key" (:func:`model`) breaks version ties by
that order, as the table's documented rule does (arrival, then shard and sequence).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from kinesis_lake.config import Settings
from kinesis_lake.pipeline.derive import refresh_downstream
from kinesis_lake.pipeline.ingest import run_ingestion
from kinesis_lake.pipeline.lake import open_lake
from kinesis_lake_tests.ambiguous_catalog import LANDS_THEN_RAISES, RAISES_BEFORE
from kinesis_lake_tests.lake_settings import make_settings
from kinesis_lake_tests.pipeline.declared_lakes import PROFILES, profile
from kinesis_lake_tests.pipeline_helpers import (
    derive_with_a_failing_commit,
    ingest_and_derive,
    put,
    table_rows,
)

DECLARATION = PROFILES  # the lake of the ``settings`` fixture (conftest)

USERS = ("ann", "bob", "cid", "dee")


def model(updates: list[dict[str, Any]]) -> dict[str, str]:
    """Latest version per key; a tie goes to the later record; a delete removes the key."""
    winners: dict[str, tuple[tuple[int, int], dict[str, Any]]] = {}
    for position, record in enumerate(updates):
        rank = (record["version"], position)
        if (
            record["user_id"] is not None
            and rank > winners.get(record["user_id"], ((-1, -1), {}))[0]
        ):
            winners[record["user_id"]] = (rank, record)
    return {
        user: record["email"] for user, (_, record) in winners.items() if record["op"] != "delete"
    }


def profiles(settings: Settings) -> dict[str, str]:
    rows = table_rows(settings, settings.table_identifier("user_profiles"))
    assert len(rows) == len({r["user_id"] for r in rows}), "one row per key"
    return {r["user_id"]: r["email"] for r in rows}


updates_strategy = st.lists(
    st.builds(
        profile,
        user=st.sampled_from(USERS),
        version=st.integers(1, 4),
        email=st.sampled_from(["x@example.com", "y@example.com", ""]),
        op=st.sampled_from(["upsert", "upsert", "delete"]),
    ),
    min_size=1,
    max_size=14,
)


@hypothesis_settings(
    max_examples=3,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(updates=updates_strategy, cuts=st.tuples(st.integers(0, 14), st.integers(0, 14)))
def test_the_table_holds_the_latest_version_of_every_key_however_records_are_batched(
    spark, kinesalite_endpoint, tmp_path_factory, updates, cuts
):
    """Out-of-order versions, repeats and deletes over three micro-batches and refreshes."""
    folder = tmp_path_factory.mktemp("upsert")
    settings = make_settings(folder / "data", kinesalite_endpoint.url, declaration=PROFILES)
    low, high = sorted(cuts)
    for batch in (updates[:low], updates[low:high], updates[high:]):
        if batch:
            ingest_and_derive(spark, settings, *batch)
    assert profiles(settings) == model(updates)


def test_an_older_version_arriving_after_a_delete_does_not_bring_the_key_back(spark, settings):
    ingest_and_derive(spark, settings, profile("ann", 1), profile("bob", 1))
    ingest_and_derive(spark, settings, profile("ann", 3, op="delete"))
    assert profiles(settings) == {"bob": "bob-v1@example.com"}

    ingest_and_derive(spark, settings, profile("ann", 2))  # late, older than the delete
    assert profiles(settings) == {"bob": "bob-v1@example.com"}
    tombstones = table_rows(settings, settings.table_identifier("user_profiles_tombstones"))
    assert [(r["user_id"], r["version"]) for r in tombstones] == [("ann", 3)]

    # A re-insert:
    ingest_and_derive(spark, settings, profile("ann", 4, email="back@example.com"))
    assert profiles(settings) == {"ann": "back@example.com", "bob": "bob-v1@example.com"}
    assert table_rows(settings, settings.table_identifier("user_profiles_tombstones")) == []


def test_a_version_tie_goes_to_the_record_kinesis_received_later(spark, settings):
    ingest_and_derive(spark, settings, profile("ann", 2, email="first@example.com"))
    ingest_and_derive(
        spark,
        settings,
        profile("ann", 2, email="second@example.com"),
        profile("ann", 1, email="old@example.com"),
    )
    assert profiles(settings) == {"ann": "second@example.com"}


def test_a_record_without_a_key_stays_in_its_source_table_only(spark, settings):
    ingest_and_derive(spark, settings, profile(None, 1), profile("ann", 1))
    assert profiles(settings) == {"ann": "ann-v1@example.com"}
    source = table_rows(settings, settings.table_identifier("profile_updates"))
    assert sorted(str(r["user_id"]) for r in source) == ["None", "ann"]


@pytest.mark.parametrize("mode", [RAISES_BEFORE, LANDS_THEN_RAISES])
def test_a_refresh_killed_at_any_commit_and_rerun_ends_as_an_uninterrupted_one(
    spark, settings, mode
):
    """A refresh commits the tombstones, then the table. Killed before the table's commit
    (the tombstones landed) or right after it (landed, reported as failed), in a separate
    process, then rerun here (a restart). A kill before the tombstones' commit leaves
    nothing changed, which the first case's rerun already covers."""
    first = [profile("ann", 1), profile("bob", 1), profile("cid", 2)]
    second = [
        profile("ann", 2),
        profile("bob", 3, op="delete"),
        profile("cid", 1),
        profile("dee", 1),
    ]
    ingest_and_derive(spark, settings, *first)
    put(settings, *second)
    run_ingestion(spark, settings)

    crashed = derive_with_a_failing_commit(
        settings, settings.table_identifier("user_profiles"), mode=mode
    )
    assert crashed.returncode != 0
    assert "injected" in crashed.stderr, crashed.stderr[-3000:]
    refresh_downstream(spark, settings)

    assert profiles(settings) == model(first + second)
    again = refresh_downstream(spark, settings)
    assert again.derived["user_profiles"].up_to_date
    # Merge-on-read: ann's and bob's held rows deleted by position exactly once, however
    # the refresh died (cid's held row wins and stays).
    table = open_lake(settings).load_table(settings.table_identifier("user_profiles"))
    assert table.current_snapshot().summary["total-position-deletes"] == "2"
