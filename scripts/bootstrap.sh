#!/usr/bin/env bash
# Installs what kinesis-lake needs, or says exactly what is missing and how to get it.
#   scripts/bootstrap.sh               Java check, virtualenv, Python packages, kinesalite, kinesis-mock
#   scripts/bootstrap.sh --test-tools  also what only the tests need (Chromium, PostgreSQL)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
NODE_PREFIX=.local/node
KINESALITE_VERSION=3.3.3
KINESIS_MOCK_VERSION=0.6.2  # as kinesis_lake/kinesis/kinesis_mock.py expects

say() { printf '[bootstrap] %s\n' "$*"; }
fail() { printf '[bootstrap] ERROR: %s\n' "$*" >&2; exit 1; }
can_apt() { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; }
apt_install() {
  if can_apt; then
    say "installing $* with apt-get"
    if ! apt-get install -y -qq "$@" >/dev/null 2>&1; then
      apt-get update -qq >/dev/null 2>&1 || true
      apt-get install -y -qq "$@" >/dev/null
    fi
  else
    return 1
  fi
}

java_major() {
  java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n1
}

ensure_java() {
  local major
  major=$(java_major 2>/dev/null || true)
  if [ -z "$major" ] || [ "$major" -lt 17 ]; then
    apt_install openjdk-17-jre-headless || true
    major=$(java_major 2>/dev/null || true)
  fi
  if [ -z "$major" ] || [ "$major" -lt 17 ]; then
    fail "Spark 4 needs Java 17 or newer and none was found. Install it (Debian/Ubuntu: \
'sudo apt-get install openjdk-17-jre-headless'; macOS: 'brew install openjdk@17') and \
make sure 'java -version' reports 17+."
  fi
  say "java $major ok"
}

ensure_python() {
  "$PYTHON" -c 'import sys; assert sys.version_info >= (3, 11)' 2>/dev/null \
    || fail "Python 3.11+ is needed as '$PYTHON' (set PYTHON=/path/to/python3.11)."
  if [ ! -x .venv/bin/python ]; then
    say "creating virtualenv .venv"
    "$PYTHON" -m venv .venv || fail "could not create a virtualenv: install python3-venv."
  fi
  say "installing Python packages from requirements.lock (pinned and hashed)"
  # -qq: errors only. A machine's pip configuration may name package mirrors that are not
  # there, and pip then warns once per package; what is installed is pinned and hashed.
  .venv/bin/pip install -qq --upgrade pip setuptools wheel
  # Exactly the locked versions, each checked against its hash: a fresh clone gets what
  # CI tested, not whatever is newest today. `make lock` updates the lock.
  .venv/bin/pip install -qq --require-hashes --no-deps -r requirements.lock
  # compat mode puts the repo on sys.path, so Spark's auto-registration of the
  # top-level pyspark_kinesis module finds it. --no-deps: everything came from the lock.
  # setuptools warns at length about every editable mode; the choice is deliberate.
  PYTHONWARNINGS=ignore .venv/bin/pip install -qq --no-deps -e . \
    --config-settings editable_mode=compat
}

ensure_class_archive() {
  # Spark's classes recorded once, mapped by every local driver JVM after (starts sooner).
  say "recording Spark's classes for faster JVM starts"
  .venv/bin/python -m kinesis_lake.spark.runtime.record_class_archive \
    || say "WARNING: could not record Spark's classes: Spark works, its JVM starts slower."
}

ensure_compiled_pyspark() {
  # pyspark's own archives, which Spark puts first on every Python process's path, compiled
  # once: the processes then stop compiling PySpark each time they start.
  say "compiling pyspark's archives for faster Python worker starts"
  .venv/bin/python -m kinesis_lake.spark.runtime.compiled_pyspark \
    || say "WARNING: could not compile pyspark's archives: Spark works, its Python processes start slower."
}

ensure_kinesalite() {
  if ! command -v node >/dev/null 2>&1; then
    apt_install nodejs npm || true
  fi
  if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    say "WARNING: Node.js/npm not found: the local Kinesis endpoint falls back to moto \
(pure Python, slower, no correct resharding). Install Node 18+ for kinesalite."
    return 0
  fi
  if [ ! -f "$NODE_PREFIX/node_modules/kinesalite/package.json" ]; then
    say "installing kinesalite@$KINESALITE_VERSION into $NODE_PREFIX"
    mkdir -p "$NODE_PREFIX"
    npm install --silent --no-audit --no-fund --prefix "$NODE_PREFIX" \
      "kinesalite@$KINESALITE_VERSION" >/dev/null
  fi
  say "kinesalite ok ($(node --version))"
  # kinesis-mock: the local endpoint that serves SubscribeToShard (enhanced fan-out tests).
  if [ ! -f "$NODE_PREFIX/node_modules/kinesis-local/main.js" ]; then
    say "installing kinesis-local@$KINESIS_MOCK_VERSION (kinesis-mock) into $NODE_PREFIX"
    npm install --silent --no-audit --no-fund --prefix "$NODE_PREFIX" \
      "kinesis-local@$KINESIS_MOCK_VERSION" >/dev/null
  fi
}

ensure_test_tools() {
  if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
    apt_install chromium || true
  fi
  if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
    say "chromium ok"
  else
    say "WARNING: Chromium not found and could not be installed: the browser test will \
fail with instructions. Debian/Ubuntu: 'sudo apt-get install chromium'."
  fi
}

if [ "${1:-}" = "--test-tools" ]; then
  ensure_test_tools
  exit 0
fi
ensure_java
ensure_python
ensure_compiled_pyspark
ensure_class_archive
ensure_kinesalite
say "ready"
