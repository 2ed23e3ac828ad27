"""One simulated deployment: a stream, a lake, the ingestion queries and an operator.

A schedule is a list of steps (plain tuples, so a failure prints a replay that can be
pasted into a regression test). :meth:`World.step` applies one; :meth:`World.check`
verifies every invariant afterwards. Steps are written so that any sub-list of a schedule
is a valid schedule (arguments are resolved against the state at the time, an index
modulo the open shards, an action without its precondition a no-op): that is what lets
the shrinker drop steps freely.

The operator follows the runbook: a query that died is restarted from its checkpoint; a
data-loss error is acknowledged by running once with ``failOnDataLoss=false``; a query
refused for overlapping the table has its checkpoint deleted, as the message says.
"""

from __future__ import annotations

import re
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kinesis_lake.iceberg.maintenance import compact, expire_snapshots
from kinesis_lake.iceberg.summary import committed_positions
from kinesis_lake.kinesis.backlog import BacklogProbe, probe_backlog
from kinesis_lake.kinesis.kpl import aggregate
from kinesis_lake.pipeline.earlier_reads import record_earlier_reads
from kinesis_lake.pipeline.ingest_query import source_metadata_path
from kinesis_lake.spark.iceberg.writer import OverlappingPositionsError
from kinesis_lake.spark.kinesis.offsets import SourcePlanningError
from kinesis_lake.spark.kinesis.progress import ShardProgressStore
from kinesis_lake.spark.kinesis.read_task import DataLossError
from kinesis_lake_tests.ambiguous_catalog import LANDS_THEN_RAISES, RAISES_BEFORE
from kinesis_lake_tests.lake_settings import make_settings
from kinesis_lake_tests.simulation import invariants
from kinesis_lake_tests.simulation.driver import VIRTUAL_READ_START, Checkpoint, Crash, Query
from kinesis_lake_tests.simulation.kinesis import GRANT, SimulatedKinesis
from kinesis_lake_tests.simulation.lake import Lake, interleaved, lake_environment

try:
    from kinesis_lake_tests.ambiguous_catalog import LANDS_LATE, apply_late_commits
except ImportError:  # the harness of code before 912ed94
    LANDS_LATE, apply_late_commits = None, None  # type: ignore[assignment]
try:
    from kinesis_lake.pipeline.data_loss import quiet_proof
except ImportError:  # code before b085792: the sensor ran on a backlog only
    quiet_proof = None  # type: ignore[assignment]

Step = tuple[Any, ...]
START_MS = 1_800_000_000_000
TRIGGER_MS = 1_000
MAX_BATCHES_PER_RUN = 12
SENSOR_EVERY_MS = 3_600_000
_INJECTED = ("injected:", "ProvisionedThroughputExceededException", "ExpiredIteratorException")
"""Failures a fault of the schedule explains (catalog faults, throttling, expiry)."""
_SHARD_IN_MESSAGE = re.compile(r"shard (shardId-\d+)", re.IGNORECASE)


class World:
    """State of one schedule; every step runs the real code against simulated AWS."""

    def __init__(self, root: Path, fault_file: Path, *, shards: int, trimmed_position: str):
        self.clock_ms = START_MS
        self.root = root
        self.kinesis = SimulatedKinesis(
            self.now_ms, shards=shards, trimmed_position=trimmed_position
        )
        self.lake = Lake(root, fault_file)
        # The deployment's settings, for what the real code derives from them (where the
        # source's progress lives, which the sensor reads).
        self.settings = make_settings(
            root / "data",
            self.kinesis.meta.endpoint_url,
            stream_name=self.kinesis.stream_name,
            raw_table_name="raw",
            source_progress_dir=str(root / "progress"),
        )
        self.checkpoints: dict[str, Checkpoint | None] = {"main": None, "second": None}
        self.queries: dict[str, Query | None] = {"main": None, "second": None}
        self.progress_dirs: dict[str, Path] = {}
        """Each query's source metadataPath, as its last run used it."""
        self.saved: Checkpoint | None = None
        self.active = {"main"}
        self.unobserved = False
        self.dark_ms = 0
        """Time since a sensor tick or a batch last ran, counted by outages."""
        self.blind: set[str] = set()
        self.blind_until_read = False
        self.last_rows = 0
        """Shards a checkpoint-less start cannot prove quiet (see _aged_out_positions)."""
        self.started_ms: int | None = None
        """When ingestion first started: what expired before is nobody's loss."""
        self.knowing_nothing: set[str] = set()
        """Queries started with neither a checkpoint nor a read to the tip in their
        progress folder (a second machine's; the main one's after its first batch failed
        before any read), and the shards whose first committed position one wrote."""
        self.first_read_knowing_nothing: set[str] = set()
        self.acknowledge: set[str] = set()
        self.reported: set[str] = set()
        self.highest: dict[str, int] = {}
        self.failures: dict[str, tuple[str, int]] = {}
        self.down_since_ms: int | None = None
        """When the main query's last batch failed (None once one succeeds): ingestion
        is down until the next run, as in an outage (see _aged_out_while_down)."""
        self.faults: Counter[str] = Counter()
        self.pending_faults = 0
        self.steps = 0

    def now_ms(self) -> int:
        return self.clock_ms

    # ------------------------------------------------------------------ steps

    def step(self, step: Step) -> None:
        kind, *args = step
        getattr(self, f"_step_{kind}")(*args)
        self.steps += 1

    def _step_put(self, shard_index: int, count: int, aggregated: bool = False) -> None:
        shard = self._open_shard(shard_index)
        for n in range(count):
            key = f"pk-{self.clock_ms % 97}-{n}"
            data = b'{"n": %d}' % n
            if aggregated:
                data = aggregate([(key, data), (key + "b", data)])
            self.kinesis.put(shard, key, data)
            self.clock_ms += 1

    def _step_advance(self, ms: int) -> None:
        """Time passes with the deployment up: the backlog sensor ticks throughout (every
        ``SENSOR_EVERY_MS`` here, every 30 s in a real one: what matters is that ticks
        are short next to retention and to the sensor's quiet-run interval)."""
        end = self.clock_ms + ms
        while self.clock_ms + SENSOR_EVERY_MS < end:
            self.clock_ms += SENSOR_EVERY_MS
            self._sensor_tick()
        self.clock_ms = end

    def _step_outage(self, ms: int) -> None:
        """Time passes with nothing running: no sensor, no query. The sensor proves a
        quiet stream quiet every quarter of retention (pipeline/data_loss.py), so an
        outage longer than the rest of retention (less two ticks) leaves a gap nothing
        observed: a loss reported for it cannot be told from a quiet shard, and is not
        counted as false. Outages in a row add up (seed 40156: 12.8 h, then 14.7 h)."""
        self.clock_ms += ms
        self.faults["outage"] += 1
        self.dark_ms += ms
        retention = self.kinesis.retention_ms
        if self.dark_ms >= retention - retention // 4 - 2 * SENSOR_EVERY_MS:
            self.unobserved = True

    def _step_split(self, shard_index: int) -> None:
        self.kinesis.split(self._open_shard(shard_index))
        self.faults["split"] += 1

    def _step_merge(self, shard_index: int) -> None:
        open_shards = self.kinesis.open_shards()
        if len(open_shards) < 2:
            return
        first = shard_index % len(open_shards)
        self.kinesis.merge(open_shards[first], open_shards[(first + 1) % len(open_shards)])
        self.faults["merge"] += 1

    def _step_throttle(self, shard_index: int, calls: int) -> None:
        self.kinesis.throttle(self._open_shard(shard_index), calls)
        self.faults["throttle"] += calls

    def _step_expire_iterators(self, after_calls: int) -> None:
        self.kinesis.expire_iterators(after_calls)
        self.faults["iterator-expiry"] += 1

    def _step_lagging_pages(self, pages: int) -> None:
        self.kinesis.lag_with_empty_pages(pages)
        self.faults["empty-page-behind"] += pages

    def _step_catalog_fault(self, lands: bool, error: str) -> None:
        self.lake.arm(LANDS_THEN_RAISES if lands else RAISES_BEFORE, error)
        self.faults[f"commit-{'lands-then-raises' if lands else 'raises-before'}"] += 1

    def _step_late_commit(self, error: str) -> None:
        """The next commit raises and the catalog applies it later (a REST server still
        processing it, a Glue update after the client gave up): at the next commit of the
        table, or at ``late_commits_land``. A no-op on code whose harness lacks it."""
        if LANDS_LATE is None:
            return
        self.lake.arm(LANDS_LATE, error)
        self.faults["commit-lands-late"] += 1

    def _step_late_commits_land(self) -> None:
        if apply_late_commits is not None:
            self.faults["late-commit-applied"] += sum(self.lake.apply_late_commits())

    def _step_run(self, who: str, batches: int, crash_at: str | None = None) -> None:
        """A lingering run: up to ``batches`` micro-batches, one trigger apart."""
        for index in range(batches):
            self.clock_ms += TRIGGER_MS
            last = index == batches - 1
            if not self._batch(who, crash_at if last else None):
                break
        self._record_reads(who)

    def _record_reads(self, who: str) -> None:
        """What pipeline/ingest.py does as a run ends, failed or not (and every few
        minutes of a long one): keep what the run's source read in the table, for a start
        knowing nothing else."""
        progress = self.progress_dirs.get(who)
        if progress is None:
            return
        try:
            record_earlier_reads(self.lake.table(), ShardProgressStore(str(progress)))
        except Exception as error:  # the run stands, as in the pipeline
            self.faults[f"record-reads-failed-{type(error).__name__}"] += 1

    def _step_sensor(self) -> None:
        self._sensor_tick()

    def _sensor_tick(self) -> None:
        """A sensor tick: probe; with a backlog, a run until the source has nothing new."""
        self.dark_ms = 0
        positions = committed_positions(self.lake.table())
        with self.kinesis.faults_suspended():
            probe = probe_backlog(self.kinesis, self.kinesis.stream_name, positions)
        if not probe.has_backlog and not self._quiet_proof_due(positions, probe):
            return
        self.faults["sensor-run" if probe.has_backlog else "sensor-quiet-run"] += 1
        # A Dagster run is a new process running a bounded availableNow query.
        self.queries["main"] = None
        query = self._ensure_query("main", available_now=VIRTUAL_READ_START)
        assert query is not None
        for _ in range(MAX_BATCHES_PER_RUN):
            self.clock_ms += TRIGGER_MS
            if not self._batch("main", None) or self.queries["main"] is not query:
                break  # nothing left, failed, or the acknowledged run's one batch done
            if query.cutoff_ms is None and not self.last_rows:
                break  # a lingering run (older code, see VIRTUAL_READ_START) found it idle
        else:
            raise invariants.Violation(
                invariants.RUN_NEVER_ENDS,
                f"an availableNow run still planned batches after {MAX_BATCHES_PER_RUN}",
            )
        self._record_reads("main")
        if self.queries["main"] is query and query.cutoff_ms is not None:  # nothing left
            in_table = self._in_table(self.lake.rows())
            invariants.check_drained(self.kinesis, in_table, query.cutoff_ms)
        self.queries["main"] = None

    def _quiet_proof_due(self, positions: dict[str, str], probe: BacklogProbe) -> bool:
        """The sensor's other reason to run (defs/sensors.py, since b085792): the last
        read of the shards to their tip grows old. Code without it runs on backlog only."""
        if quiet_proof is None:
            return False
        server_now = getattr(probe, "server_ms", None) or self.clock_ms
        return quiet_proof(self.settings, positions).due(server_now, probe.retention_hours)

    def _step_save_checkpoint(self) -> None:
        checkpoint = self.checkpoints["main"]
        self.saved = checkpoint.copy() if checkpoint is not None else None

    def _step_second_writer(self, from_saved: bool) -> None:
        """Start a second query on the same table: an old machine coming back with its
        saved checkpoint, or a replacement started without one."""
        if "second" in self.active:
            return
        self.active.add("second")
        self.checkpoints["second"] = self.saved.copy() if from_saved and self.saved else None
        self.queries["second"] = None
        self.faults["second-writer"] += 1
        self._ensure_query("second")

    def _step_stop_second(self) -> None:
        self.active.discard("second")
        self.checkpoints["second"] = None
        self.queries["second"] = None

    def _step_race(self, outer: str, inner: str, puts: int = 0) -> None:
        """``outer``'s next batch commits with a batch of ``inner`` landing inside its
        commit, after ``outer`` read its records and loaded the table: two writers at the
        same moment. ``puts`` records arrive on the first open shard in between, so
        ``inner`` reads what ``outer`` did not."""
        if inner not in self.active or outer not in self.active:
            return
        self.faults["race"] += 1
        self.clock_ms += TRIGGER_MS

        def other_writer() -> None:
            self._step_put(0, puts)
            self.clock_ms += TRIGGER_MS
            self._batch(inner, None)

        with interleaved(other_writer):
            self._batch(outer, None)

    def _step_lose_checkpoint(self) -> None:
        self.checkpoints["main"] = None
        self.queries["main"] = None
        self.faults["checkpoint-lost"] += 1

    def _step_maintenance(self, expire: bool) -> None:
        """The maintenance job; when its commit fails (an armed catalog fault), the job
        fails and the next schedule runs it again: the tables must not care."""
        table = self.lake.table()
        kind = "snapshot-expiry" if expire else "compaction"
        self.faults[kind] += 1
        try:
            if expire:
                current = table.current_snapshot()
                if current is not None:
                    expire_snapshots(table, older_than_ms=current.timestamp_ms + 1, retain_last=1)
            else:
                compact(table, target_file_size_bytes=64 * 1024 * 1024)
        except Exception as error:
            self.faults[f"{kind}-failed-{type(error).__name__}"] += 1

    # ------------------------------------------------------------------ batches

    def _batch(self, who: str, crash_at: str | None) -> bool:
        """Run one batch of ``who``; False when the query stopped (idle, died, refused)."""
        query = self._ensure_query(who)
        if query is None:
            return False
        self.dark_ms = 0
        if self.started_ms is None:
            # Ingestion starts with a query's first batch, where Spark asks the source for
            # its initial offset (at once on a real start): a second writer started by a
            # step of its own only gets there at its first run (seed 30023).
            self.started_ms = self.clock_ms
        before = (
            set(committed_positions(self.lake.table())) if who in self.knowing_nothing else None
        )
        try:
            result = query.run_batch(crash_at)
        except Crash as crash:
            self._take_reports(who, query)
            self._went_down(who)
            self.faults[f"crash-{crash}"] += 1
            self.queries[who] = None
            return False
        except (DataLossError, SourcePlanningError) as error:
            self._take_reports(who, query)
            self._loss_reported(who, str(error), replay=query.replaying)
            self.queries[who] = None
            self.acknowledge.add(who)
            self._failed(who, error)
            return False
        except OverlappingPositionsError:
            self._take_reports(who, query)
            self.faults["refused-overlap"] += 1
            self.checkpoints[who] = None  # the runbook: delete the refused checkpoint
            self.queries[who] = None
            return False
        except Exception as error:
            self._take_reports(who, query)
            self._went_down(who)
            self.faults[f"failed-{type(error).__name__}"] += 1
            self.queries[who] = None
            self._failed(who, error)
            return False
        finally:
            if before is not None:  # a commit that landed and then raised counts too
                first = set(committed_positions(self.lake.table())) - before
                self.first_read_knowing_nothing |= first
        self.failures.pop(who, None)
        self._take_reports(who, query)
        if who == "main" and not result.replay:
            self.down_since_ms = None  # a replay only redoes the failed batch
        self.last_rows = result.rows
        if who == "main" and result.batch_id is not None:
            # A shard its checkpoint has read to the tip since is proven quiet or not;
            # one still waiting (a child behind its parent) is not (seed 50548).
            self.blind -= self._read_to_tip(who)
            self.blind_until_read = bool(self._without_tip(who))
        if query.options.fail_on_data_loss is False:
            self.acknowledge.discard(who)
            self.queries[who] = None  # the acknowledged run ends; the next is normal
        return result.batch_id is not None

    def _ensure_query(self, who: str, *, available_now: bool = False) -> Query | None:
        if who not in self.active:
            return None
        if self.queries[who] is None:
            if who == "main" and self.checkpoints[who] is None:
                self.blind_until_read = True
            if who == "main" and self.blind_until_read:
                # Until a batch of it succeeds, each restart of the checkpoint-less query
                # (the acknowledged run, a replay) finds more committed records aged out,
                # with no read to the tip on record either (seed 50257).
                self.blind |= self._aged_out_positions() - self._read_to_tip(who)
            progress = self._progress(who)
            if self.checkpoints[who] is None and _knows_nothing(progress):
                self.knowing_nothing.add(who)
            else:
                self.knowing_nothing.discard(who)
            query = Query(
                self.kinesis,
                self.lake,
                self.checkpoints[who],
                progress=progress,
                now_ms=self.now_ms,
                fail_on_data_loss=who not in self.acknowledge,
                available_now=available_now,
            )
            self.checkpoints[who] = query.checkpoint
            self.queries[who] = query
            self.progress_dirs[who] = query.checkpoint.progress
        return self.queries[who]

    def _read_to_tip(self, who: str) -> set[str]:
        """Shards the checkpoint of ``who`` has a read to the tip of (in its last plan)."""
        checkpoint = self.checkpoints[who]
        if checkpoint is None:
            return set()
        last = checkpoint.offsets[-1] if checkpoint.offsets else checkpoint.initial
        shards = (last or {}).get("shards", {})
        return {shard_id for shard_id, cursor in shards.items() if cursor.get("tipMs")}

    def _without_tip(self, who: str) -> set[str]:
        """Shards with a committed position that the last plan of ``who`` still reads
        with no read to the tip on record."""
        checkpoint = self.checkpoints[who]
        last = checkpoint.offsets[-1] if checkpoint and checkpoint.offsets else None
        planned = set((last or {}).get("shards", {}))
        positions = set(committed_positions(self.lake.table()))
        return (planned & positions) - self._read_to_tip(who)

    def _aged_out_positions(self) -> set[str]:
        """Shards whose committed record is past retention: a query started without a
        checkpoint has no read to the tip of them on record, so it cannot tell a quiet
        shard from a loss there and reports a possible one (the README's stated limit)."""
        horizon = self.clock_ms - self.kinesis.retention_ms
        blind = set()
        for shard_id, sequence in committed_positions(self.lake.table()).items():
            shard = self.kinesis.shards.get(shard_id)
            records = shard.records if shard is not None else []
            arrivals = [r.arrival_ms for r in records if str(r.sequence_number) == sequence]
            if not arrivals or arrivals[0] <= horizon:
                blind.add(shard_id)
        return blind

    def _progress(self, who: str) -> Path:
        """The source's metadataPath: the deployment's (``source_metadata_path``) for the
        main query, whatever its checkpoint; a folder of its own for a second machine."""
        if who == "main":
            return Path(source_metadata_path(self.settings))
        return self.root / "progress-second" / uuid.uuid4().hex

    def _take_reports(self, who: str, query: Query) -> None:
        for shard, detail in query.reported_loss.items():
            self._loss_reported(who, f"shard {shard}: {detail}", replay=query.replaying)
        query.reported_loss.clear()

    def _loss_reported(self, who: str, message: str, *, replay: bool = False) -> None:
        found = _SHARD_IN_MESSAGE.search(message)
        shard = found.group(1) if found else "?"
        self.faults["loss-reported"] += 1
        if (
            who == "main"
            and not self.unobserved
            and shard not in self.blind
            and not self._aged_out_while_down(shard)
        ):
            invariants.check_loss_report(shard, self._lost(), message, replay=replay)
        self.reported.add(shard)

    def _went_down(self, who: str) -> None:
        if who == "main" and self.down_since_ms is None:
            self.down_since_ms = self.clock_ms

    def _aged_out_while_down(self, shard_id: str) -> bool:
        """Whether ``shard_id`` left the listing unread while the main query was down
        after a failed batch (seed 130584). Kinesis lists no record count, so a closed
        shard gone before its first read may have held records that were still retained
        when the query failed: the code reports a possible loss, as after an outage, and
        cannot tell an empty shard from a full one."""
        shard = self.kinesis.shards.get(shard_id)
        if shard is None or shard.closed_ms is None or self.down_since_ms is None:
            return False
        left_listing_ms = shard.closed_ms + self.kinesis.retention_ms
        return self.down_since_ms <= left_listing_ms <= self.clock_ms

    def _failed(self, who: str, error: Exception) -> None:
        """Three failures in a row of one kind, with no fault left to explain them."""
        if any(cause in str(error) for cause in _INJECTED):
            self.failures.pop(who, None)  # explained by a fault the schedule armed
            return
        name = type(error).__name__
        previous, count = self.failures.get(who, ("", 0))
        count = count + 1 if previous == name else 1
        self.failures[who] = (name, count)
        if count >= 3 and not isinstance(error, DataLossError):
            kind = invariants.STUCK
            if "cannot be reproduced" in str(error):
                kind = invariants.STUCK_REPLAY  # a cause of its own, told apart
            raise invariants.Violation(kind, f"{who} query fails again: {error}")

    # ------------------------------------------------------------------ invariants

    def _in_table(self, rows: Counter[tuple[str, str, int]]) -> set[tuple[str, str]]:
        return {(shard, sequence) for shard, sequence, _ in rows}

    def _lost(self) -> dict[str, list[int]]:
        return invariants.lost_unread(
            self.kinesis, self._in_table(self.lake.rows()), self.started_ms
        )

    def check(self) -> None:
        rows = self.lake.rows()
        positions = committed_positions(self.lake.table())
        invariants.check_table(rows, positions, self.highest)
        for shard, sequence in positions.items():
            self.highest[shard] = max(self.highest.get(shard, 0), int(sequence))
        in_table = self._in_table(rows)
        invariants.check_loss_reported(
            invariants.lost_unread(self.kinesis, in_table, self.started_ms),
            positions,
            self.reported,
            in_table,
            self.kinesis,
            self.first_read_knowing_nothing,
        )
        invariants.check_sensor(self.kinesis, positions, in_table)

    def _open_shard(self, index: int) -> str:
        open_shards = self.kinesis.open_shards()
        return open_shards[index % len(open_shards)]


def _knows_nothing(progress: Path) -> bool:
    """Whether a source's progress folder holds no read to the tip: no status, and no
    empty read of a first batch that failed (what a start without checkpoint takes)."""
    store = ShardProgressStore(str(progress))
    return store.latest_status() is None and store.unpublished_status() is None


@contextmanager
def world(root: Path, *, shards: int = 2, trimmed_position: str = GRANT) -> Iterator[World]:
    with lake_environment(root) as fault_file:
        yield World(root, fault_file, shards=shards, trimmed_position=trimmed_position)


def run_schedule(
    root: Path,
    steps: list[Step],
    *,
    shards: int = 2,
    trimmed_position: str = GRANT,
    on_step: Callable[[World], None] | None = None,
) -> World:
    """Apply ``steps`` in a fresh world under ``root``, checking after each; raises the
    first :class:`~kinesis_lake_tests.simulation.invariants.Violation`."""
    with world(root, shards=shards, trimmed_position=trimmed_position) as state:
        for index, step in enumerate(steps):
            try:
                state.step(step)
                state.check()
            except invariants.Violation as violation:
                raise invariants.Violation(
                    violation.kind, f"step {index} {step!r}: {violation.detail}"
                ) from violation
            except Exception as error:
                # Nothing the operator runs may raise past the runbook: a bug of the code
                # under test or of this harness, reported with its seed like the rest.
                raise invariants.Violation(
                    invariants.UNEXPECTED,
                    f"step {index} {step!r}: {type(error).__name__}: {error}",
                ) from error
            if on_step is not None:
                on_step(state)
        return state
