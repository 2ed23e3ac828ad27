"""Progress output: a live bar in a terminal, plain lines (no control codes) elsewhere."""

from __future__ import annotations

import io

from rich.console import Console

from kinesis_lake.console import IngestProgress, steps
from kinesis_lake.pipeline.ingest_report import BatchReport


def _batch(batch_id: int, rows: int, lag_ms: int) -> BatchReport:
    return BatchReport(batch_id, rows, 0.1, rows, None, lag_ms, 0)


def _run(console: Console) -> str:
    with IngestProgress(console) as progress:
        progress.batch(_batch(0, 1500, 90_000))
        progress.batch(_batch(1, 500, 0))
    with steps("maintaining", 2, console) as bar:
        task = bar.add_task("maintain", total=2)
        for table in ("raw", "events"):
            bar.console.print(f"{table}: done", highlight=False)
            bar.advance(task)
    assert isinstance(console.file, io.StringIO)
    return console.file.getvalue()


def test_off_a_terminal_each_batch_is_one_plain_line() -> None:
    out = _run(Console(file=io.StringIO(), force_terminal=False, width=200))
    assert "\x1b[" not in out
    lines = out.splitlines()
    assert lines[0].startswith("batch 0: 1,500 records (1,500 so far,")
    assert lines[0].endswith("remaining lag 90.0 s")
    assert lines[1].startswith("batch 1: 500 records (2,000 so far,")
    assert lines[2:] == ["raw: done", "events: done"]


def test_in_a_terminal_the_bar_shows_records_and_lag() -> None:
    out = _run(Console(file=io.StringIO(), force_terminal=True, width=200))
    assert "\x1b[" in out
    assert "2,000 records" in out and "lag 0.0 s" in out
    assert "2/2" in out
