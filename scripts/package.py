"""``make package``: what a Spark cluster needs to run kinesis-lake, under build/package/.

* ``dist/kinesis_lake-<version>-py3-none-any.whl``: the project, built without network;
* ``kinesis_lake_env.tar.gz``: a virtualenv with the wheel and the packages it needs at
  run time, exactly as ``requirements.lock`` pins and hashes them, packed by venv-pack2
  (the maintained fork of venv-pack) for ``spark.archives`` (``...#environment``; then
  ``PYSPARK_PYTHON=./environment/bin/python``). Left out: PySpark and Py4J (the
  cluster's Spark puts its own first on every Python process's path, and they must match
  its JVM) and Dagster's orchestration packages (the cluster only runs the pipeline;
  ``dagster-pipes``, which the job reports back with, stays);
* ``kinesis_lake_submit.py``: the ``spark-submit`` entry point (``kinesis_lake.submit``).

The environment is Linux and this machine's Python (``bin/python`` links to it, as
venv-pack documents): build it where the cluster's Python is the same minor version.
Nothing is rebuilt while the inputs (the lock, pyproject.toml, the package's sources and
this script) are unchanged: ``.stamp`` holds their hash.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata as metadata
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
EXTRAS = ("aws",)
CLUSTER_PROVIDES = {"pyspark", "py4j"}
ORCHESTRATION = {"dagster", "dagster-shared", "dagster-webserver", "dagster-aws", "dagster-pyspark"}
ENV_ARCHIVE = "kinesis_lake_env.tar.gz"
ENTRY_POINT = "kinesis_lake_submit.py"
ENTRY_POINT_TEXT = '''"""spark-submit entry point of kinesis-lake (written by make package)."""

from kinesis_lake.submit import main

main()
'''


def inputs_hash() -> str:
    digest = hashlib.sha256()
    files = [ROOT / "requirements.lock", ROOT / "pyproject.toml", Path(__file__).resolve()]
    files += sorted(ROOT.glob("pyspark_*.py")) + sorted((ROOT / "kinesis_lake").rglob("*.py"))
    for path in files:
        digest.update(str(path.relative_to(ROOT)).encode())
        digest.update(path.read_bytes())
    digest.update(sys.version.encode())
    return digest.hexdigest()


def runtime_closure() -> set[str]:
    """The distributions kinesis-lake needs at run time (pyproject.toml's dependencies and
    EXTRAS, then theirs, transitively, from the installed metadata of the development
    virtualenv, which ``make setup`` installed from the same lock; markers evaluated here),
    less what the cluster provides and Dagster's orchestration side."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = [text for extra in EXTRAS for text in project["optional-dependencies"][extra]]
    queue = [Requirement(text) for text in [*project["dependencies"], *extras]]
    seen: set[tuple[str, str]] = set()  # (distribution, extra): an extra adds its own needs
    while queue:
        requirement = queue.pop()
        name = canonicalize_name(requirement.name)
        if name in CLUSTER_PROVIDES | ORCHESTRATION:
            continue
        for extra in ("", *sorted(requirement.extras)):
            if (name, extra) not in seen:
                seen.add((name, extra))
                queue.extend(_requires(name, extra))
    return {name for name, _ in seen} | {"dagster-pipes"}


def _requires(distribution: str, extra: str) -> list[Requirement]:
    environment = {key: str(value) for key, value in default_environment().items()}
    environment["extra"] = extra
    found = []
    for text in metadata.requires(distribution) or []:
        requirement = Requirement(text)
        marker = requirement.marker
        if marker is None:
            if not extra:
                found.append(requirement)
        elif marker.evaluate(environment) and (
            bool(extra) == ("extra" in str(marker))  # an extra's own entries only once
        ):
            found.append(requirement)
    return found


def locked_subset(names: set[str]) -> str:
    """The entries of requirements.lock for ``names``, with their hashes and markers."""
    blocks = re.split(r"\n(?=[A-Za-z0-9])", (ROOT / "requirements.lock").read_text())
    kept = [block for block in blocks if _locked_name(block) in names]
    missing = names - {_locked_name(block) for block in kept}
    if missing:
        raise SystemExit(f"not in requirements.lock: {', '.join(sorted(missing))} (make lock)")
    return "\n".join(block.rstrip() for block in kept) + "\n"


def _locked_name(block: str) -> str:
    return canonicalize_name(re.split(r"[=\[ ;]", block, maxsplit=1)[0])


def run(*command: str | Path) -> None:
    subprocess.run([str(part) for part in command], check=True, cwd=ROOT)


def build(out: Path) -> None:
    if out.exists():
        shutil.rmtree(out)
    dist, venv = out / "dist", out / "venv"
    out.mkdir(parents=True)
    run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
        "-w", dist, ROOT)  # fmt: skip
    (wheel,) = dist.glob("kinesis_lake-*.whl")
    requirements = out / "requirements.txt"
    requirements.write_text(locked_subset(runtime_closure()))
    run(sys.executable, "-m", "venv", "--without-pip", venv)
    pip = (sys.executable, "-m", "pip", "--python", venv / "bin" / "python")
    run(*pip, "install", "-qq", "--require-hashes", "--no-deps", "-r", requirements)
    run(*pip, "install", "-qq", "--no-deps", wheel)
    run(sys.executable, "-m", "venv_pack", "-q", "-p", venv, "-o", out / ENV_ARCHIVE)
    shutil.rmtree(venv)  # only the archive is shipped; the folder would only go stale
    (out / ENTRY_POINT).write_text(ENTRY_POINT_TEXT)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "package")
    out = parser.parse_args().out.resolve()
    stamp = out / ".stamp"
    wanted = inputs_hash()
    if stamp.exists() and stamp.read_text() == wanted and (out / ENV_ARCHIVE).exists():
        print(f"{out}: up to date")
        return
    build(out)
    stamp.write_text(wanted)
    size = (out / ENV_ARCHIVE).stat().st_size / 2**20
    print(f"{out}: {ENV_ARCHIVE} ({size:,.0f} MiB), {ENTRY_POINT}, dist/")


if __name__ == "__main__":
    main()
