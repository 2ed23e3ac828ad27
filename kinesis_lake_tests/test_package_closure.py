"""The packed environment a cluster takes (``make package``) holds every module the
package imports. Its contents are read from pyproject.toml's dependencies, transitively,
so a module imported only because another dependency happened to bring it in is left out:
CI's spark-submit test failed with "No module named 'jsonschema'" on the cluster after
registry JSON records began to be validated with it. This finds such an import without
building the package."""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import sys
from pathlib import Path

from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]


def _package_script():
    spec = importlib.util.spec_from_file_location("package_script", ROOT / "scripts" / "package.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _third_party_imports() -> dict[str, str]:
    """Top-level module -> the first file importing it, of every module the package imports."""
    found: dict[str, str] = {}
    for path in sorted((ROOT / "kinesis_lake").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top != "kinesis_lake":
                    found.setdefault(top, str(path.relative_to(ROOT)))
    return found


def test_every_module_the_package_imports_ships_in_the_packed_environment():
    package = _package_script()
    shipped = package.runtime_closure() | package.CLUSTER_PROVIDES | package.ORCHESTRATION
    distributions = importlib.metadata.packages_distributions()
    missing = {
        module: importer
        for module, importer in _third_party_imports().items()
        if not {canonicalize_name(d) for d in distributions.get(module, [])} & shipped
    }
    assert not missing, (
        f"imported but not shipped to clusters: {missing}: add each one's distribution to "
        "pyproject.toml's dependencies"
    )
