"""The package's shape, enforced: dependencies point one way and nothing imports in a circle.

Layers, from the bottom: the leaf ``errors``; the libraries (``kinesis``, ``iceberg``,
``events``); the deployment's settings (``config``); the Spark data sources (``spark``),
which take their options from Spark, never from ``config``; the pipeline jobs
(``pipeline``); the Dagster layer (``defs``, ``definitions``); the front door (``cli``,
``console``, ``demo``, ``dev``). A module may import its own layer's modules and lower
layers', never a higher layer's; the libraries may not import each other. Imports inside
functions count: a lazy import is still a dependency; so does a module named in a string
(the worker daemon's preload list, imported with importlib).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "kinesis_lake"
LIBRARIES = ("kinesis_lake.kinesis", "kinesis_lake.iceberg", "kinesis_lake.events")
LAYERS: tuple[tuple[str, ...], ...] = (
    ("kinesis_lake", "kinesis_lake.errors", "kinesis_lake.record_rows"),
    LIBRARIES,
    ("kinesis_lake.config",),
    ("kinesis_lake.spark",),
    ("kinesis_lake.pipeline",),
    ("kinesis_lake.defs", "kinesis_lake.definitions"),
    (
        "kinesis_lake.cli",
        "kinesis_lake.console",
        "kinesis_lake.demo",
        "kinesis_lake.dev",
        "kinesis_lake.check_runner",
        "kinesis_lake.submit",
    ),
)
DAGSTER_ALLOWED = LAYERS[-2] + LAYERS[-1]
SHARED_BY_LIBRARIES = ("kinesis_lake.errors", "kinesis_lake.record_rows")
"""The bottom modules a library may import: the kinds of error, and a record's columns."""


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, absolute, at any depth of the file."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            found.add(name)
            # ``from kinesis_lake.pipeline import derive`` imports a module, not a name.
            for alias in node.names:
                if (PACKAGE.parent / (name + "." + alias.name).replace(".", "/")).exists() or (
                    PACKAGE.parent / ((name + "." + alias.name).replace(".", "/") + ".py")
                ).exists():
                    found.add(f"{name}.{alias.name}")
        elif isinstance(node, ast.Constant) and _names_a_module(node.value):
            found.add(node.value)  # imported by name (importlib): a dependency all the same
    return found


def _names_a_module(value: object) -> bool:
    """Whether ``value`` is the dotted name of one of the package's modules."""
    if not isinstance(value, str) or not value.startswith("kinesis_lake."):
        return False
    path = PACKAGE.parent / value.replace(".", "/")
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


GRAPH = {
    _module_name(path): {m for m in _imports(path) if m.split(".")[0] == "kinesis_lake"}
    for path in PACKAGE.rglob("*.py")
}
THIRD_PARTY = {
    _module_name(path): {m.split(".")[0] for m in _imports(path)} for path in PACKAGE.rglob("*.py")
}


def _owner(module: str, groups: tuple[str, ...]) -> str | None:
    """The most specific entry of ``groups`` that ``module`` is or lives under."""
    matches = [g for g in groups if module == g or module.startswith(g + ".")]
    return max(matches, key=len) if matches else None


def _layer(module: str) -> int:
    best = (-1, -1)  # (specificity, layer)
    for index, layer in enumerate(LAYERS):
        owner = _owner(module, layer)
        if owner is not None:
            best = max(best, (len(owner), index))
    assert best[1] >= 0, f"{module} belongs to no layer: add it to LAYERS"
    return best[1]


def test_every_module_belongs_to_a_layer() -> None:
    for module in GRAPH:
        _layer(module)


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_imports_point_down(module: str) -> None:
    upward = sorted(m for m in GRAPH[module] if _layer(m) > _layer(module))
    assert not upward, f"{module} imports higher layers: {upward}"


@pytest.mark.parametrize("library", LIBRARIES)
def test_libraries_import_no_other_part_of_the_package(library: str) -> None:
    for module, imported in GRAPH.items():
        if _owner(module, (library,)) is None:
            continue
        foreign = sorted(
            m for m in imported if _owner(m, (library,)) is None and m not in SHARED_BY_LIBRARIES
        )
        assert not foreign, f"{module} (library {library}) imports {foreign}"


SPARK_FLOORS: tuple[tuple[str, ...], ...] = (
    ("kinesis_lake.spark", "kinesis_lake.spark.worker_process", "kinesis_lake.spark.spark_version"),
    ("kinesis_lake.spark.kinesis", "kinesis_lake.spark.iceberg", "kinesis_lake.spark.routing"),
    ("kinesis_lake.spark.runtime",),
)
"""Inside the Spark layer: the runtime (session, workers) registers and preloads the data
sources; they need of it only their process's two helpers at the bottom."""


def _spark_floor(module: str) -> tuple[int, str]:
    best = (-1, -1, "")
    for index, floor in enumerate(SPARK_FLOORS):
        owner = _owner(module, floor)
        if owner is not None:
            best = max(best, (len(owner), index, owner))
    return best[1], best[2]


@pytest.mark.parametrize("module", sorted(m for m in GRAPH if _owner(m, ("kinesis_lake.spark",))))
def test_the_spark_layer_runs_one_way_and_its_connectors_apart(module: str) -> None:
    floor, unit = _spark_floor(module)
    spark_imports = [m for m in GRAPH[module] if _owner(m, ("kinesis_lake.spark",))]
    upward = sorted(m for m in spark_imports if _spark_floor(m)[0] > floor)
    assert not upward, f"{module} imports the Spark layer's higher floors: {upward}"
    if floor == 1:
        beside = sorted(
            m for m in spark_imports if _spark_floor(m)[0] == 1 and _spark_floor(m)[1] != unit
        )
        assert not beside, f"{module} ({unit}) imports another data source's modules: {beside}"


def test_errors_imports_nothing_of_the_package() -> None:
    assert GRAPH["kinesis_lake.errors"] == set()


def test_only_the_dagster_layer_and_the_front_door_import_dagster() -> None:
    importers = sorted(
        module
        for module, names in THIRD_PARTY.items()
        if names & {"dagster", "dagster_aws", "dagster_pyspark"}
    )
    outside = [m for m in importers if _owner(m, DAGSTER_ALLOWED) is None]
    assert importers, "the Dagster layer should import dagster"
    assert not outside, f"Dagster imported outside defs/cli/demo: {outside}"


def test_no_import_cycles() -> None:
    """Tarjan's strongly connected components over the module graph: every one a single
    module that does not import itself."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in GRAPH.get(module, ()):
            if target not in GRAPH:
                continue
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(GRAPH):
        if module not in index:
            visit(module)
    assert not cycles, f"import cycles: {cycles}"


@pytest.mark.parametrize(
    ("modules", "forbidden"),
    [
        (("kinesis_lake.kinesis",), {"dagster", "pyspark", "pyiceberg"}),
        (("kinesis_lake.events",), {"dagster", "pyspark"}),
        (("kinesis_lake.iceberg",), {"dagster", "pyspark"}),
        (("kinesis_lake.spark", "kinesis_lake.pipeline"), {"dagster"}),
    ],
)
def test_importing_a_layer_loads_nothing_it_must_not(
    modules: tuple[str, ...], forbidden: set[str]
) -> None:
    """The same rule at run time, through every transitive import."""
    names = sorted(m for m in GRAPH if _owner(m, modules) is not None)
    code = (
        "import sys\n"
        + "".join(f"import {name}\n" for name in names)
        + f"print(sorted({{n.split('.')[0] for n in sys.modules}} & set({sorted(forbidden)!r})))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]", f"{modules} load {result.stdout.strip()}"
