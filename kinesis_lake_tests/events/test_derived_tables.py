"""``derived:`` declarations: upsert and SQL tables load, or fail naming file, line and table."""

from __future__ import annotations

from pathlib import Path

import pytest

from kinesis_lake.events.declaration import DeclarationError
from kinesis_lake.events.declaration_file import load_declaration
from kinesis_lake.events.derived_tables import DeleteRule, UpsertSpec, WindowSpec

TABLES = """\
tables:
  - name: profile_updates
    fields:
      - {name: user_id, type: string}
      - {name: version, type: long}
      - {name: op, type: string}
      - {name: at, type: timestamp}
derived:
"""
UPSERT = """\
  - name: user_profiles
    from: profile_updates
    upsert: {key: user_id, version: version, delete: {field: op, one_of: [delete, erase]}}
"""
WINDOWED = """\
  - name: per_hour
    sql: |
      WITH recent AS (SELECT * FROM profile_updates)
      SELECT date_trunc('hour', at) AS hour, count(*) AS n FROM recent GROUP BY 1
    refresh: windowed
    window: {column: at, size: hour, output: hour}
"""


def load(tmp_path: Path, derived: str):
    path = tmp_path / "lake.yaml"
    path.write_text(TABLES + derived)
    return path, load_declaration(path)


def test_upsert_and_sql_tables_load_with_what_they_read(tmp_path):
    full = "  - name: profiles_total\n    sql: SELECT count(*) AS n FROM user_profiles\n"
    _, lake = load(tmp_path, UPSERT + WINDOWED + full)

    upsert, windowed, total = lake.derived
    assert upsert.upsert == UpsertSpec("user_id", "version", DeleteRule("op", ("delete", "erase")))
    assert (upsert.inputs, upsert.tombstones) == (("profile_updates",), "user_profiles_tombstones")
    assert (windowed.inputs, windowed.refresh) == (("profile_updates",), "windowed")
    assert windowed.window == WindowSpec("at", "hour", "hour")
    assert (total.inputs, total.refresh) == (("user_profiles",), "full")


@pytest.mark.parametrize(
    ("derived", "line", "message"),
    [
        (
            "  - name: bad\n    sql: SELECT count(* FROM profile_updates\n",
            9,
            "derived table 'bad': the SQL does not parse at line 1, column",
        ),
        (
            "  - name: bad\n    sql: SELECT * FROM profile_updatez\n",
            9,
            "derived table 'bad': the SQL reads 'profile_updatez', which is not a declared "
            "table; declared: profile_updates",
        ),
        (
            UPSERT + "  - name: bad\n    sql: SELECT * FROM profile_updates"
            " JOIN user_profiles USING (user_id)\n    refresh: rows\n",
            12,
            "derived table 'bad': refresh rows reads exactly one table (the one whose new rows "
            "drive it), the SQL reads profile_updates, user_profiles; use refresh: full",
        ),
        (
            UPSERT.replace("key: user_id", "key: user"),
            9,
            "derived table 'user_profiles': upsert key 'user' is not a top-level column of "
            "profile_updates",
        ),
        (
            UPSERT
            + "  - name: user_profiles_tombstones\n    sql: SELECT 1 AS n FROM user_profiles\n",
            12,
            "derived table 'user_profiles_tombstones': the name 'user_profiles_tombstones' is "
            "already a table of the lake",
        ),
        (
            WINDOWED.replace("    window: {column: at, size: hour, output: hour}\n", ""),
            9,
            "derived table 'per_hour': window must be a mapping",
        ),
        (
            WINDOWED.replace("size: hour,", "size: week,"),
            9,
            "window size must be one of minute, hour, day, got 'week'",
        ),
        (
            UPSERT + "  - name: bad\n    sql: SELECT * FROM user_profiles\n    refresh: rows\n",
            12,
            "derived table 'bad': refresh rows follows the rows its input appends, and "
            "user_profiles is an upsert table, which replaces rows; use refresh: full",
        ),
        (
            UPSERT
            + "  - name: bad\n    from: user_profiles\n    upsert: {key: op, version: version}\n",
            12,
            "derived table 'bad': an upsert follows the rows its from table appends, and "
            "user_profiles is an upsert table, which replaces rows; take from: profile_updates "
            "(its source), or use a SQL table with refresh: full",
        ),
        (
            "  - name: bad\n    sql: DELETE FROM profile_updates\n",
            9,
            "derived table 'bad': sql must be one SELECT query",
        ),
    ],
)
def test_a_bad_derived_table_fails_the_load_naming_file_line_and_table(
    tmp_path, derived, line, message
):
    path = tmp_path / "lake.yaml"
    path.write_text(TABLES + derived)
    with pytest.raises(DeclarationError) as failure:
        load_declaration(path)
    assert str(failure.value).startswith(f"{path}:{line}: "), str(failure.value)
    assert message in str(failure.value)


def test_expiry_keeps_what_the_incremental_derived_tables_still_read(tmp_path):
    """An upsert, rows or windowed table resumes at a snapshot of its input: the input's
    expiry must keep it. A full table reads the current snapshot only."""
    from kinesis_lake.pipeline.maintain import consumers

    full = "  - name: profiles_total\n    sql: SELECT count(*) AS n FROM user_profiles\n"
    _, lake = load(tmp_path, UPSERT + WINDOWED + full)

    readers = consumers(lake)
    assert set(readers["profile_updates"]) >= {"user_profiles", "per_hour"}
    assert readers["user_profiles"] == ()
    assert readers["user_profiles_tombstones"] == () and readers["profiles_total"] == ()
