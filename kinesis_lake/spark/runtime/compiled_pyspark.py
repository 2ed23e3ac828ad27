"""Spark's own copy of PySpark, compiled once, so that new Python processes stop compiling it.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` (and py4j's archive) first on the path of
every Python process it starts: the driver's data-source planners and their daemons, the
streaming source and sink runners, each executor's worker daemon. pip's pyspark ships those
archives as source only, and an archive gets no ``__pycache__``, so every one of those
processes compiles each PySpark module it imports again: about a second of CPU per process,
several processes per query, paid by every `kinesis-lake ingest` and every Dagster run.

zipimport takes a module's ``.pyc`` from the archive when it lies next to the ``.py``. This
adds them, compiled by the Python the workers run (the project's virtualenv), as
checked-hash pycs: on import each is compared with its source's hash, and one that does not
match is ignored and the source compiled, as before. ``make setup`` runs it; a reinstall of
pyspark brings back the source-only archives, which ``python -m
kinesis_lake.spark.runtime.compiled_pyspark`` compiles again.
"""

from __future__ import annotations

import compileall
import os
import py_compile
import re
import shutil
import sys
import tempfile
import warnings
import zipfile
from pathlib import Path

import pyspark

ARCHIVE_DIR = Path(pyspark.__file__).parent / "python" / "lib"
"""Where pip's pyspark keeps them: what Spark uses unless ``SPARK_HOME`` names another Spark."""

_TEST_PACKAGES = re.compile(r"[/\\]tests[/\\]")
"""PySpark's own tests: no worker imports them, and compiled they would double the archive."""


def archives() -> list[Path]:
    """The archives Spark puts on its Python processes' path (pyspark's and py4j's)."""
    return sorted(ARCHIVE_DIR.glob("*.zip"))


def is_compiled(archive: Path) -> bool:
    with zipfile.ZipFile(archive) as opened:
        return any(name.endswith(".pyc") for name in opened.namelist())


def compile_archive(archive: Path) -> int:
    """Add a checked-hash ``.pyc`` next to every ``.py`` of ``archive`` outside PySpark's own
    test packages; the number added (0 when it holds them already).

    The archive is replaced whole, atomically, and keeps its permissions. Each module
    compiled here names its source as zipimport would (``<archive>/pyspark/x.py``), so
    tracebacks, and PySpark's trimming of its own frames from them, stay as before. A
    Python process already importing from the archive must not outlive the replacement
    (zipimport caches where each member lies): run this with no Spark running, as ``make
    setup`` does, and restart a running ``make dev`` after.
    """
    if is_compiled(archive):
        return 0
    partial = archive.with_name(f".{archive.name}.{os.getpid()}.tmp")
    try:
        with tempfile.TemporaryDirectory(prefix="compiled-pyspark-") as scratch:
            tree = Path(scratch) / "tree"
            with zipfile.ZipFile(archive) as source:
                source.extractall(tree)
                entries = source.infolist()
            with warnings.catch_warnings():  # pyspark's own tests hold a SyntaxWarning or two
                warnings.simplefilter("ignore")
                compiled_all = compileall.compile_dir(
                    tree,
                    ddir=str(archive),
                    rx=_TEST_PACKAGES,
                    quiet=1,
                    legacy=True,  # mod.pyc beside mod.py: the only place zipimport looks
                    invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH,
                )
            if not compiled_all:
                raise RuntimeError(f"some modules of {archive} do not compile")
            added = 0
            with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as target:
                for entry in entries:
                    if entry.is_dir():
                        target.writestr(entry, b"")
                        continue
                    target.writestr(entry, (tree / entry.filename).read_bytes())
                    compiled = tree / f"{entry.filename}c"
                    if entry.filename.endswith(".py") and compiled.is_file():
                        target.write(compiled, f"{entry.filename}c")
                        added += 1
        shutil.copymode(archive, partial)
        partial.replace(archive)
    finally:
        partial.unlink(missing_ok=True)
    return added


def main() -> int:
    for archive in archives():
        added = compile_archive(archive)
        print(f"{archive.name}: {added} modules compiled" if added else f"{archive.name}: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
