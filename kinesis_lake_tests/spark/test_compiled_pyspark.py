"""Spark's Python processes load PySpark compiled, from the archive ``make setup`` compiles."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import StringType

from kinesis_lake.spark.runtime import compiled_pyspark

IMPORT_FROM = """
import pyspark.sql.worker.plan_data_source_read as planner
print(planner.__file__)
print(planner.main.__code__.co_filename)
"""


def _archive(tmp_path: Path, modules: dict[str, str]) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    archive = tmp_path / "modules.zip"
    with zipfile.ZipFile(archive, "w") as opened:
        for name, source in modules.items():
            opened.writestr(name, source)
    return archive


def _run_from(archive: Path, code: str) -> str:
    env = dict(os.environ, PYTHONPATH=str(archive), PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()


def test_setup_compiled_the_archives_spark_puts_first_on_its_python_path() -> None:
    found = compiled_pyspark.archives()
    names = [path.name for path in found]
    assert "pyspark.zip" in names and any(name.startswith("py4j-") for name in names)
    assert all(compiled_pyspark.is_compiled(path) for path in found), (
        "make setup compiles them; so does python -m kinesis_lake.spark.runtime.compiled_pyspark"
    )
    pyspark_zip = compiled_pyspark.ARCHIVE_DIR / "pyspark.zip"
    # What Spark's planner process imports comes from a .pyc, not from source compiled anew.
    loaded, compiled_from = _run_from(pyspark_zip, IMPORT_FROM).splitlines()
    assert loaded == f"{pyspark_zip}/pyspark/sql/worker/plan_data_source_read.pyc"
    # Its code names the source as if zipimport had compiled it: PySpark trims its own
    # frames from task tracebacks by that path.
    assert compiled_from == f"{pyspark_zip}/pyspark/sql/worker/plan_data_source_read.py"


def test_a_python_worker_of_spark_runs_pyspark_from_the_compiled_archive(spark) -> None:
    def where_pyspark_came_from(_):  # no hints: PySpark would read them as a pandas UDF
        import pyspark.sql.types

        return str(pyspark.sql.types.__file__)

    located = F.udf(where_pyspark_came_from, StringType())
    (row,) = spark.range(1).select(located("id").alias("file")).collect()
    assert row.file.endswith("pyspark.zip/pyspark/sql/types.pyc"), row.file


def test_compiling_adds_a_checked_pyc_per_module_once_and_a_stale_one_is_never_used(
    tmp_path: Path,
) -> None:
    archive = _archive(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/answer.py": "VALUE = 'compiled'\n\ndef where():\n    pass\n",
            "pkg/tests/test_answer.py": "",
        },
    )
    assert compiled_pyspark.compile_archive(archive) == 2  # test packages are left alone
    with zipfile.ZipFile(archive) as opened:
        assert "pkg/tests/test_answer.pyc" not in opened.namelist()
        flags = int.from_bytes(opened.read("pkg/answer.pyc")[4:8], "little")
    assert flags == 0b11  # hash-based and checked against the source on every import
    loaded = _run_from(
        archive, "import pkg.answer as a; print(a.__file__, a.VALUE, a.where.__code__.co_filename)"
    )
    assert loaded == f"{archive}/pkg/answer.pyc compiled {archive}/pkg/answer.py"
    before = archive.read_bytes()
    assert compiled_pyspark.compile_archive(archive) == 0
    assert archive.read_bytes() == before

    # The source changes under its old .pyc, to a source of the same size (an archive
    # patched by hand): the .pyc no longer matches the source's hash, so Python compiles
    # the source instead of running stale code.
    rewritten = tmp_path / "rewritten.zip"
    with zipfile.ZipFile(archive) as old, zipfile.ZipFile(rewritten, "w") as new:
        for entry in old.infolist():
            data = old.read(entry)
            if entry.filename == "pkg/answer.py":
                data = data.replace(b"compiled", b"modified")
            new.writestr(entry, data)
    assert _run_from(rewritten, "import pkg.answer as a; print(a.VALUE)") == "modified"


def test_an_archive_keeps_its_mode_and_one_that_does_not_compile_is_left_as_it_was(
    tmp_path: Path,
) -> None:
    archive = _archive(tmp_path, {"pkg/__init__.py": "", "pkg/ok.py": "X = 1\n"})
    archive.chmod(0o640)
    compiled_pyspark.compile_archive(archive)
    assert archive.stat().st_mode & 0o777 == 0o640

    broken = _archive(tmp_path / "broken", {"pkg/__init__.py": "", "pkg/bad.py": "def (:\n"})
    before = broken.read_bytes()
    with pytest.raises(RuntimeError, match="do not compile"):
        compiled_pyspark.compile_archive(broken)
    assert broken.read_bytes() == before
    assert [path.name for path in broken.parent.iterdir()] == ["modules.zip"]
