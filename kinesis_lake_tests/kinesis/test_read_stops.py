"""The stop rule of a shard read, case by case, without Kinesis."""

from __future__ import annotations

import pytest

from kinesis_lake.kinesis.read_stops import BEFORE_RECORD, page_stop, record_bytes, record_stop

_RECORD = {
    "taken_before": 0,
    "end": None,
    "arrival_cutoff_ms": None,
    "max_records": 100,
}


@pytest.mark.parametrize(
    ("sequence_number", "arrival_ms", "read", "expected"),
    [
        pytest.param("5", 1_000, {}, None, id="nothing-to-stop-for"),
        pytest.param("5", 1_000, {"taken_before": 99}, "limit", id="the-last-record-allowed"),
        pytest.param("5", 1_000, {"taken_before": 98}, None, id="one-before-the-limit"),
        pytest.param("5", 1_000, {"max_records": 1}, "limit", id="a-limit-of-one"),
        pytest.param("5", 1_000, {"end": 5}, "end_sequence", id="the-end-record"),
        pytest.param("4", 1_000, {"end": 5}, None, id="before-the-end-record"),
        pytest.param("6", 1_000, {"end": 5}, "end_gone", id="past-the-end-record"),
        # Sequence numbers compare as numbers, not as text.
        pytest.param("10", 1_000, {"end": 9}, "end_gone", id="past-the-end-numerically"),
        pytest.param("9", 1_000, {"end": 10}, None, id="before-the-end-numerically"),
        pytest.param("5", 1_001, {"arrival_cutoff_ms": 1_000}, "cutoff", id="after-the-cutoff"),
        pytest.param("5", 1_000, {"arrival_cutoff_ms": 1_000}, None, id="at-the-cutoff"),
        # The first that applies wins: an unread stop before a taken one.
        pytest.param(
            "6", 2_000, {"end": 5, "arrival_cutoff_ms": 1_000}, "end_gone", id="gone-before-cutoff"
        ),
        pytest.param(
            "5", 2_000, {"end": 5, "arrival_cutoff_ms": 1_000}, "cutoff", id="cutoff-before-end"
        ),
        pytest.param(
            "5", 1_000, {"end": 5, "taken_before": 99}, "end_sequence", id="end-before-limit"
        ),
        pytest.param(
            "5",
            2_000,
            {"arrival_cutoff_ms": 1_000, "taken_before": 99},
            "cutoff",
            id="cutoff-before-limit",
        ),
    ],
)
def test_a_record_stops_the_read_for_the_first_reason_that_applies(
    sequence_number: str, arrival_ms: int, read: dict, expected: str | None
) -> None:
    assert record_stop(sequence_number, arrival_ms, **{**_RECORD, **read}) == expected


@pytest.mark.parametrize(
    ("read", "expected"),
    [
        pytest.param({"bytes_before": 50, "size": 49}, None, id="under-the-budget"),
        pytest.param({"bytes_before": 50, "size": 50}, "bytes", id="reaches-the-budget"),
        pytest.param({"bytes_before": 50, "size": 51}, "over_bytes", id="would-pass-it"),
        pytest.param({"size": 500, "taken_before": 0}, "bytes", id="a-first-record-too-big"),
        pytest.param({"size": 500, "max_bytes": None}, None, id="no-byte-budget"),
        # The record limit is reached by a record the budget lets in; a record the budget
        # leaves out is not taken, whatever the limit says.
        pytest.param(
            {"bytes_before": 50, "size": 50, "taken_before": 9}, "limit", id="limit-and-bytes"
        ),
        pytest.param(
            {"bytes_before": 50, "size": 51, "taken_before": 9}, "over_bytes", id="over-first"
        ),
        # A replay ends at its end record, which its first read took within the budget.
        pytest.param({"bytes_before": 50, "size": 51, "end": 5}, "end_sequence", id="replay"),
    ],
)
def test_a_byte_budget_stops_the_read_at_whole_records(read: dict, expected: str | None) -> None:
    """Strict with one exception: the first record is always taken (progress), so a
    record larger than the whole budget is read alone."""
    args = {**_RECORD, "taken_before": 3, "max_records": 10, "max_bytes": 100, **read}
    stop = record_stop("5", 1_000, **args)
    assert stop == expected
    budgeted = args["max_bytes"] is not None and args["end"] is None
    if stop not in BEFORE_RECORD and budgeted and args["taken_before"] > 0:
        assert args["bytes_before"] + args["size"] <= args["max_bytes"]


def test_a_record_counts_its_data_and_partition_key_bytes() -> None:
    assert record_bytes({"Data": b"\x00" * 10, "PartitionKey": "clé"}) == 14


_PAGE = {
    "shard_ended": False,
    "gone": False,
    "read_whole_page": True,
    "may_be_tip": False,
    "millis_behind": 5_000,
    "resume_record_only": False,
}


@pytest.mark.parametrize(
    ("page", "expected"),
    [
        pytest.param({}, None, id="a-full-page-behind"),
        pytest.param({"may_be_tip": True}, None, id="a-short-page-still-behind"),
        pytest.param({"may_be_tip": True, "millis_behind": 0}, "caught_up", id="at-the-tip"),
        # A subscription event or a simulated answer may not say how far behind it is.
        pytest.param(
            {"may_be_tip": True, "millis_behind": None}, "caught_up", id="tip-without-lag"
        ),
        pytest.param({"millis_behind": 0}, None, id="a-full-page-at-zero-lag"),
        pytest.param(
            {"may_be_tip": True, "millis_behind": 0, "resume_record_only": True},
            None,
            id="only-the-resume-record-where-the-end-needs-an-empty-page",
        ),
        pytest.param({"shard_ended": True}, "shard_end", id="a-closed-shard-read-to-its-end"),
        pytest.param(
            {"shard_ended": True, "gone": True}, "shard_gone", id="a-shard-gone-from-the-stream"
        ),
        pytest.param(
            {"shard_ended": True, "read_whole_page": False},
            None,
            id="a-closed-shard-not-read-to-its-end",
        ),
        # A shard's end outranks the tip: both hold on a closed shard's last page.
        pytest.param(
            {"shard_ended": True, "may_be_tip": True, "millis_behind": 0},
            "shard_end",
            id="end-before-caught-up",
        ),
    ],
)
def test_a_page_stops_the_read_at_a_shard_end_or_the_tip(page: dict, expected: str | None) -> None:
    assert page_stop(**{**_PAGE, **page}) == expected
