"""The guarantees, checked against what the simulated stream was given.

Each check compares the real state (the Iceberg table, its committed positions, the
sensor's probe, the reports the code made) with the stream's own truth, which the
simulation knows exactly: every record put, when it arrived, and whether retention has
taken it. A violation is a :class:`Violation` with a short stable ``kind`` (what the
shrinker keeps constant while it shortens a schedule) and a detail for the report.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from kinesis_lake.kinesis.backlog import probe_backlog
from kinesis_lake_tests.simulation.kinesis import SimulatedKinesis

DUPLICATE = "duplicate"
POSITIONS_BACKWARDS = "positions-moved-backwards"
POSITIONS_BEHIND_DATA = "positions-behind-data"
SILENT_LOSS = "silent-loss"
SILENT_LOSS_FIRST_READ = "silent-loss-before-first-record"
SILENT_LOSS_BLIND_START = "silent-loss-read-past-by-a-start-knowing-nothing"
FALSE_LOSS = "false-loss"
FALSE_LOSS_REPLAY = "false-loss-in-a-replay"
MISSED_BACKLOG = "sensor-missed-backlog"
PHANTOM_BACKLOG = "sensor-phantom-backlog"
STUCK = "ingestion-stuck"
STUCK_REPLAY = "ingestion-stuck-replaying-a-range-gone"
UNEXPECTED = "unexpected-exception"
RUN_NEVER_ENDS = "available-now-run-never-ends"
LEFT_BEHIND = "available-now-left-records-behind"


class Violation(AssertionError):
    """A guarantee that did not hold; ``kind`` names which."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail


def lost_unread(
    kinesis: SimulatedKinesis, in_table: set[tuple[str, str]], started_ms: int | None
) -> dict[str, list[int]]:
    """Shard -> sequence numbers that left retention without reaching the table, of the
    records that arrived once ingestion had started (what expired before is no one's)."""
    horizon = kinesis.now_ms() - kinesis.retention_ms
    lost: dict[str, list[int]] = {}
    if started_ms is None:
        return lost
    for shard in kinesis.shards.values():
        for record in shard.records:
            key = (shard.shard_id, str(record.sequence_number))
            if started_ms <= record.arrival_ms <= horizon and key not in in_table:
                lost.setdefault(shard.shard_id, []).append(record.sequence_number)
    return lost


def check_table(
    rows: Counter[tuple[str, str, int]],
    positions: Mapping[str, str],
    highest_positions: Mapping[str, int],
) -> None:
    """No row twice; positions never lower than before and never below a row's."""
    twice = [key for key, count in rows.items() if count > 1]
    if twice:
        raise Violation(DUPLICATE, f"{len(twice)} row(s) twice, e.g. {sorted(twice)[:3]}")
    for shard, highest in highest_positions.items():
        now = positions.get(shard)
        if now is None or int(now) < highest:
            raise Violation(
                POSITIONS_BACKWARDS,
                f"shard {shard}: committed position {now} after {highest} was committed",
            )
    for shard, sequence, _sub in rows:
        if shard not in positions or int(sequence) > int(positions[shard]):
            raise Violation(
                POSITIONS_BEHIND_DATA,
                f"row {shard}/{sequence} is in the table past its committed position "
                f"{positions.get(shard)}",
            )


def check_loss_reported(
    lost: Mapping[str, list[int]],
    positions: Mapping[str, str],
    reported: set[str],
    in_table: set[tuple[str, str]],
    kinesis: SimulatedKinesis | None = None,
    blind_first: set[str] | None = None,
) -> None:
    """A record that expired unread, once ingestion moved past it, was reported.

    Ingestion moves past a shard gone from the stream (``kinesis``: closed and past
    retention) once a child of it has a committed position: children are read only
    after their parents, and a gone shard's committed position never moves past its
    lost records, so without this its loss could go unreported unseen.

    A loss before the first record ever read from its shard (a read that started at the
    trim horizon) is told apart as its own kind: the two have different causes. So is
    such a loss on a shard in ``blind_first``, whose first committed position a query
    wrote that started with neither a checkpoint nor the deployment's progress records
    (a known limit: nothing it can read tells it the shard was read before).
    """
    left_behind = _gone_and_left_behind(kinesis, positions) if kinesis is not None else set()
    for shard, sequences in sorted(lost.items()):
        position = positions.get(shard)
        if shard in reported or (position is None and shard not in left_behind):
            continue
        if shard in left_behind:
            passed = list(sequences)
            position = f"its children ({shard} is gone from the stream)"
        else:
            passed = [s for s in sequences if s < int(str(position))]
        if passed:
            read_before = any(
                table_shard == shard and int(sequence) < passed[0]
                for table_shard, sequence in in_table
            )
            kind = SILENT_LOSS if read_before else SILENT_LOSS_FIRST_READ
            if kind == SILENT_LOSS_FIRST_READ and shard in (blind_first or set()):
                kind = SILENT_LOSS_BLIND_START
            raise Violation(
                kind,
                f"shard {shard}: {len(passed)} record(s) expired unread (first {passed[0]}) and "
                f"ingestion moved past them to {position} without reporting a loss",
            )


def _gone_and_left_behind(kinesis: SimulatedKinesis, positions: Mapping[str, str]) -> set[str]:
    """Shards no longer in the stream one of whose children has a committed position."""
    children: dict[str, set[str]] = {}
    for shard in kinesis.shards.values():
        for parent in (shard.parent, shard.adjacent_parent):
            if parent is not None:
                children.setdefault(parent, set()).add(shard.shard_id)
    return {
        shard.shard_id
        for shard in kinesis.shards.values()
        if not kinesis.listed(shard) and children.get(shard.shard_id, set()) & set(positions)
    }


def check_loss_report(
    shard: str, lost: Mapping[str, list[int]], detail: str, *, replay: bool = False
) -> None:
    """A loss reported for ``shard`` is real: some record of it expired unread. One a
    replayed batch reports is told apart as its own kind (a cause of its own)."""
    if not lost.get(shard):
        kind = FALSE_LOSS_REPLAY if replay else FALSE_LOSS
        raise Violation(kind, f"shard {shard}: loss reported, none happened: {detail}")


def check_sensor(
    kinesis: SimulatedKinesis, positions: Mapping[str, str], in_table: set[tuple[str, str]]
) -> bool:
    """The backlog probe sees a backlog exactly when the stream holds unconsumed records."""
    with kinesis.faults_suspended():
        probe = probe_backlog(kinesis, kinesis.stream_name, positions)
    expected = sorted(
        shard.shard_id
        for shard in kinesis.shards.values()
        if kinesis.listed(shard)
        and any(
            (shard.shard_id, str(r.sequence_number)) not in in_table
            and (
                shard.shard_id not in positions
                or r.sequence_number > int(positions[shard.shard_id])
            )
            for r in kinesis.retained(shard)
        )
    )
    if expected and not probe.has_backlog:
        raise Violation(MISSED_BACKLOG, f"shards {expected} hold unconsumed records")
    if not expected and probe.has_backlog:
        raise Violation(
            PHANTOM_BACKLOG, f"probe found a backlog on {probe.shards_with_backlog}, none exists"
        )
    return probe.has_backlog


def check_drained(
    kinesis: SimulatedKinesis, in_table: set[tuple[str, str]], cutoff_ms: int
) -> None:
    """An availableNow run that ended by itself read every record that arrived before it
    started and is still retained (parents and children alike)."""
    left = sorted(
        (shard.shard_id, r.sequence_number)
        for shard in kinesis.shards.values()
        if kinesis.listed(shard)
        for r in kinesis.retained(shard)
        if r.arrival_ms <= cutoff_ms and (shard.shard_id, str(r.sequence_number)) not in in_table
    )
    if left:
        raise Violation(
            LEFT_BEHIND,
            f"the run ended with {len(left)} record(s) from before its start unread, "
            f"e.g. {left[:3]}",
        )
