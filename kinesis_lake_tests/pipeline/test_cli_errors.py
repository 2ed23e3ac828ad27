"""Errors of ours print one line; ``--debug`` prints the trace; bugs keep their trace.

Each case runs the real CLI process. The Spark case fails inside the running query (the
source refuses an option on the driver), where the error comes back wrapped by Py4J and
Spark's streaming machinery: the line must still be our message, not 40 lines of Java.
"""

from __future__ import annotations

import subprocess
import sys

from kinesis_lake_tests.pipeline_helpers import produce, settings_env


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kinesis_lake.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )


def test_a_configuration_error_is_one_line_and_debug_shows_the_trace(
    settings_factory, moto_endpoint
):
    env = {**settings_env(settings_factory(moto_endpoint)), "KINESIS_SHARD_COUNT": "0"}

    plain = _cli(env, "settings")
    debug = _cli(env, "--debug", "settings")

    assert plain.returncode != 0
    assert plain.stderr.strip().splitlines() == [
        "kinesis-lake: configuration error: KINESIS_SHARD_COUNT=0: it must be a whole number >= 1."
    ]
    assert debug.returncode != 0
    assert "Traceback" in debug.stderr and "SettingsError" in debug.stderr


def test_an_error_raised_inside_spark_is_one_line_naming_the_spark_log(
    kinesalite_endpoint, settings_factory
):
    settings = settings_factory(kinesalite_endpoint)
    produce(settings, 5, seed=9)
    env = {
        **settings_env(settings),
        "KINESIS_STARTING_POSITION": "at_timestamp",
        "KINESIS_STARTING_TIMESTAMP": "yesterday",
    }

    failed = _cli(env, "ingest")

    assert failed.returncode != 0
    lines = failed.stderr.strip().splitlines()
    assert len(lines) == 2, failed.stderr[-3000:]
    assert lines[0].startswith("kinesis-lake: ") and "yesterday" in lines[0]
    assert "Traceback" not in failed.stderr and "py4j" not in failed.stderr.lower()
    assert lines[1] == f"(Spark's log: {settings.log_dir / 'spark.log'})"
