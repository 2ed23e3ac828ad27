"""The four kinds of test, found for every test at collection, and the guard of the fast one.

- ``fast``: needs no JVM and starts no process of its own (the session's shared local
  endpoints, started once per worker, are allowed). ``make test-fast`` runs these.
- ``spark``: uses the session's in-process Spark (the ``spark`` fixture).
- ``processes``: starts processes or servers of its own: a fresh JVM or SparkSession, the
  CLI, a Spark Connect server, a standalone cluster, a fresh local endpoint, a Python probe.
- ``system``: the browser, the soak and chaos runs, the fuzzers, the Java/Iceberg interop
  and Postgres.

Nobody has to mark a test: the kind follows from the folder or file (the system kinds),
from the fixtures it uses, and from what its code (and the test helpers it calls) refers
to: ``subprocess``, ``multiprocessing``, ``sys.executable``, a SparkSession builder, or one
of our classes that starts a process. A ``pytestmark = pytest.mark.<kind>`` (or a mark on
the test) overrides that where it is wrong. Every test gets exactly one kind, so
``-m fast``, ``-m spark``, ``-m processes`` and ``-m system`` partition the suite.

Under a selection that names ``fast`` (``make test-fast``), a fast test that starts a
process (a JVM above all) fails at once, naming itself and the kind to mark it with: a
misclassified test cannot hide in the fast tier. Processes started while a session-scoped
fixture is set up (the shared endpoints) are allowed; a JVM never is.
"""

from __future__ import annotations

import inspect
import multiprocessing
import os
import subprocess
import sys
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import pytest

FAST, SPARK, PROCESSES, SYSTEM = "fast", "spark", "processes", "system"
KINDS = (FAST, SPARK, PROCESSES, SYSTEM)
"""pyproject.toml registers the same four markers, each with what it means."""

_ROOT = Path(__file__).resolve().parent
_suite_root = _ROOT.parent
"""Where test code lives: the rootdir of the run (``register`` sets it)."""

SYSTEM_PATHS = {
    "ui/": "the browser",
    "fuzz/": "the fuzzers",
    "interop/": "Java/Iceberg interop",
    "pipeline/test_soak.py": "the soak",
    "pipeline/test_chaos.py": "the chaos run",
}
"""Folders (ending in /) and files, relative to kinesis_lake_tests, of system tests."""

SYSTEM_FIXTURES = {"postgres", "page", "dagster_ui", "chromium_executable"}
SPARK_FIXTURES = {"spark"}

_PROCESS_MODULES = (subprocess, multiprocessing)
_PROCESS_ATTRIBUTES = {
    "os": {"fork", "forkpty", "system", "popen", "posix_spawn", "posix_spawnp", "execv"},
    "sys": {"executable"},
    "concurrent.futures": {"ProcessPoolExecutor"},
}
_JVM_NAMES = {"getOrCreate", "SparkContext", "build_spark_session", "launch_gateway"}
"""Names whose use starts a JVM (a SparkSession builder's, pyspark's, and our builder)."""
_PROCESS_NAMES = {"define_out_of_process_context"}
"""Other libraries' names whose use starts a process (Dagster's code server)."""


def _code_objects(code: types.CodeType) -> Iterator[types.CodeType]:
    yield code
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            yield from _code_objects(constant)


def _functions_of(value: Any) -> list[Callable]:
    """The functions whose code says what ``value`` does when it is called or built."""
    value = inspect.unwrap(value) if callable(value) else value
    if isinstance(value, types.FunctionType):
        return [value]
    if isinstance(value, type):
        return [
            inspect.unwrap(
                member.__func__ if isinstance(member, classmethod | staticmethod) else member
            )
            for klass in value.__mro__
            if _is_product(klass) or _is_test_code(klass)
            for member in vars(klass).values()
            if isinstance(member, types.FunctionType | classmethod | staticmethod)
        ]
    return []


def _is_product(value: Any) -> bool:
    module = getattr(value, "__module__", None) or ""
    return module == "kinesis_lake" or module.startswith("kinesis_lake.")


def _is_test_code(value: Any) -> bool:
    """Defined in a test or a test helper: a module of the suite's folders, not of our
    package, the standard library or an installed one."""
    module = sys.modules.get(getattr(value, "__module__", None) or "")
    file = getattr(module, "__file__", None)
    if file is None or _is_product(value):
        return False
    path = Path(file).resolve()
    return path.is_relative_to(_suite_root) and "site-packages" not in path.parts


def starts(function: Callable, *, jvm_only: bool = False) -> str | None:
    """What ``function`` starts, found in its code and, through the test helpers it calls,
    theirs (our package's functions and classes count one level deep): a JVM, a process,
    or None. Static and partial by nature: the fast tier's guard catches what it misses."""
    seen: set[int] = set()
    todo: list[tuple[Callable, int]] = [(function, 0)]
    found = None
    while todo:
        current, depth = todo.pop()
        if id(current) in seen or not hasattr(current, "__code__"):
            continue
        seen.add(id(current))
        names = {name for code in _code_objects(current.__code__) for name in code.co_names}
        namespace = getattr(current, "__globals__", {})
        for name in names:
            where = f"{current.__module__}.{current.__qualname__}"
            if name in _JVM_NAMES and not _is_product(current):
                # In our package's code a builder may stand on a path the test never
                # takes (a resource's lazy session): the guard judges those.
                return f"a JVM ({name} in {where})"
            if name in _PROCESS_NAMES:
                found = f"a process ({name} in {where})"
            value = namespace.get(name)
            if value is None:
                continue
            if isinstance(value, types.ModuleType):
                attributes = _PROCESS_ATTRIBUTES.get(value.__name__, set())
                if value in _PROCESS_MODULES or names & attributes:
                    found = f"a process ({name} in {where})"
                continue
            if _is_test_code(value) or (depth == 0 and _is_product(value)):
                # Our package's code is read one level deep only: deeper, a dispatcher
                # (the CLI's main) reaches everything that ever starts a process.
                next_depth = depth + 1 if _is_product(value) else depth
                todo.extend((inner, next_depth) for inner in _functions_of(value))
    return None if jvm_only else found


def _fixture_functions(item: pytest.Item) -> Iterator[tuple[str, Callable]]:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return
    for name in item.fixturenames:  # type: ignore[attr-defined]
        for definition in info.name2fixturedefs.get(name, ()):
            if _is_test_code(definition.func):
                yield definition.scope, definition.func


def kind_of(item: pytest.Item) -> tuple[str, str]:
    """(kind, why) for a test that carries no kind of its own."""
    path = Path(str(item.path)).resolve()
    relative = path.relative_to(_ROOT).as_posix() if path.is_relative_to(_ROOT) else ""
    for prefix, what in SYSTEM_PATHS.items():
        if relative == prefix or (prefix.endswith("/") and relative.startswith(prefix)):
            return SYSTEM, what
    # A parametrized argument is listed among the fixture names but is no fixture: a stop
    # rule's ``page`` is not the browser's.
    parameters = set(getattr(getattr(item, "callspec", None), "params", {}))
    fixtures = set(getattr(item, "fixturenames", ())) - parameters
    if fixtures & SYSTEM_FIXTURES:
        return SYSTEM, f"uses {sorted(fixtures & SYSTEM_FIXTURES)[0]}"
    function = getattr(item, "function", None)
    started = starts(function) if function is not None else None
    if started:
        return PROCESSES, f"starts {started}"
    for scope, fixture in _fixture_functions(item):
        # Session fixtures are shared (the endpoints): only a JVM there is not fast.
        started = starts(fixture, jvm_only=scope == "session")
        if started and getattr(fixture, "__name__", "") not in SPARK_FIXTURES:
            return PROCESSES, f"its fixture {fixture.__name__} starts {started}"
    if fixtures & SPARK_FIXTURES:
        return SPARK, "uses the spark fixture"
    return FAST, "no JVM, no process"


def classify(items: list[pytest.Item]) -> None:
    """Give every test exactly one kind (``pytest_collection_modifyitems``)."""
    for item in items:
        marked = {mark.name for mark in item.iter_markers() if mark.name in KINDS}
        if len(marked) > 1:
            raise pytest.UsageError(
                f"{item.nodeid} is marked {' and '.join(sorted(marked))}: one kind only"
            )
        if not marked:
            kind, why = kind_of(item)
            item.add_marker(getattr(pytest.mark, kind))
            # Why, for whoever wonders (--junitxml writes it): the guard names the fix.
            item.user_properties.append(("kind", f"{kind}: {why}"))


# The guard of the fast tier -----------------------------------------------------------

_guarded: pytest.Item | None = None
"""The fast test being set up, run or torn down, under a selection naming ``fast``."""

_shared_depth = 0
"""Above 0 while a session fixture is set up or a shared endpoint revived."""


def _refuse(what: str) -> None:
    item = _guarded
    if item is None:
        return
    jvm = any(word in what for word in ("java", "spark-submit", "spark-class"))
    if _shared_depth and not jvm:
        return  # a shared endpoint, started once per worker
    pytest.fail(
        f"{item.nodeid} is marked fast but started {what[:200]!r}: a fast test needs no "
        f"JVM and starts no process of its own. Mark it `@pytest.mark.{PROCESSES}` (or "
        f"`pytestmark = pytest.mark.{PROCESSES}` for its whole module)"
        + (f", or let it use the session's `spark` fixture (kind `{SPARK}`)" if jvm else "")
        + ". kinesis_lake_tests/tiers.py says how kinds are found.",
        pytrace=False,
    )


def _argv(args: Any) -> str:
    if isinstance(args, str | bytes | os.PathLike):
        return os.fsdecode(args)
    return " ".join(os.fsdecode(arg) for arg in args)


def _install_guard() -> None:
    execute_child = subprocess.Popen._execute_child  # type: ignore[attr-defined]

    def guarded_execute_child(self, args, *rest, **kwargs):
        _refuse(_argv(args))
        return execute_child(self, args, *rest, **kwargs)

    subprocess.Popen._execute_child = guarded_execute_child  # type: ignore[attr-defined]

    def wrap(module: Any, name: str, describe: Callable[..., str]) -> None:
        original = getattr(module, name, None)
        if original is None:
            return

        def guarded(*args, **kwargs):
            _refuse(describe(*args, **kwargs))
            return original(*args, **kwargs)

        setattr(module, name, guarded)

    wrap(os, "fork", lambda: "os.fork()")
    wrap(os, "forkpty", lambda: "os.forkpty()")
    wrap(os, "system", lambda command: command)
    wrap(os, "posix_spawn", lambda path, argv, *a, **k: _argv(argv))
    wrap(os, "posix_spawnp", lambda path, argv, *a, **k: _argv(argv))
    import multiprocessing.util

    wrap(multiprocessing.util, "spawnv_passfds", lambda path, args, fds: _argv(args))


def selects_fast(config: pytest.Config) -> bool:
    return FAST in (config.getoption("markexpr", "") or "").split()


@contextmanager
def _guarding(item: pytest.Item) -> Iterator[None]:
    global _guarded
    if item.get_closest_marker(FAST) is None:
        yield
        return
    _guarded = item
    try:
        yield
    finally:
        _guarded = None


class Tiers:
    """The hooks, registered as a plugin (``register``) so that they also see the
    session-scoped fixtures, which a conftest's hooks below the root do not."""

    def __init__(self, guard: bool) -> None:
        self.guard = guard

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        classify(items)

    def _phase(self, item: pytest.Item) -> Iterator[None]:
        """Setting a test up, running it and tearing it down are each guarded."""
        with _guarding(item) if self.guard else nullcontext():
            return (yield)

    pytest_runtest_setup = pytest.hookimpl(wrapper=True)(_phase)
    pytest_runtest_call = pytest.hookimpl(wrapper=True)(_phase)
    pytest_runtest_teardown = pytest.hookimpl(wrapper=True)(_phase)

    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(self, fixturedef: Any) -> Iterator[None]:
        """A session fixture may start a shared process (an endpoint), not a JVM."""
        with shared() if fixturedef.scope == "session" else nullcontext():
            return (yield)


@contextmanager
def shared() -> Iterator[None]:
    """Processes started inside are the session's shared ones (an endpoint), which the
    fast tier allows: a session fixture's setup, a dead shared endpoint's revival."""
    global _shared_depth
    _shared_depth += 1
    try:
        yield
    finally:
        _shared_depth -= 1


def register(config: pytest.Config) -> None:
    """From the root conftest's ``pytest_configure``: classify every test, and under a
    selection that names ``fast`` guard the fast ones."""
    global _suite_root
    _suite_root = config.rootpath.resolve()
    guard = selects_fast(config)
    if guard:
        _install_guard()
    config.pluginmanager.register(Tiers(guard), "kinesis-lake-tiers")
