#!/usr/bin/env bash
# kinesis-lake on the older PySpark releases it supports (make test runs both steps):
#   scripts/spark_compat.sh venv 4.0.5   build .venv-spark-4.0.5 (make: once, then on its stamp)
#   scripts/spark_compat.sh test 4.0.5   run the compatibility suite in it
#
# A compat virtualenv installs one package, pyspark at that version (hashed, from
# requirements-spark-compat.lock, no dependencies); every other package is the main .venv's,
# installed from requirements.lock, reached through a .pth file that puts .venv's
# site-packages after the compat venv's own. So it is the lock with only pyspark changed,
# for one pyspark install and its ~0.5 GB instead of a second copy of the lock (2 GB, 2-3 min).
# pyspark's own requirements (py4j, and [connect]'s grpcio, pandas, pyarrow) are then checked
# against the lock's versions.
#
# The suite is the list in kinesis_lake_tests/spark_compat_suite.txt (existing tests, chosen
# for what differs between Spark versions), run by the compat venv's Python, with Spark's
# Python workers on that Python too.
set -euo pipefail
cd "$(dirname "$0")/.."
MAIN=.venv
SUITE=kinesis_lake_tests/spark_compat_suite.txt
WORKERS=${TEST_WORKERS:-2}

say() { printf '[spark-compat] %s\n' "$*"; }
fail() { printf '[spark-compat] ERROR: %s\n' "$*" >&2; exit 1; }

[ $# -eq 2 ] || fail "usage: $0 venv|test <pyspark version, as in requirements-spark-compat.lock>"
STEP=$1
VERSION=$2
VENV=.venv-spark-$VERSION

build_venv() {
  [ -x "$MAIN/bin/python" ] || fail "$MAIN is missing: run 'make setup' first."
  local requirement
  requirement=$(grep -E "^pyspark==${VERSION//./\\.} " requirements-spark-compat.lock) \
    || fail "pyspark $VERSION is not in requirements-spark-compat.lock."
  say "creating $VENV: $MAIN's packages with pyspark $VERSION"
  rm -rf "$VENV"
  "$MAIN/bin/python" -m venv --without-pip "$VENV"
  local own main
  own=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  main=$("$MAIN/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  # addsitedir, not a bare path line: .venv's own .pth files (the editable kinesis-lake, which
  # puts the repository and its pyspark_* modules on the path) must be processed too.
  printf 'import site; site.addsitedir(%s)\n' "'$main'" >"$own/kinesis_lake_main_venv.pth"
  # pip comes from .venv through the .pth and installs into this venv (sys.prefix). A
  # pyspark release is a source archive of ~0.45 GB that pip builds into a wheel and keeps
  # in its cache: only the first install on a machine downloads and builds.
  "$VENV/bin/python" -m pip install -qq --no-deps --require-hashes -r /dev/stdin <<<"$requirement"
  "$VENV/bin/python" -m pip check >/dev/null || {
    "$VENV/bin/python" -m pip check
    fail "pyspark $VERSION's requirements are not met by requirements.lock (above)."
  }
  "$VENV/bin/python" - "$VERSION" <<'PY' || fail "pyspark $VERSION[connect] does not fit requirements.lock"
import sys
from importlib.metadata import distribution, version
from packaging.requirements import Requirement

pyspark = distribution("pyspark")
assert pyspark.version == sys.argv[1], f"pyspark {pyspark.version} is first on the path"
for text in pyspark.requires or []:
    requirement = Requirement(text)
    if requirement.marker and not requirement.marker.evaluate({"extra": "connect"}):
        continue
    found = version(requirement.name)
    assert requirement.specifier.contains(found, prereleases=True), f"{requirement}: {found}"
PY
  "$VENV/bin/python" -m kinesis_lake.spark.runtime.compiled_pyspark >/dev/null \
    || say "WARNING: could not compile pyspark's archives: Python workers start slower."
  touch "$VENV/.kinesis-lake-installed"
  say "$VENV ready ($(du -sh "$VENV" | cut -f1))"
}

run_suite() {
  [ -f "$VENV/.kinesis-lake-installed" ] || fail "$VENV is not built: $0 venv $VERSION"
  local tests
  # A line's [4.0] (or [4.0,4.1]) names the Spark lines it runs on; without it, every one.
  mapfile -t tests < <(sed -e 's/#.*//' -e 's/[[:space:]]*$//' "$SUITE" | grep -v '^$' |
    awk -v line="${VERSION%.*}" 'NF == 1 || index("," substr($2, 2, length($2) - 2) ",", "," line ",") { print $1 }')
  [ ${#tests[@]} -gt 0 ] || fail "no test of $SUITE runs on PySpark $VERSION"
  say "PySpark $VERSION: ${#tests[@]} tests of $SUITE"
  # Two SIGKILLs of the chaos test, not four: its first two aim at the sink's two moments.
  KINESIS_LAKE_CHAOS_KILLS=2 \
    PYSPARK_PYTHON="$PWD/$VENV/bin/python" PYSPARK_DRIVER_PYTHON="$PWD/$VENV/bin/python" \
    "$VENV/bin/python" -m pytest "${tests[@]}" -n "$WORKERS" --dist loadfile --durations=10
}

case "$STEP" in
  venv) build_venv ;;
  test) run_suite ;;
  *) fail "unknown step '$STEP': use venv or test" ;;
esac
