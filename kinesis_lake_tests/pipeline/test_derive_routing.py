"""A declared lake through real Spark: records routed to many tables, the rest quarantined,
every raw row accounted for, also after a refresh that died between two tables' commits."""

from __future__ import annotations

from collections import Counter

from kinesis_lake.events.routes import NO_ROUTE
from kinesis_lake.pipeline.derive import refresh_downstream
from kinesis_lake.pipeline.ingest import run_ingestion
from kinesis_lake.pipeline.lake import open_lake
from kinesis_lake_tests.pipeline_helpers import (
    assert_reconciled,
    derive_with_a_failing_commit,
    put,
    table_ids,
    table_rows,
)

# The lake of the ``settings`` fixture (conftest).
DECLARATION = """\
tables:
  - name: page_views
    route: {type: page_view}
    fields:
      - {name: id, type: string, required: true}
      - {name: url, type: string}
      - {name: at, type: timestamp, required: true}
      - name: context
        type: struct
        fields:
          - {name: os, type: string, required: true}
          - {name: screen, type: struct, fields: [{name: w, type: int}, {name: h, type: int}]}
      - {name: tags, type: list<string>}
    dedup: id
    event_time_field: at
  - name: purchases
    route:
      type: {one_of: [purchase, refund]}
      context.os: {exists: true}
    fields:
      - {name: id, type: string, required: true}
      - {name: amount, type: double, required: true}
      - {name: currency, type: string}
      - {name: at, type: timestamp, required: true}
    event_time_field: at
    partition:
      - {field: at, transform: hour}
      - {field: currency, transform: identity}
  - name: all_events
    route: {type: {exists: true}}
    fields:
      - {name: id, type: string}
      - {name: type, type: string, required: true}
    event_type_field: type
aggregate: {table: all_events}
"""

AT = "2024-05-01T10:00:00Z"
FIRST = [
    {
        "id": "v1",
        "type": "page_view",
        "url": "/a",
        "at": AT,
        "context": {"os": "ios", "screen": {"w": 390, "h": 844}},
        "tags": ["new", "promo"],
    },
    {"id": "v1", "type": "page_view", "url": "/a", "at": AT},  # a producer's retry
    {
        "id": "p1",
        "type": "purchase",
        "amount": 9.5,
        "currency": "EUR",
        "at": AT,
        "context": {"os": "ios"},
    },
    {"id": "p2", "type": "refund", "amount": "lots", "at": AT, "context": {"os": "web"}},
    {"id": "p3", "type": "purchase", "amount": 1.0, "at": AT},  # no context.os: all_events only
    {"id": "x1", "kind": "heartbeat"},  # no type: no route
    b"{not json",
]
SECOND = [
    {"id": "v2", "type": "page_view", "url": "/b", "at": AT},
    {
        "id": "p4",
        "type": "purchase",
        "amount": 3.0,
        "currency": "USD",
        "at": AT,
        "context": {"os": "android"},
    },
    {"kind": "heartbeat"},
]


def test_records_go_to_every_table_their_routes_name_and_the_rest_to_quarantine(spark, settings):
    put(settings, *FIRST)
    run_ingestion(spark, settings)

    result = refresh_downstream(spark, settings)

    (view,) = table_rows(settings, settings.table_identifier("page_views"))
    assert view["context"] == {"os": "ios", "screen": {"w": 390, "h": 844}}
    assert view["tags"] == ["new", "promo"]
    assert table_ids(settings, "purchases") == ["p1"]
    assert table_ids(settings, "all_events") == ["p1", "p2", "p3", "v1", "v1"]
    quarantined = Counter(
        (r["target_table"], r["error"].split(":")[0])
        for r in table_rows(settings, settings.quarantine_table)
    )
    assert quarantined == {
        ("page_views", "duplicate event"): 1,
        ("purchases", "field 'amount'"): 1,
        (None, NO_ROUTE.split(":")[0]): 1,
        (None, "invalid JSON"): 1,
    }
    assert {name: r.rows_written for name, r in result.tables.items()} == {
        "page_views": 1,
        "purchases": 1,
        "all_events": 5,
    }
    counts = table_rows(settings, settings.aggregate_table)
    assert {r["event_type"]: r["event_count"] for r in counts} == {
        "page_view": 2,
        "purchase": 2,
        "refund": 1,
    }
    purchases = open_lake(settings).load_table(settings.table_identifier("purchases"))
    assert [(f.name, str(f.transform)) for f in purchases.spec().fields] == [
        ("at_hour", "hour"),
        ("currency", "identity"),
    ]
    assert_reconciled(settings, ("page_views", "purchases", "all_events"))

    again = refresh_downstream(spark, settings)
    assert all(r.up_to_date for r in again.tables.values()) and again.quarantine.up_to_date


def test_a_refresh_that_died_between_two_tables_commits_is_finished_exactly_once(spark, settings):
    put(settings, *FIRST)
    run_ingestion(spark, settings)
    refresh_downstream(spark, settings)
    put(settings, *SECOND)
    run_ingestion(spark, settings)

    crashed = derive_with_a_failing_commit(settings, settings.table_identifier("purchases"))

    assert crashed.returncode != 0
    assert "injected: commit of" in crashed.stderr, crashed.stderr[-3000:]
    assert table_ids(settings, "page_views") == ["v1", "v2"], "committed before the crash"
    assert table_ids(settings, "purchases") == ["p1"], "the crash point"
    refresh_downstream(spark, settings)

    assert table_ids(settings, "page_views") == ["v1", "v2"]
    assert table_ids(settings, "purchases") == ["p1", "p4"]
    assert table_ids(settings, "all_events") == ["p1", "p2", "p3", "p4", "v1", "v1", "v2"]
    no_route = [
        r for r in table_rows(settings, settings.quarantine_table) if r["error"] == NO_ROUTE
    ]
    assert len(no_route) == 2
    assert_reconciled(settings, ("page_views", "purchases", "all_events"))
