"""A table added to the declaration, and the replay: each record once, in either order
(issue 31, defect 6).

A new table's first refresh fills it from the whole raw table, quarantined records it now
takes included (marking them resolved), and a replay moves those the refresh has not. Run
in the order a user runs them over months (edit, replay, run; later another edit, run,
replay), every record lands once.
"""

from __future__ import annotations

from kinesis_lake.config import Settings
from kinesis_lake.pipeline.replay import replay_quarantine
from kinesis_lake_tests.pipeline.declared_lakes import (
    AT,
    REPLAY_AFTER,
    REPLAY_BEFORE,
    REPLAY_RECORDS,
)
from kinesis_lake_tests.pipeline_helpers import assert_reconciled, ingest_and_derive, table_ids

DECLARATION = REPLAY_BEFORE  # the lake of the ``settings`` fixture (conftest)


WITH_LOGINS = REPLAY_AFTER.replace(
    "aggregate:",
    """  - name: logins
    route: {type: login}
    fields:
      - {name: id, type: string, required: true}
aggregate:""",
)
TABLES = ("page_views", "purchases", "signups")


def _edit(settings: Settings, declaration: str) -> None:
    settings.event_schema_path.write_text(declaration)


def test_edit_replay_run_then_edit_run_replay_lands_every_record_once(spark, settings):
    ingest_and_derive(spark, settings, *REPLAY_RECORDS, {"id": "s2", "type": "signup"})

    _edit(settings, REPLAY_AFTER)  # sign-ups get a table; s1 and s2 wait in quarantine (no route)
    replayed = replay_quarantine(spark, settings)  # before the new table's first refresh
    ingest_and_derive(spark, settings, {"id": "s3", "type": "signup", "at": AT})

    # s1 and s2 resolved by the catch-up's backfill of signups, p2 by the replay itself
    assert (replayed.candidates, replayed.resolved) == (5, 3)
    assert replayed.caught_up == {"page_views": 0, "purchases": 0, "signups": 2}, "backfill"
    assert replayed.written == {"page_views": 0, "purchases": 1, "signups": 0}
    assert table_ids(settings, "signups") == ["s1", "s2", "s3"]
    assert_reconciled(settings, TABLES)

    ingest_and_derive(spark, settings, {"id": "l1", "type": "login"})  # no table takes it yet
    _edit(settings, WITH_LOGINS)
    ingest_and_derive(spark, settings)  # the new table's first refresh comes first this time
    # l1 left the quarantine as it entered logins: the reconciliation check passes before
    # any replay (it counted l1 twice, in logins and as unrouted, until a replay ran).
    assert table_ids(settings, "logins") == ["l1"]
    assert_reconciled(settings, (*TABLES, "logins"))
    again = replay_quarantine(spark, settings)

    assert (again.candidates, again.resolved) == (2, 0), "l1 is resolved already"
    assert again.written["logins"] == 0, "the first refresh had filled it already"
    assert table_ids(settings, "logins") == ["l1"]
    assert table_ids(settings, "signups") == ["s1", "s2", "s3"]
    assert_reconciled(settings, (*TABLES, "logins"))
