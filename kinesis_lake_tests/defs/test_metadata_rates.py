"""A materialization's ``rows_per_second`` is what an operator gets by dividing the
``rows_added`` and ``seconds`` shown beside it. CI once saw 78.2 beside 190 rows in 2.428 s
(which is 78.3): the rate came from the unrounded seconds (2.42814), the UI showed them
rounded to the millisecond."""

from __future__ import annotations

from kinesis_lake.defs.tables import rate


def test_the_rate_is_the_shown_rows_over_the_shown_seconds():
    seconds = 2.42814
    shown_seconds = round(seconds, 3)

    assert rate(190, seconds) == round(190 / shown_seconds, 1) == 78.3


def test_work_too_short_to_show_has_no_rate():
    assert rate(5, 0.0004) == 0.0
    assert rate(5, 0.0) == 0.0
