"""A SQL catalog that fails commits on demand, ambiguously or cleanly.

What it models: in production the client does not always learn what happened to a
commit. A REST catalog answers ``CommitStateUnknownException`` after a gateway timeout, a
Postgres connection drops while ``COMMIT`` is on the wire, a Glue call times out after
the update went through, a stop interrupts the driver between the catalog's answer and
the caller. In all of these the commit HAS LANDED and the caller sees an exception.
SQLite and kinesalite never do that, so no test of ours could see code that treats "an
exception" as "nothing was committed" (for example by deleting the batch's files).

Faults, taken in order, one per commit (of any table, or of the named table):

* ``LANDS_THEN_RAISES``: the commit is applied by the real SQL catalog, then the call
  raises (``error``: ``unknown`` -> ``CommitStateUnknownException``, ``conflict`` ->
  ``CommitFailedException``, the lie a retrying client can hear when its first attempt's
  answer is lost, ``generic`` -> ``ConnectionError``).
* ``RAISES_BEFORE``: the call raises and nothing is applied (the clean failure every
  catalog can produce).
* ``LANDS_LATE``: the call raises and the commit is NOT applied yet: the catalog is still
  processing it (a REST server behind a gateway that timed out, a Glue ``UpdateTable``
  that goes through after the client gave up, a Postgres backend finishing ``COMMIT``
  after the connection dropped). The request is kept in the fault file and applied,
  requirements checked against the table as it is THEN, by :func:`apply_late_commits`
  or at the start of the next commit of the same table, whichever comes first (armed
  with ``at_next_commit=False``: only by :func:`apply_late_commits`, so the commits that
  follow land before it, as they can on a server still busy with it). Whatever
  the client reads in between (an abort's reload) shows the table without it. What it
  does not model: reads that lag writes the client saw succeed (stale reads).
* ``RACED``: another writer gets in first: ``call`` (``"module:function"``, given
  ``argument``) runs inside the commit, after the caller staged it and before it is
  applied, then the commit goes on normally. It carries a maintenance pass into the
  commit processes Spark starts itself, where :func:`pause_commits` cannot reach.

Arming works across processes: faults live in a JSON file named by the catalog property
``kinesis-lake.fault-file``, read and consumed under a file lock on every commit. A test
arms it with :func:`arm` while Spark's driver (the same process in local mode) commits;
the soak script arms it for its ingestion subprocesses the same way. Use the catalog by
exporting :func:`catalog_environment` (pyiceberg loads it through ``py-catalog-impl``).

:func:`pause_commits` is for in-process tests that must interleave two writers: the hook
runs inside ``commit_table`` before the commit is applied, after the caller loaded its
table and staged its transaction.
"""

from __future__ import annotations

import fcntl
import importlib
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException
from pyiceberg.table import CommitTableRequest, CommitTableResponse, Table, TableIdentifier
from pyiceberg.table.update import TableRequirement, TableUpdate

from kinesis_lake.iceberg.catalog import local_catalog_properties
from kinesis_lake.iceberg.defaults import DEFAULT_CATALOG_NAME

FAULT_FILE_PROPERTY = "kinesis-lake.fault-file"
LANDS_THEN_RAISES = "lands-then-raises"
RAISES_BEFORE = "raises-before"
LANDS_LATE = "lands-late"
RACED = "raced"
_HELD = "held"  # a LANDS_LATE commit the catalog has not applied yet
_ERRORS: dict[str, Callable[[str], Exception]] = {
    "unknown": CommitStateUnknownException,
    "conflict": CommitFailedException,
    "generic": ConnectionError,
}

_hooks: list[Callable[[str], None]] = []
_hooks_lock = threading.Lock()


class AmbiguousCatalog(SqlCatalog):
    """``SqlCatalog`` whose ``commit_table`` obeys the faults armed in its fault file."""

    def commit_table(
        self,
        table: Table,
        requirements: tuple[TableRequirement, ...],
        updates: tuple[TableUpdate, ...],
    ) -> CommitTableResponse:
        name = ".".join(table.name()) if isinstance(table.name(), tuple) else str(table.name())
        with _hooks_lock:
            hooks = list(_hooks)
        for hook in hooks:
            hook(name)
        fault_file = self.properties.get(FAULT_FILE_PROPERTY)
        if fault_file:
            self._apply_held(Path(fault_file), name, only_at_next_commit=True)
        fault = _take_fault(fault_file, name)
        if fault is None:
            return super().commit_table(table, requirements, updates)
        if fault["mode"] == RACED:
            module, function = fault["call"].split(":")
            getattr(importlib.import_module(module), function)(fault["argument"])
            return super().commit_table(table, requirements, updates)
        error = _ERRORS[fault.get("error", "unknown")]
        if fault["mode"] == RAISES_BEFORE:
            raise error(f"injected: commit of {name} failed before it was applied")
        if fault["mode"] == LANDS_LATE:
            at_next_commit = fault.get("at_next_commit", True)
            _hold(Path(fault_file or ""), table, requirements, updates, at_next_commit)
            raise error(f"injected: commit of {name} is still being applied; the answer was lost")
        super().commit_table(table, requirements, updates)
        raise error(f"injected: commit of {name} was applied, then the answer was lost")

    def _apply_held(
        self, fault_file: Path, table: str | None, *, only_at_next_commit: bool = False
    ) -> list[bool]:
        """Apply the held commits (of ``table``, if named), as the catalog finally would.

        Each is applied to the table as it is now, so its requirements decide, as they
        would on the server: True for a commit that landed, False for one refused.
        """
        with _locked(fault_file) as faults:
            held = [
                f
                for f in faults
                if f["mode"] == _HELD
                and table in (None, f["table"])
                and (f["at_next_commit"] or not only_at_next_commit)
            ]
            faults[:] = [f for f in faults if f not in held]
        outcomes = []
        for fault in held:
            request = CommitTableRequest.model_validate_json(fault["request"])
            target = self.load_table(fault["table"])
            try:
                super().commit_table(target, request.requirements, request.updates)
            except CommitFailedException:
                outcomes.append(False)
            else:
                outcomes.append(True)
        return outcomes


def catalog_environment(
    data_dir: Path, fault_file: Path, name: str = DEFAULT_CATALOG_NAME
) -> dict[str, str]:
    """``PYICEBERG_CATALOG__*`` variables that make catalog ``name`` an AmbiguousCatalog.

    Same SQLite database and warehouse as the local default under ``data_dir``, so a
    test can switch an existing lake to it and back.
    """
    properties = {
        key: value for key, value in local_catalog_properties(data_dir).items() if key != "type"
    }
    properties["py-catalog-impl"] = f"{__name__}.{AmbiguousCatalog.__name__}"
    properties[FAULT_FILE_PROPERTY] = str(fault_file.resolve())
    (data_dir / "warehouse").mkdir(parents=True, exist_ok=True)
    prefix = f"PYICEBERG_CATALOG__{name.upper()}__"
    return {prefix + key.upper().replace("-", "_"): value for key, value in properties.items()}


def arm(
    fault_file: Path,
    mode: str,
    *,
    error: str = "unknown",
    table: str | None = None,
    times: int = 1,
    at_next_commit: bool = True,
) -> None:
    """Queue ``times`` faults of ``mode`` for the next commits (of ``table``, if named).

    ``at_next_commit`` (``LANDS_LATE`` only): the held commit is applied at the start of
    the next commit of its table; False holds it until :func:`apply_late_commits`.
    """
    if mode not in (LANDS_THEN_RAISES, RAISES_BEFORE, LANDS_LATE) or error not in _ERRORS:
        raise ValueError(f"unknown fault {mode!r} / error {error!r}")
    fault = {"mode": mode, "error": error, "table": table, "at_next_commit": at_next_commit}
    _queue(fault_file, fault, times)


def arm_race(fault_file: Path, call: str, argument: str, *, table: str | None = None) -> None:
    """Make the next commit (of ``table``, if named) run ``call(argument)`` before it is
    applied (``call`` is ``"module:function"``, importable in whichever process commits)."""
    _queue(fault_file, {"mode": RACED, "call": call, "argument": argument, "table": table}, 1)


def _queue(fault_file: Path, fault: dict, times: int) -> None:
    with _locked(fault_file) as faults:
        faults.extend(dict(fault) for _ in range(times))


def pending(fault_file: Path) -> int:
    """How many armed faults no commit has consumed yet (held commits not counted)."""
    with _locked(fault_file) as faults:
        return len([fault for fault in faults if fault["mode"] != _HELD])


def held_commits(fault_file: Path) -> int:
    """How many ``LANDS_LATE`` commits the catalog has not applied yet."""
    with _locked(fault_file) as faults:
        return len([fault for fault in faults if fault["mode"] == _HELD])


def apply_late_commits(catalog: AmbiguousCatalog) -> list[bool]:
    """Let ``catalog`` apply every ``LANDS_LATE`` commit it holds; True for each that landed."""
    return catalog._apply_held(Path(catalog.properties[FAULT_FILE_PROPERTY]), None)


@contextmanager
def pause_commits(hook: Callable[[str], None]) -> Iterator[None]:
    """Run ``hook(table name)`` in every commit of this process before it is applied."""
    with _hooks_lock:
        _hooks.append(hook)
    try:
        yield
    finally:
        with _hooks_lock:
            _hooks.remove(hook)


def _take_fault(fault_file: str | None, table: str) -> dict | None:
    if not fault_file:
        return None
    with _locked(Path(fault_file)) as faults:
        for index, fault in enumerate(faults):
            if fault["mode"] != _HELD and fault.get("table") in (None, table):
                return faults.pop(index)
    return None


def _hold(
    fault_file: Path,
    table: Table,
    requirements: tuple[TableRequirement, ...],
    updates: tuple[TableUpdate, ...],
    at_next_commit: bool,
) -> None:
    """Keep a commit for later, as the REST request body it would be (JSON, any process)."""
    name = table.name()
    request = CommitTableRequest(
        identifier=TableIdentifier(namespace=list(name[:-1]), name=name[-1]),
        requirements=requirements,
        updates=updates,
    )
    held = {
        "mode": _HELD,
        "table": ".".join(name),
        "request": request.model_dump_json(),
        "at_next_commit": at_next_commit,
    }
    with _locked(fault_file) as faults:
        faults.append(held)


@contextmanager
def _locked(fault_file: Path) -> Iterator[list[dict]]:
    """The fault list, read and written back under an exclusive lock on the file."""
    fault_file.parent.mkdir(parents=True, exist_ok=True)
    with open(fault_file, "a+", encoding="utf-8") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        handle.seek(0)
        text = handle.read()
        faults: list[dict] = json.loads(text) if text.strip() else []
        yield faults
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps(faults))
