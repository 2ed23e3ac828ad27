"""How the spark-submit entry point reads what each platform hands it."""

from __future__ import annotations

import json

from kinesis_lake.submit import parse_invocation


def test_spark_submit_arguments_are_the_command() -> None:
    command, env, pipes = parse_invocation(["ingest", "--derive", "--stream", "clicks"])
    assert (command, env, pipes) == (["ingest", "--derive", "--stream", "clicks"], {}, {})


def test_a_glue_job_gives_the_command_as_one_parameter_among_glue_s_own() -> None:
    argv = [
        "--JOB_ID",
        "j_1",
        "--kinesis-lake-args",
        "ingest --derive",
        "--kinesis-lake-env",
        json.dumps({"KINESIS_STREAM_NAME": "events", "KINESIS_SHARD_COUNT": 4}),
        "--dagster-pipes-context",
        "CTX",
        "--dagster-pipes-messages",
        "MSG",
        "--JOB_RUN_ID",
        "jr_1",
    ]
    command, env, pipes = parse_invocation(argv)
    assert command == ["ingest", "--derive"]
    assert env == {"KINESIS_STREAM_NAME": "events", "KINESIS_SHARD_COUNT": "4"}
    assert pipes == {"DAGSTER_PIPES_CONTEXT": "CTX", "DAGSTER_PIPES_MESSAGES": "MSG"}
