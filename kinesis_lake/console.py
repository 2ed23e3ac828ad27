"""Progress of long commands: a live bar in a terminal, one plain line per step otherwise.

``rich`` (a Dagster dependency already) draws the bar; when output is a pipe or a file
(CI, ``> log``) there are no control codes, just lines a person or a script can read.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from kinesis_lake.pipeline.ingest_report import BatchReport


class IngestProgress:
    """Records committed, their rate and the remaining lag (Kinesis' MillisBehindLatest),
    updated per micro-batch: a drain of a large backlog shows how far it has to go."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console()
        self.records = 0
        self._started = time.monotonic()
        self._bar: Progress | None = None
        self._task: TaskID | None = None

    def __enter__(self) -> IngestProgress:
        if self.console.is_terminal:
            self._bar = Progress(
                SpinnerColumn(),
                TextColumn("ingesting"),
                TextColumn("{task.completed:,} records"),
                TextColumn("{task.fields[rate]}"),
                TextColumn("lag {task.fields[lag]}"),
                TimeElapsedColumn(),
                console=self.console,
            )
            self._bar.start()
            self._task = self._bar.add_task("ingest", total=None, rate="", lag="?")
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self._bar is not None:
            self._bar.stop()

    def batch(self, report: BatchReport) -> None:
        self.records += report.rows
        rate = self.records / max(time.monotonic() - self._started, 1e-3)
        lag = f"{report.max_millis_behind_latest / 1000:,.1f} s"
        if self._bar is not None and self._task is not None:
            self._bar.update(
                self._task, completed=self.records, rate=f"{rate:,.0f} records/s", lag=lag
            )
        else:
            self.console.print(
                f"batch {report.batch_id}: {report.rows:,} records ({self.records:,} so far, "
                f"{rate:,.0f} records/s), remaining lag {lag}",
                highlight=False,
                soft_wrap=True,
            )


@contextmanager
def steps(description: str, total: int, console: Console | None = None) -> Iterator[Progress]:
    """A bar over ``total`` named steps (maintenance's tables); plain lines off a terminal
    (the caller prints one per step either way, through ``progress.console``)."""
    console = console or Console()
    progress = Progress(
        SpinnerColumn(),
        TextColumn(description),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        disable=not console.is_terminal,
    )
    with progress:
        yield progress
