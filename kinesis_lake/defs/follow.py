"""An ingestion run brings the downstream tables along after each raw commit.

An ingestion run keeps raw "in progress" until it ends (a lingering one,
``KINESIS_LAKE_RUN_LINGER_SECONDS``, for as long as records keep arriving and the linger
after), and Dagster's automation starts no derive run while an upstream asset is in
progress: the downstream tables used to wait for the whole run, its checks, the next
automation tick and a derive run's launch (minutes after a burst). Here the run's own step
follows raw instead, in a thread beside the streaming query:

* while the query starts, it warms the refresh up (``pipeline/warm_up.py``);
* after a raw commit it evaluates raw's blocking checks against that commit's
  materialization (the guarantee the automation's ``all_deps_blocking_checks_passed``
  gives), and only if they pass
* refreshes every downstream table (``refresh_downstream``, the same code a derive run
  runs), recording each table's materialization as its own commit lands;
* holding the ``kinesis_lake_derive`` pool's slot meanwhile, so it never refreshes beside a
  derive or replay step (it waits; ingestion does not);
* commits that land while a refresh runs are taken together by the next one;
* when the run ends: one last refresh if raw moved since, then every check of raw and of
  the downstream tables, once, against the materializations as they are then.

Check verdicts are recorded as runless evaluations naming the materialization they
checked (``check_verdicts.py``): each is then its own execution, timed when it was evaluated.
A refresh that fails is logged and left to the automation sensor, which requests a derive
run once raw is idle, as before.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import dagster as dg
from dagster._core.execution.plan.instance_concurrency_context import InstanceConcurrencyContext

from kinesis_lake.config import Settings
from kinesis_lake.defs.check_verdicts import evaluate_check, record_verdicts
from kinesis_lake.defs.raw_checks import raw_checks
from kinesis_lake.defs.streams import StreamKeys, stream_keys
from kinesis_lake.defs.table_checks import table_checks
from kinesis_lake.defs.tables import DERIVE_POOL, refresh_materialization
from kinesis_lake.events.declaration_file import load_declaration
from kinesis_lake.pipeline.lake import open_lake

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from kinesis_lake.pipeline.refresh import TableRefresh

CLAIM_POLL_S = 0.5


class DownstreamFollower:
    """The thread that follows an ingestion run's raw commits downstream (module docstring).

    ``raw_committed`` wakes it after each raw materialization; ``finish`` (once the query
    stopped) lets it catch up a last time, evaluate every check and end.
    """

    def __init__(
        self,
        context: dg.AssetExecutionContext,
        lake: Settings,
        keys: StreamKeys,
        session: SparkSession,
        resources: dict[str, Any],
    ) -> None:
        self._context, self._lake, self._keys = context, lake, keys
        self._session, self._resources = session, resources
        self._instance = context.instance
        declaration = load_declaration(lake.event_schema_path)
        ours = raw_checks(keys)
        self._blocking = [c for c in ours if any(s.blocking for s in c.check_specs)]
        self._others = [
            *(c for c in ours if c not in self._blocking),
            *table_checks(declaration, stream_keys(lake, declaration)),
        ]
        self._wake, self._done = threading.Event(), threading.Event()
        self._followed: int | None = None  # storage id of the raw materialization refreshed
        self._following = False
        from kinesis_lake.pipeline.session_thread import session_thread  # PySpark: in a step

        self._thread = session_thread(session, self._run, "downstream-follower")
        self._step_key = f"{keys.raw_table}:follow_downstream"

    def start(self) -> DownstreamFollower:
        self._thread.start()
        return self

    def raw_committed(self) -> None:
        self._wake.set()

    def busy(self) -> bool:
        """Whether a commit is waiting for it or it is still following one: the run is
        not idle, so its linger waits (a run that ends mid-refresh leaves it unfinished
        for a derive run that starts minutes later)."""
        return self._wake.is_set() or self._following

    def finish(self) -> None:
        """Catch up with raw's last commit, evaluate every check, and end."""
        self._done.set()
        self._wake.set()
        self._thread.join()

    def _run(self) -> None:
        self._guarded(self._warm_up)
        while True:
            self._wake.wait()
            self._following = True
            self._wake.clear()
            try:
                self._guarded(self._follow)
            finally:
                self._following = False
            if self._done.is_set() and not self._wake.is_set():
                break
        self._guarded(self._evaluate_all)

    def _guarded(self, work: Callable[[], None]) -> None:
        """Nothing here may end ingestion: a failure is logged, the run goes on."""
        try:
            work()
        except Exception:
            self._context.log.error(
                "Following raw downstream failed; the automation sensor refreshes the "
                f"downstream tables once raw is idle.\n{traceback.format_exc()}"
            )

    def _latest_raw(self) -> int | None:
        records = self._instance.fetch_materializations(self._keys.raw_asset, limit=1).records
        return records[0].storage_id if records else None

    def _follow(self) -> None:
        latest = self._latest_raw()
        if latest is None or latest == self._followed:
            return
        self._followed = latest
        # Recorded at once, so each is dated when it was evaluated. The automation cannot
        # take a passed one as its cue to derive meanwhile: raw is in progress until the
        # run ends (``derived_automation``), and by then this has followed raw's last commit.
        started = time.monotonic()
        verdicts = self._evaluate(self._blocking)
        self._record(verdicts)
        self._context.log.info(
            f"Following {self._keys.raw_table}'s commit downstream: its blocking checks took "
            f"{time.monotonic() - started:.1f} s"
        )
        self._follow_checked(verdicts)

    def _follow_checked(self, verdicts: list[dg.AssetCheckEvaluation]) -> None:
        if not all(v.passed for v in verdicts):
            failed = ", ".join(v.check_name for v in verdicts if not v.passed)
            self._context.log.warning(
                f"Blocking check {failed} of {self._keys.raw_table} failed: the downstream "
                "tables wait for a fix, as the automation makes them."
            )
            return
        with InstanceConcurrencyContext(self._instance, self._context.run) as pools:
            while not pools.claim(DERIVE_POOL, self._step_key):
                if self._done.is_set():  # the run is ending: do not hold it open
                    self._context.log.info(
                        f"Pool {DERIVE_POOL} is busy: the downstream tables are left to the "
                        "automation sensor."
                    )
                    return
                time.sleep(CLAIM_POLL_S)
            try:
                started = time.monotonic()
                self._refresh()
                self._context.log.info(
                    f"The downstream tables followed in {time.monotonic() - started:.1f} s"
                )
            finally:
                pools.free_step(self._step_key)

    def _warm_up(self) -> None:
        """Beside the query's start: the session's Python processes, before the first
        commit needs them (``pipeline/warm_up.py``)."""
        from kinesis_lake.pipeline.warm_up import warm_up  # PySpark: in a step only

        started = time.monotonic()
        if warm_up(self._session, self._lake):
            self._context.log.info(
                f"Warmed the downstream refresh up in {time.monotonic() - started:.1f} s"
            )

    def _refresh(self) -> None:
        from kinesis_lake.pipeline.derive import refresh_downstream  # PySpark: in a step only

        catalog = open_lake(self._lake)

        def report(name: str, refresh: TableRefresh, numbers: dict[str, int]) -> None:
            self._context.log_event(refresh_materialization(catalog, name, refresh, numbers))

        refresh_downstream(self._session, self._lake, on_commit=report)

    def _evaluate(
        self, checks: Sequence[dg.AssetChecksDefinition]
    ) -> list[dg.AssetCheckEvaluation]:
        return [evaluate_check(check, self._resources, self._instance) for check in checks]

    def _record(self, verdicts: list[dg.AssetCheckEvaluation]) -> None:
        record_verdicts(verdicts, self._instance)

    def _evaluate_all(self) -> None:
        if self._followed is None:
            return  # no commit in this run: nothing new to check
        self._record(self._evaluate(self._others))
