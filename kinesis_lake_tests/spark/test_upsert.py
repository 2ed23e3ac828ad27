"""Upsert tables through real Kinesis, Spark and Iceberg: the current row per key.

Records are put one by one on one partition key, so Kinesis order is put order; the
plain-Python model of "latest version per key" (:func:`model`) breaks version ties by
that order, as the table's documented rule does (arrival, then shard and sequence).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from kinesis_lake.config import Settings
from kinesis_lake.pipeline.derive import refresh_derived
from kinesis_lake.pipeline.ingest import run_ingestion
from kinesis_lake_tests.ambiguous_catalog import LANDS_THEN_RAISES, RAISES_BEFORE
from kinesis_lake_tests.conftest import make_settings
from kinesis_lake_tests.pipeline_helpers import table_rows
from kinesis_lake_tests.spark.test_derive_poison import derive_with_a_failing_commit, put

DECLARATION = """\
tables:
  - name: profile_updates
    route: {type: profile}
    fields:
      - {name: user_id, type: string}
      - {name: version, type: long, required: true}
      - {name: op, type: string}
      - {name: email, type: string}
      - {name: at, type: timestamp, required: true}
    event_time_field: at
derived:
  - name: user_profiles
    description: The current profile of every user.
    from: profile_updates
    upsert: {key: user_id, version: version, delete: {field: op, equals: delete}}
"""
AT = "2024-05-01T10:00:00Z"
USERS = ("ann", "bob", "cid", "dee")


def update(user: str | None, version: int, email: str = "", op: str = "upsert") -> dict[str, Any]:
    return {
        "type": "profile",
        "user_id": user,
        "version": version,
        "op": op,
        "email": email or f"{user}-v{version}@example.com",
        "at": AT,
    }


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


@pytest.fixture
def settings(kinesalite_endpoint, settings_factory, tmp_path: Path) -> Settings:
    path = tmp_path / "lake.yaml"
    path.write_text(DECLARATION)
    return replace(settings_factory(kinesalite_endpoint), event_schema_path=path)


def profiles(settings: Settings) -> dict[str, str]:
    rows = table_rows(settings, settings.table_identifier("user_profiles"))
    assert len(rows) == len({r["user_id"] for r in rows}), "one row per key"
    return {r["user_id"]: r["email"] for r in rows}


def deliver(spark, settings: Settings, batch: list[dict[str, Any]]) -> None:
    put(settings, *batch)
    run_ingestion(spark, settings)
    refresh_derived(spark, settings)


updates_strategy = st.lists(
    st.builds(
        update,
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
    (folder / "lake.yaml").write_text(DECLARATION)
    settings = make_settings(
        folder / "data", kinesalite_endpoint.url, event_schema_path=folder / "lake.yaml"
    )
    low, high = sorted(cuts)
    for batch in (updates[:low], updates[low:high], updates[high:]):
        if batch:
            deliver(spark, settings, batch)
    assert profiles(settings) == model(updates)


def test_an_older_version_arriving_after_a_delete_does_not_bring_the_key_back(spark, settings):
    deliver(spark, settings, [update("ann", 1), update("bob", 1)])
    deliver(spark, settings, [update("ann", 3, op="delete")])
    assert profiles(settings) == {"bob": "bob-v1@example.com"}

    deliver(spark, settings, [update("ann", 2)])  # late, older than the delete
    assert profiles(settings) == {"bob": "bob-v1@example.com"}
    tombstones = table_rows(settings, settings.table_identifier("user_profiles_tombstones"))
    assert [(r["user_id"], r["version"]) for r in tombstones] == [("ann", 3)]

    deliver(spark, settings, [update("ann", 4, email="back@example.com")])  # re-insert
    assert profiles(settings) == {"ann": "back@example.com", "bob": "bob-v1@example.com"}
    assert table_rows(settings, settings.table_identifier("user_profiles_tombstones")) == []


def test_a_version_tie_goes_to_the_record_kinesis_received_later(spark, settings):
    deliver(spark, settings, [update("ann", 2, email="first@example.com")])
    deliver(
        spark,
        settings,
        [update("ann", 2, email="second@example.com"), update("ann", 1, email="old@example.com")],
    )
    assert profiles(settings) == {"ann": "second@example.com"}


def test_a_record_without_a_key_stays_in_its_source_table_only(spark, settings):
    deliver(spark, settings, [update(None, 1), update("ann", 1)])
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
    first = [update("ann", 1), update("bob", 1), update("cid", 2)]
    second = [update("ann", 2), update("bob", 3, op="delete"), update("cid", 1), update("dee", 1)]
    deliver(spark, settings, first)
    put(settings, *second)
    run_ingestion(spark, settings)

    crashed = derive_with_a_failing_commit(
        settings, settings.table_identifier("user_profiles"), mode=mode
    )
    assert crashed.returncode != 0
    assert "injected" in crashed.stderr, crashed.stderr[-3000:]
    refresh_derived(spark, settings)

    assert profiles(settings) == model(first + second)
    again = refresh_derived(spark, settings)
    assert again.derived["user_profiles"].up_to_date
