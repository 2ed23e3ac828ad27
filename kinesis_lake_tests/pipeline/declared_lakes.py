"""Lake declarations (the text of a ``lake.yaml``) and the records put through them, shared
by the tests of several jobs: the refreshes and replays (``pipeline/``), the Dagster assets
and jobs (``defs/``) and the CLI. Pass one to ``settings_factory(endpoint, declaration=...)``.
"""

from __future__ import annotations

from typing import Any

AT = "2024-05-01T10:00:00Z"


# Profiles: a routed table of updates, and an upsert table of the latest one per user ------

PROFILES = """\
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


def profile(user: str | None, version: int, email: str = "", op: str = "upsert") -> dict[str, Any]:
    """An update of ``user``'s profile (a delete with ``op="delete"``)."""
    return {
        "type": "profile",
        "user_id": user,
        "version": version,
        "op": op,
        "email": email or f"{user}-v{version}@example.com",
        "at": AT,
    }


# Profiles with a Spark SQL table in each refresh mode -------------------------------------

PROFILES_WITH_SQL_TABLES = (
    PROFILES
    + """\
  - name: emails
    sql: SELECT user_id, lower(email) AS email, version FROM profile_updates WHERE op <> 'delete'
    refresh: rows
  - name: updates_per_hour
    sql: |
      SELECT date_trunc('hour', at) AS hour, count(*) AS updates, max(version) AS top_version
      FROM profile_updates GROUP BY 1
    refresh: windowed
    window: {column: at, size: hour, output: hour}
  - name: profile_count
    sql: SELECT count(*) AS profiles FROM user_profiles
    refresh: full
"""
)


def profile_at(user: str, version: int, when: str, op: str = "upsert") -> dict[str, Any]:
    """An update of ``user``'s profile made at ``when``."""
    return {**profile(user, version, email=f"{user.upper()}@Example.com", op=op), "at": when}


# A lake whose declaration is fixed later, for the quarantine replay -----------------------

REPLAY_BEFORE = """\
tables:
  - name: page_views
    route: {type: page_view}
    fields:
      - {name: id, type: string, required: true}
      - {name: at, type: timestamp, required: true}
    event_time_field: at
    dedup: id
  - name: purchases
    route: {type: purchase}
    fields:
      - {name: id, type: string, required: true}
      - {name: amount, type: int}
      - {name: at, type: timestamp, required: true}
    event_time_field: at
aggregate: {table: purchases}
"""
# The fix: amounts outgrow int (widened to long), and sign-ups get a table of their own.
REPLAY_AFTER = REPLAY_BEFORE.replace(
    "{name: amount, type: int}", "{name: amount, type: long}"
).replace(
    "aggregate:",
    """  - name: signups
    route: {type: signup}
    fields:
      - {name: id, type: string, required: true}
aggregate:""",
)

REPLAY_RECORDS = [
    {"id": "v1", "type": "page_view", "at": AT},
    {"id": "v2", "type": "page_view"},  # no time: still wrong after the fix
    {"id": "p1", "type": "purchase", "amount": 3, "at": AT},
    {"id": "p2", "type": "purchase", "amount": 2**40, "at": AT},  # too big: fixed by REPLAY_AFTER
    {"id": "s1", "type": "signup"},  # no route: fixed by REPLAY_AFTER
    b"{broken",  # never fixed
]


# A keyed (deduplicated) table added to a lake that has run for a while --------------------

EVENTS_ONLY = """\
tables:
  - name: events
    fields:
      - {name: id, type: string, required: true}
      - {name: type, type: string}
"""
WITH_KEYED_ORDERS = (
    EVENTS_ONLY
    + """\
  - name: orders
    route: {type: order}
    fields:
      - {name: id, type: string, required: true}
      - {name: at, type: timestamp, required: true}
    event_time_field: at
    dedup: id
"""
)
ONLY_PAGES_AND_ORDERS = EVENTS_ONLY.replace(
    "  - name: events\n", "  - name: events\n    route: {type: {one_of: [page, order]}}\n"
)
ORDERS_AND_REFUNDS = WITH_KEYED_ORDERS.replace(
    "  - name: events\n", "  - name: events\n    route: {type: {one_of: [page, order]}}\n"
).replace("route: {type: order}", "route: {type: {one_of: [order, refund]}}")


def order(order_id: str, copy: int) -> dict:
    """An order; ``copy`` tells a producer's resends apart in the test only."""
    return {"id": order_id, "type": "order", "at": AT, "copy": copy}
